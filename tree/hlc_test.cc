#include "tree/hlc.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tree/version.h"

namespace tally {
namespace tree {
namespace {

// A physical clock the test moves by hand.
struct FakePhysicalClock {
  std::atomic<uint64_t> millis{1'000'000};
  HybridClock::PhysicalClock AsFunction() {
    return [this] { return millis.load(); };
  }
};

HybridClock::Options OptionsWith(FakePhysicalClock& fake,
                                 absl::Duration skew = absl::Seconds(10)) {
  HybridClock::Options options;
  options.physical_clock = fake.AsFunction();
  options.max_forward_skew = skew;
  return options;
}

TEST(HybridClock, NowIsStrictlyMonotonicWhenTimeStandsStill) {
  FakePhysicalClock fake;
  HybridClock clock(OptionsWith(fake));
  HlcTimestamp last = clock.Now();
  EXPECT_EQ(last.physical_millis(), 1'000'000u);
  for (int i = 0; i < 100000; ++i) {  // more than the 16-bit counter holds
    const HlcTimestamp t = clock.Now();
    ASSERT_LT(last, t);
    last = t;
  }
}

TEST(HybridClock, NowIsMonotonicWhenPhysicalTimeGoesBackwards) {
  FakePhysicalClock fake;
  HybridClock clock(OptionsWith(fake));
  const HlcTimestamp before = clock.Now();
  fake.millis -= 5000;
  const HlcTimestamp after = clock.Now();
  EXPECT_LT(before, after);
  EXPECT_EQ(after.physical_millis(), before.physical_millis());
}

TEST(HybridClock, FollowsPhysicalTimeForward) {
  FakePhysicalClock fake;
  HybridClock clock(OptionsWith(fake));
  clock.Now();
  clock.Now();
  fake.millis += 7;
  const HlcTimestamp t = clock.Now();
  EXPECT_EQ(t.physical_millis(), 1'000'007u);
  EXPECT_EQ(t.counter(), 0u);
}

TEST(HybridClock, ObserveMovesPastAcceptedRemoteTimestamp) {
  FakePhysicalClock fake;
  HybridClock clock(OptionsWith(fake));
  const HlcTimestamp remote = HlcTimestamp::FromParts(1'005'000, 42);
  ASSERT_TRUE(clock.Observe(remote).ok());
  const HlcTimestamp next = clock.Now();
  EXPECT_LT(remote, next);
  EXPECT_EQ(next.physical_millis(), 1'005'000u);
  // An older remote timestamp changes nothing.
  ASSERT_TRUE(clock.Observe(HlcTimestamp::FromParts(10, 0)).ok());
  EXPECT_LT(next, clock.Now());
}

TEST(HybridClock, RefusesRemoteTimestampTooFarAhead) {
  FakePhysicalClock fake;
  HybridClock clock(OptionsWith(fake, absl::Seconds(10)));
  const HlcTimestamp before = clock.Now();
  const HlcTimestamp remote = HlcTimestamp::FromParts(1'000'000 + 10'001, 0);
  const absl::Status s = clock.Observe(remote);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("limit is 10000 ms"), absl::string_view::npos)
      << s;
  // Refused means unchanged.
  EXPECT_EQ(clock.Latest(), before);
  EXPECT_TRUE(clock.Observe(HlcTimestamp::FromParts(1'010'000, 0)).ok());
}

TEST(HybridClock, ConcurrentCallersNeverSeeTheSameTimestamp) {
  FakePhysicalClock fake;
  HybridClock clock(OptionsWith(fake));
  std::vector<std::vector<uint64_t>> seen(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10000; ++i) seen[t].push_back(clock.Now().raw());
    });
  }
  for (auto& th : threads) th.join();
  std::vector<uint64_t> all;
  for (auto& v : seen) {
    for (size_t i = 1; i < v.size(); ++i) ASSERT_LT(v[i - 1], v[i]);
    all.insert(all.end(), v.begin(), v.end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end());
}

TEST(Version, OrdersByTimestampThenOrigin) {
  const Version a{HlcTimestamp::FromParts(5, 0), "zeta"};
  const Version b{HlcTimestamp::FromParts(5, 1), "alpha"};
  const Version c{HlcTimestamp::FromParts(5, 1), "beta"};
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  EXPECT_GT(c, a);
  EXPECT_EQ(b, (Version{HlcTimestamp::FromParts(5, 1), "alpha"}));
}

}  // namespace
}  // namespace tree
}  // namespace tally
