#include "node/sync/bandwidth_limiter.h"

#include <atomic>
#include <limits>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tally {
namespace node {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

TEST(BandwidthLimiter, TakersShareOneTimeline) {
  BandwidthLimiter limit(1e6);  // 1 MB/s
  // Two sessions each moving 1 MB at the same instant: the second waits
  // for the first's second as well as its own.
  EXPECT_EQ(limit.Reserve(1'000'000, kNow), absl::ZeroDuration());
  EXPECT_EQ(limit.Reserve(1'000'000, kNow), absl::Seconds(1));
  EXPECT_EQ(limit.Reserve(500'000, kNow), absl::Seconds(1.5));
}

TEST(BandwidthLimiter, AnIdleNodeBanksAtMostOneSecond) {
  BandwidthLimiter limit(1e6);
  limit.Reserve(1'000'000, kNow);
  // An hour idle, then 3 MB at once: one second of burst, two of waiting.
  const absl::Time later = kNow + absl::Hours(1);
  EXPECT_EQ(limit.Reserve(3'000'000, later), absl::Seconds(2));
}

TEST(BandwidthLimiter, ACancelledTakerStopsWaiting) {
  BandwidthLimiter limit(1000);  // 1 kB/s
  std::atomic<bool> cancelled{false};
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(100));
    cancelled.store(true);
  });
  const absl::Time start = absl::Now();
  // A minute's worth: returns at the cancel, not after a minute.
  const absl::Status taken = limit.Take(60'000, &cancelled);
  canceller.join();
  EXPECT_TRUE(absl::IsCancelled(taken)) << taken;
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

TEST(BandwidthLimiter, ANewRatePacesTheBacklogAndLaterTakers) {
  BandwidthLimiter limit(1e6);  // 1 MB/s
  EXPECT_EQ(limit.Reserve(1'000'000, kNow), absl::ZeroDuration());
  EXPECT_EQ(limit.Reserve(2'000'000, kNow), absl::Seconds(2));
  // 2 s of backlog at 1 MB/s are 2 MB: at 4 MB/s they take half a second,
  // and the next megabyte a quarter more.
  ASSERT_TRUE(limit.SetBytesPerSecondAt(4e6, kNow).ok());
  EXPECT_EQ(limit.bytes_per_second(), 4e6);
  EXPECT_EQ(limit.Reserve(1'000'000, kNow), absl::Seconds(0.75));
  // Lowered: the backlog (0.75 s at 4 MB/s = 3 MB) takes 3 s at 1 MB/s,
  // and the next megabyte one more.
  ASSERT_TRUE(limit.SetBytesPerSecondAt(1e6, kNow).ok());
  EXPECT_EQ(limit.Reserve(1'000'000, kNow), absl::Seconds(4));
}

TEST(BandwidthLimiter, RateZeroIsUnlimitedAndCanBeLimitedLater) {
  BandwidthLimiter limit(0);
  EXPECT_EQ(limit.Reserve(1'000'000'000, kNow), absl::ZeroDuration());
  EXPECT_EQ(limit.Reserve(1'000'000'000, kNow), absl::ZeroDuration());
  // Nothing banked while unlimited: the first megabyte is the burst, the
  // second waits its second.
  ASSERT_TRUE(limit.SetBytesPerSecondAt(1e6, kNow).ok());
  EXPECT_EQ(limit.Reserve(1'000'000, kNow), absl::ZeroDuration());
  EXPECT_EQ(limit.Reserve(1'000'000, kNow), absl::Seconds(1));
  // Lifted: no wait, whatever was reserved.
  ASSERT_TRUE(limit.SetBytesPerSecondAt(0, kNow).ok());
  EXPECT_EQ(limit.bytes_per_second(), 0);
  EXPECT_EQ(limit.Reserve(5'000'000, kNow), absl::ZeroDuration());
}

TEST(BandwidthLimiter, RejectsANegativeOrNonFiniteRate) {
  BandwidthLimiter limit(1e6);
  for (double bad : {-1.0, std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::quiet_NaN()}) {
    const absl::Status set = limit.SetBytesPerSecond(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(set)) << bad << ": " << set;
  }
  EXPECT_EQ(limit.bytes_per_second(), 1e6);
}

// A repair waiting out a minute at 1 kB/s when the operator raises the
// limit (SIGHUP): it goes on within moments, not after the minute.
TEST(BandwidthLimiter, ARaisedRateFreesATakerThatIsWaiting) {
  BandwidthLimiter limit(1000);
  std::thread raiser([&] {
    absl::SleepFor(absl::Milliseconds(200));
    ASSERT_TRUE(limit.SetBytesPerSecond(1e9).ok());
  });
  const absl::Time start = absl::Now();
  const absl::Status taken = limit.Take(60'000, /*cancelled=*/nullptr);
  raiser.join();
  EXPECT_TRUE(taken.ok()) << taken;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST(BandwidthLimiter, StatusShowsTheRateInForce) {
  BandwidthLimiter limit(0);
  v1::StatusResponse status;
  limit.FillStatus(&status);
  EXPECT_EQ(status.node_bandwidth_bytes_per_second(), 0);
  ASSERT_TRUE(limit.SetBytesPerSecond(2.5e6).ok());
  limit.FillStatus(&status);
  EXPECT_EQ(status.node_bandwidth_bytes_per_second(), 2.5e6);
}

}  // namespace
}  // namespace node
}  // namespace tally
