#include "node/session/session_history.h"

#include "gtest/gtest.h"

namespace tally {
namespace node {
namespace {

SessionRecord Numbered(uint64_t n) {
  SessionRecord record;
  record.start = absl::FromUnixSeconds(1700000000 + static_cast<int64_t>(n));
  record.rows_received = n;
  record.outcome = n % 2 == 0 ? "ok" : "UNAVAILABLE: down";
  return record;
}

TEST(SessionHistory, StartsEmpty) {
  SessionHistory history(4);
  EXPECT_EQ(history.size(), 0u);
  EXPECT_EQ(history.capacity(), 4u);
  EXPECT_TRUE(history.Newest().empty());
}

TEST(SessionHistory, ListsNewestFirstBelowCapacity) {
  SessionHistory history(4);
  for (uint64_t n = 1; n <= 3; ++n) history.Record(Numbered(n));
  const std::vector<SessionRecord> newest = history.Newest();
  ASSERT_EQ(newest.size(), 3u);
  EXPECT_EQ(newest[0].rows_received, 3u);
  EXPECT_EQ(newest[1].rows_received, 2u);
  EXPECT_EQ(newest[2].rows_received, 1u);
}

TEST(SessionHistory, ForgetsTheOldestPastCapacity) {
  SessionHistory history(4);
  for (uint64_t n = 1; n <= 11; ++n) history.Record(Numbered(n));
  const std::vector<SessionRecord> newest = history.Newest();
  ASSERT_EQ(newest.size(), 4u);
  EXPECT_EQ(history.size(), 4u);
  for (size_t i = 0; i < newest.size(); ++i) {
    EXPECT_EQ(newest[i].rows_received, 11 - i) << i;
  }
}

TEST(SessionHistory, CapacityOneKeepsTheLastSession) {
  SessionHistory history(1);
  history.Record(Numbered(1));
  history.Record(Numbered(2));
  ASSERT_EQ(history.Newest().size(), 1u);
  EXPECT_EQ(history.Newest()[0].rows_received, 2u);
}

TEST(SessionHistory, ProtoCarriesEveryField) {
  SessionRecord record = Numbered(7);
  record.duration = absl::Milliseconds(1500);
  record.trigger = SessionTrigger::kRequested;
  record.keyspaces = 3;
  record.differences = 12;
  record.rows_sent = 5;
  record.rows_erased = 2;
  record.conflicts = 1;
  record.bytes_repaired = 4096;
  v1::SessionRecord proto;
  SessionRecordToProto(record, &proto);
  EXPECT_EQ(proto.started_unix_ms(), (1700000000 + 7) * int64_t{1000});
  EXPECT_DOUBLE_EQ(proto.seconds(), 1.5);
  EXPECT_EQ(proto.trigger(), "requested");
  EXPECT_EQ(proto.outcome(), "UNAVAILABLE: down");
  EXPECT_EQ(proto.keyspaces(), 3u);
  EXPECT_EQ(proto.differences(), 12u);
  EXPECT_EQ(proto.rows_received(), 7u);
  EXPECT_EQ(proto.rows_sent(), 5u);
  EXPECT_EQ(proto.rows_erased(), 2u);
  EXPECT_EQ(proto.conflicts(), 1u);
  EXPECT_EQ(proto.bytes_repaired(), 4096u);
}

}  // namespace
}  // namespace node
}  // namespace tally
