#include "mariadb/capture/commit_stamps.h"

#include "gtest/gtest.h"

namespace tally {
namespace mariadb {
namespace {

TEST(BinlogCommitStamps, ASecondsFirstTransactionIsAtItsFirstMillisecond) {
  BinlogCommitStamps stamps;
  const tree::HlcTimestamp t = stamps.Next(1796400000);
  EXPECT_EQ(t.physical_millis(), uint64_t{1796400000} * 1000);
  EXPECT_EQ(t.counter(), 0u);
}

TEST(BinlogCommitStamps, TransactionsOfOneSecondOrderByTheLog) {
  BinlogCommitStamps stamps;
  const tree::HlcTimestamp a = stamps.Next(100);
  const tree::HlcTimestamp b = stamps.Next(100);
  const tree::HlcTimestamp c = stamps.Next(100);
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  EXPECT_EQ(c.physical_millis(), 100000u);
  EXPECT_EQ(c.counter(), 2u);
  // The next second starts at its own first millisecond again.
  const tree::HlcTimestamp d = stamps.Next(101);
  EXPECT_EQ(d.physical_millis(), 101000u);
  EXPECT_EQ(d.counter(), 0u);
}

TEST(BinlogCommitStamps, AClockThatWentBackStillIncreases) {
  BinlogCommitStamps stamps;
  const tree::HlcTimestamp a = stamps.Next(200);
  const tree::HlcTimestamp b = stamps.Next(150);
  EXPECT_LT(a, b);
}

TEST(BinlogCommitStamps, AFullCounterCarriesIntoTheNextMillisecond) {
  BinlogCommitStamps stamps;
  stamps.Resume(
      tree::HlcTimestamp::FromParts(300000, tree::HlcTimestamp::kMaxCounter));
  const tree::HlcTimestamp t = stamps.Next(300);
  EXPECT_EQ(t.physical_millis(), 300001u);
  EXPECT_EQ(t.counter(), 0u);
}

TEST(BinlogCommitStamps, TheSameLogGivesTheSameStamps) {
  BinlogCommitStamps first;
  BinlogCommitStamps again;
  for (uint32_t second : {10u, 10u, 11u, 9u, 11u, 12u}) {
    EXPECT_EQ(first.Next(second), again.Next(second));
  }
}

}  // namespace
}  // namespace mariadb
}  // namespace tally
