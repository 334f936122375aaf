#include "tree/progress_meter.h"

#include <cstdint>
#include <optional>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace tally {
namespace tree {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1700000000);

absl::Time At(double seconds) { return kStart + absl::Seconds(seconds); }

TEST(ProgressMeter, RateIsTheAverageUntilAWindowHasPassed) {
  ProgressMeter meter(kStart, absl::Seconds(10));
  meter.Record(At(1), 100);
  meter.Record(At(2), 400);
  const ProgressEstimate e = meter.Estimate(At(2));
  EXPECT_EQ(e.done, 400u);
  EXPECT_DOUBLE_EQ(e.rate, 200.0);
  EXPECT_EQ(e.elapsed, absl::Seconds(2));
}

TEST(ProgressMeter, RateFollowsTheLastWindowNotTheWholeRun) {
  ProgressMeter meter(kStart, absl::Seconds(10));
  // 1000 units a second for 60 s, then 100 a second for 20 s.
  uint64_t done = 0;
  for (int s = 1; s <= 60; ++s) meter.Record(At(s), done += 1000);
  for (int s = 61; s <= 80; ++s) meter.Record(At(s), done += 100);
  const ProgressEstimate e = meter.Estimate(At(80));
  EXPECT_NEAR(e.rate, 100.0, 1e-9);
}

TEST(ProgressMeter, NoTotalMeansNoFractionAndNoTimeLeft) {
  ProgressMeter meter(kStart);
  meter.Record(At(1), 500);
  const ProgressEstimate e = meter.Estimate(At(1));
  EXPECT_GT(e.rate, 0);
  EXPECT_FALSE(e.total.has_value());
  EXPECT_FALSE(e.fraction.has_value());
  EXPECT_FALSE(e.remaining.has_value());
}

TEST(ProgressMeter, TimeLeftIsWhatRemainsAtTheCurrentRate) {
  ProgressMeter meter(kStart, absl::Seconds(10));
  meter.set_total(10000);
  for (int s = 1; s <= 20; ++s) meter.Record(At(s), 250 * s);
  const ProgressEstimate e = meter.Estimate(At(20));
  EXPECT_EQ(e.done, 5000u);
  ASSERT_TRUE(e.fraction.has_value());
  EXPECT_DOUBLE_EQ(*e.fraction, 0.5);
  ASSERT_TRUE(e.remaining.has_value());
  EXPECT_NEAR(absl::ToDoubleSeconds(*e.remaining), 20.0, 1e-6);
}

TEST(ProgressMeter, AStallBringsTheRateToZeroAndTheTimeLeftToUnknown) {
  ProgressMeter meter(kStart, absl::Seconds(10));
  meter.set_total(1000);
  meter.Record(At(1), 100);
  // Nothing more for longer than the window.
  const ProgressEstimate e = meter.Estimate(At(30));
  EXPECT_EQ(e.rate, 0);
  EXPECT_FALSE(e.remaining.has_value());
  // Half way through the window the rate has halved, not vanished.
  ProgressMeter slowing(kStart, absl::Seconds(10));
  slowing.Record(At(10), 1000);
  slowing.Record(At(20), 2000);
  EXPECT_NEAR(slowing.Estimate(At(25)).rate, 1000.0 / 15, 1e-9);
}

TEST(ProgressMeter, DoneAtTheTotalLeavesNothing) {
  ProgressMeter meter(kStart);
  meter.set_total(100);
  meter.Record(At(1), 100);
  const ProgressEstimate e = meter.Estimate(At(1));
  EXPECT_EQ(e.remaining, absl::ZeroDuration());
  EXPECT_DOUBLE_EQ(*e.fraction, 1.0);
}

TEST(ProgressMeter, PastAnEstimatedTotalTheTimeLeftIsUnknown) {
  ProgressMeter meter(kStart);
  meter.set_total(100);  // an estimate that was too low
  meter.Record(At(1), 150);
  const ProgressEstimate e = meter.Estimate(At(1));
  EXPECT_DOUBLE_EQ(*e.fraction, 1.0);
  EXPECT_FALSE(e.remaining.has_value());
}

TEST(ProgressMeter, ATotalOfZeroIsDone) {
  ProgressMeter meter(kStart);
  meter.set_total(0);
  const ProgressEstimate e = meter.Estimate(At(1));
  EXPECT_DOUBLE_EQ(*e.fraction, 1.0);
  EXPECT_EQ(e.remaining, absl::ZeroDuration());
}

TEST(ProgressMeter, AFallingCountStartsTheMeterAgain) {
  ProgressMeter meter(kStart, absl::Seconds(10));
  meter.Record(At(5), 5000);
  meter.Record(At(6), 10);  // started over at 6 s
  meter.Record(At(8), 210);
  const ProgressEstimate e = meter.Estimate(At(8));
  EXPECT_EQ(e.elapsed, absl::Seconds(2));
  EXPECT_DOUBLE_EQ(e.rate, 100.0);
}

TEST(ProgressMeter, ManyReadingsKeepTheRateExact) {
  // A reading every millisecond for a minute, at 3 units each: merged
  // readings must not bend the rate.
  ProgressMeter meter(kStart, absl::Seconds(10));
  for (int ms = 1; ms <= 60000; ++ms) {
    meter.Record(kStart + absl::Milliseconds(ms), 3 * ms);
  }
  EXPECT_NEAR(meter.Estimate(At(60)).rate, 3000.0, 1.0);
}

TEST(ProgressMeter, FormatRemainingIsShortAndRoundsUp) {
  EXPECT_EQ(FormatRemaining(absl::ZeroDuration()), "0s");
  EXPECT_EQ(FormatRemaining(absl::Milliseconds(200)), "1s");
  EXPECT_EQ(FormatRemaining(absl::Seconds(45)), "45s");
  EXPECT_EQ(FormatRemaining(absl::Seconds(185)), "3m05s");
  EXPECT_EQ(FormatRemaining(absl::Minutes(130)), "2h10m");
  EXPECT_EQ(FormatRemaining(absl::Hours(76)), "3d04h");
}

}  // namespace
}  // namespace tree
}  // namespace tally
