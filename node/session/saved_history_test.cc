#include "node/session/saved_history.h"

#include <fstream>

#include "gtest/gtest.h"
#include "support/temp_dir.h"

namespace tally {
namespace node {
namespace {

using ::tally::testing::TempDir;

TEST(SavedHistory, WhatIsWrittenIsReadBack) {
  TempDir dir;
  SessionRecord ok;
  ok.start = absl::FromUnixMillis(1'700'000'000'123);
  ok.duration = absl::Milliseconds(250);
  ok.outcome = "ok";
  ok.keyspaces = 2;
  ok.differences = 7;
  ok.rows_received = 3;
  ok.rows_sent = 4;
  SessionRecord failed = ok;
  failed.trigger = SessionTrigger::kRequested;
  failed.outcome = "UNAVAILABLE: gone";
  // The newest session found nothing, the one before found two keys of
  // "users" in segment 5, one repaired.
  SegmentCounts users;
  users.differences[5] = 2;
  users.rows_repaired[5] = 1;
  SavedPeer peer;
  peer.records = {failed, ok};
  peer.heat = {{}, {{"users", users}}};
  ASSERT_TRUE(WriteSavedHistory(
                  dir.path(), {{"10.0.0.2:7400", peer}, {"10.0.0.3:7400", {}}})
                  .ok());
  auto read = ReadSavedHistory(dir.path());
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 1u);
  const std::vector<SessionRecord>& records = read->at("10.0.0.2:7400").records;
  const auto& heat = read->at("10.0.0.2:7400").heat;
  ASSERT_EQ(heat.size(), 2u);
  EXPECT_TRUE(heat[0].empty());
  ASSERT_EQ(heat[1].count("users"), 1u);
  EXPECT_EQ(heat[1].at("users").differences[5], 2u);
  EXPECT_EQ(heat[1].at("users").rows_repaired[5], 1u);
  // Restored into a heat history, the status shows the same map.
  RepairHeatHistory restored;
  for (auto it = heat.rbegin(); it != heat.rend(); ++it) {
    restored.AddSessionCounts(*it);
  }
  v1::PeerStatus status;
  restored.ToProto(&status);
  EXPECT_EQ(status.heat_sessions(), 2u);
  ASSERT_EQ(status.heat_size(), 1);
  EXPECT_EQ(status.heat(0).keyspace(), "users");
  EXPECT_EQ(status.heat(0).last_size(), 0);  // the last session found none
  ASSERT_EQ(status.heat(0).recent_size(), 1);
  EXPECT_EQ(status.heat(0).recent(0).differences(), 2u);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].outcome, "UNAVAILABLE: gone");
  EXPECT_EQ(records[0].trigger, SessionTrigger::kRequested);
  EXPECT_EQ(records[1].start, ok.start);
  EXPECT_EQ(records[1].duration, ok.duration);
  EXPECT_EQ(records[1].rows_sent, 4u);
}

TEST(SavedHistory, NoFileIsNoHistoryAndGarbageIsRefused) {
  TempDir dir;
  auto none = ReadSavedHistory(dir.path());
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  { std::ofstream(dir.path() + "/session-history") << "\xff\xff\xff garbage"; }
  EXPECT_EQ(ReadSavedHistory(dir.path()).status().code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace node
}  // namespace tally
