#include "tools/cli/histogram_quantile.h"

#include "gtest/gtest.h"

namespace tally {
namespace cli {
namespace {

v1::DurationHistogram Histogram(std::vector<double> bounds,
                                std::vector<uint64_t> counts) {
  v1::DurationHistogram h;
  uint64_t total = 0;
  for (double b : bounds) h.add_upper_bounds(b);
  for (uint64_t c : counts) {
    h.add_counts(c);
    total += c;
  }
  h.set_count(total);
  return h;
}

// As Prometheus's histogram_quantile(): linear within the bucket that
// holds the rank, the first bucket starting at 0.
TEST(HistogramQuantile, InterpolatesWithinTheBucketThatHoldsTheRank) {
  // 10 sessions: 4 took up to 1 s, 4 between 1 and 5 s, 2 between 5 and 10.
  const v1::DurationHistogram h = Histogram({1, 5, 10}, {4, 4, 2, 0});
  absl::StatusOr<Quantile> p50 = HistogramQuantile(0.5, h);
  ASSERT_TRUE(p50.ok()) << p50.status();
  // Rank 5: the first of the second bucket's 4, a quarter of 1..5.
  EXPECT_DOUBLE_EQ(p50->seconds, 2.0);
  EXPECT_FALSE(p50->above_last_bound);
  absl::StatusOr<Quantile> p90 = HistogramQuantile(0.9, h);
  ASSERT_TRUE(p90.ok());
  // Rank 9: half of the third bucket, 5..10.
  EXPECT_DOUBLE_EQ(p90->seconds, 7.5);
  absl::StatusOr<Quantile> p20 = HistogramQuantile(0.2, h);
  ASSERT_TRUE(p20.ok());
  EXPECT_DOUBLE_EQ(p20->seconds, 0.5);
}

TEST(HistogramQuantile, InTheInfBucketIsOnlyKnownToExceedTheLastBound) {
  const v1::DurationHistogram h = Histogram({1, 5}, {1, 0, 9});
  absl::StatusOr<Quantile> p50 = HistogramQuantile(0.5, h);
  ASSERT_TRUE(p50.ok());
  EXPECT_TRUE(p50->above_last_bound);
  EXPECT_DOUBLE_EQ(p50->seconds, 5);
}

TEST(HistogramQuantile, NothingCountedHasNoQuantile) {
  EXPECT_TRUE(absl::IsFailedPrecondition(
      HistogramQuantile(0.5, Histogram({1, 5}, {0, 0, 0})).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(
      HistogramQuantile(0.5, v1::DurationHistogram()).status()));
}

TEST(HistogramQuantile, RejectsABadQuantileOrHistogram) {
  const v1::DurationHistogram good = Histogram({1}, {1, 0});
  EXPECT_TRUE(absl::IsInvalidArgument(HistogramQuantile(1.5, good).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(HistogramQuantile(-0.1, good).status()));
  // Counts not one more than the bounds.
  EXPECT_TRUE(absl::IsInvalidArgument(
      HistogramQuantile(0.5, Histogram({1, 5}, {1, 1})).status()));
  // Bounds not ascending.
  EXPECT_TRUE(absl::IsInvalidArgument(
      HistogramQuantile(0.5, Histogram({5, 1}, {1, 1, 0})).status()));
}

}  // namespace
}  // namespace cli
}  // namespace tally
