#include "node/feed/read_ahead.h"

#include "gtest/gtest.h"

namespace tally {
namespace node {
namespace internal {
namespace {

TEST(ReadAhead, StartsSmallWhileNoRowSizeIsKnown) {
  ReadAhead ahead;
  EXPECT_EQ(ahead.Keys(1 << 20), ReadAhead::kFirstRows);
}

TEST(ReadAhead, ReadsAboutTheRowsThatFillTheBytesLeft) {
  ReadAhead ahead;
  ahead.Saw(10, 10 * 100'000);  // rows of 100 kB
  EXPECT_EQ(ahead.Keys(1'000'000), 11u);
  EXPECT_EQ(ahead.Keys(250'000), 3u);
  // A message nearly full still reads one.
  EXPECT_EQ(ahead.Keys(0), 1u);
}

TEST(ReadAhead, SmallRowsAreReadAtMostKMaxRowsAtATime) {
  ReadAhead ahead;
  ahead.Saw(1000, 1000 * 40);
  EXPECT_EQ(ahead.Keys(1 << 20), ReadAhead::kMaxRows);
}

TEST(ReadAhead, FollowsTheAverageOfEveryRowSeen) {
  ReadAhead ahead;
  ahead.Saw(1, 1'000'000);  // one row of 1 MB
  EXPECT_EQ(ahead.Keys(1'000'000), 2u);
  ahead.Saw(99, 99 * 1'000);  // then small ones: ~11 kB on average
  EXPECT_EQ(ahead.Keys(1'000'000), 1'000'000 / (1'099'000 / 100) + 1);
}

}  // namespace
}  // namespace internal
}  // namespace node
}  // namespace tally
