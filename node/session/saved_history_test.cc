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
  ASSERT_TRUE(WriteSavedHistory(dir.path(), {{"10.0.0.2:7400", {failed, ok}},
                                             {"10.0.0.3:7400", {}}})
                  .ok());
  auto read = ReadSavedHistory(dir.path());
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 1u);
  const std::vector<SessionRecord>& records = read->at("10.0.0.2:7400");
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
