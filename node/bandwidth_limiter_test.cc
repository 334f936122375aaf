#include "node/bandwidth_limiter.h"

#include <atomic>
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

}  // namespace
}  // namespace node
}  // namespace tally
