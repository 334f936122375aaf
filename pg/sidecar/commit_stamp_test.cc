#include "pg/sidecar/commit_stamp.h"

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "pg/wire/replication_messages.h"

namespace tally {
namespace pg {
namespace {

TEST(CommitStampOf, IsTheCommitTimeToTheMicrosecond) {
  const absl::Time t = absl::FromUnixMicros(1764590000123456);
  const tree::HlcTimestamp stamp = CommitStampOf(ToPgTimestamp(t));
  EXPECT_EQ(stamp.physical_millis(), 1764590000123u);
  EXPECT_EQ(stamp.counter(), 456u);
  EXPECT_LT(stamp, CommitStampOf(ToPgTimestamp(t + absl::Microseconds(1))));
}

TEST(CommitStampOf, ATimeBeforeTheUnixEpochIsTheSmallestStamp) {
  EXPECT_EQ(CommitStampOf(ToPgTimestamp(absl::UnixEpoch())).raw(), 1u);
  EXPECT_EQ(CommitStampOf(ToPgTimestamp(absl::FromUnixSeconds(-5))).raw(), 1u);
}

TEST(CommitStamps, FollowCommitTimesAndStrictlyIncrease) {
  const int64_t t = ToPgTimestamp(absl::FromUnixMicros(1764590000123456));
  CommitStamps stamps;
  const tree::HlcTimestamp first = stamps.Next(t);
  EXPECT_EQ(first, CommitStampOf(t));
  // Later commit: its own time.
  const tree::HlcTimestamp second = stamps.Next(t + 2000);
  EXPECT_EQ(second, CommitStampOf(t + 2000));
  // Same microsecond, then an earlier commit time: just after the last.
  EXPECT_EQ(stamps.Next(t + 2000).raw(), second.raw() + 1);
  EXPECT_EQ(stamps.Next(t).raw(), second.raw() + 2);
  // After a restart: after the stored stamp, even for an older commit.
  CommitStamps restarted;
  restarted.After(second);
  EXPECT_EQ(restarted.Next(t).raw(), second.raw() + 1);
  EXPECT_EQ(restarted.Bump().raw(), second.raw() + 2);
  EXPECT_EQ(restarted.Next(t + 5000), CommitStampOf(t + 5000));
}

}  // namespace
}  // namespace pg
}  // namespace tally
