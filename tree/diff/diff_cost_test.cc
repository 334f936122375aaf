#include "tree/diff/diff_cost.h"

#include <cmath>

#include "gtest/gtest.h"
#include "tree/fingerprint.h"
#include "tree/tree_view.h"

namespace tally {
namespace tree {
namespace internal {
namespace {

TEST(DiffCost, VarintBytesFollowSevenBitGroups) {
  EXPECT_EQ(VarintBytes(0), 1u);
  EXPECT_EQ(VarintBytes(127), 1u);
  EXPECT_EQ(VarintBytes(128), 2u);
  EXPECT_EQ(VarintBytes(16383), 2u);
  EXPECT_EQ(VarintBytes(16384), 3u);
  EXPECT_EQ(VarintBytes(~uint64_t{0}), 10u);
  EXPECT_EQ(VarintBytesOf(-5), 1.0);
  EXPECT_EQ(VarintBytesOf(300.7), 2.0);
}

TEST(DiffCost, FingerprintsWidenWithTheDifferencesExpected) {
  // log2(4 d / 1%): 19 bits at d = 1,000.
  EXPECT_EQ(FingerprintBits(1000, 0.01), 19);
  // Each doubling of d costs a bit.
  EXPECT_EQ(FingerprintBits(2000, 0.01), 20);
  // Clamped to the widths a view answers.
  EXPECT_EQ(FingerprintBits(0, 0.5), kMinFingerprintBits);
  EXPECT_EQ(FingerprintBits(1e12, 1e-12), kMaxFingerprintBits);
  // A miss probability out of range is clamped, not a division by zero.
  EXPECT_EQ(FingerprintBits(1000, 0), kMaxFingerprintBits);
}

TEST(DiffCost, TheRoundBudgetGrowsOneRoundPerTenfold) {
  DiffOptions options;  // 4 rounds up to 2M rows, at most 6
  EXPECT_EQ(RoundBudget(0, options), 4);
  EXPECT_EQ(RoundBudget(2'000'000, options), 4);
  EXPECT_EQ(RoundBudget(2'000'001, options), 5);
  EXPECT_EQ(RoundBudget(20'000'000, options), 5);
  EXPECT_EQ(RoundBudget(20'000'001, options), 6);
  EXPECT_EQ(RoundBudget(1'000'000'000'000, options), 6);
  options.max_rounds = 3;
  EXPECT_EQ(RoundBudget(100, options), 3);
}

TEST(DiffCost, AskingOwnFirstSendsRowsOnlyForDifferences) {
  const WireCost plain = CostOf(AskMode::kPlain, 64, 64, 50, 0);
  const WireCost seeded = CostOf(AskMode::kSeeded, 19, 35, 50, 0);
  const WireCost own = CostOf(AskMode::kOwnFirst, 19, 35, 50, 1);
  // Both views list every row of a listed range, whole.
  EXPECT_EQ(plain.listed_row, 100);
  EXPECT_EQ(seeded.listed_row, 100);
  EXPECT_EQ(plain.differing_row, 0);
  // Seeded: two short fingerprints a child instead of two 64-bit ones.
  EXPECT_LT(seeded.Child(1000), plain.Child(1000));
  // Own first: a fingerprint and a bit per listed row, the row itself only
  // where it differs; a child's count only where it differs.
  EXPECT_DOUBLE_EQ(own.listed_row, 35 / 8.0 + 1 / 8.0);
  EXPECT_EQ(own.differing_row, 50);
  EXPECT_EQ(own.child_counts, 0);
  EXPECT_GT(own.MismatchedChild(1000), 0);
  EXPECT_LT(own.Child(1000), seeded.Child(1000));
  // Reading is priced for both views, however they are asked.
  EXPECT_EQ(own.Read(10), 20);
  EXPECT_EQ(plain.Read(10), 0);
}

TEST(DiffCost, WithOneRoundLeftANodeIsListed) {
  CostModel model(CostOf(AskMode::kSeeded, 19, 35, 50, 0));
  const CostModel::Choice choice = model.Best(1000, 1, 1, 16, 0);
  EXPECT_EQ(choice.levels, 0);
  EXPECT_DOUBLE_EQ(choice.bytes, model.ListBytes(1000, 1));
}

TEST(DiffCost, ALargeNodeWithRoundsLeftIsExpandedAndCostsLessThanAListing) {
  CostModel model(CostOf(AskMode::kSeeded, 19, 35, 50, 0));
  const CostModel::Choice choice = model.Best(100'000, 10, 3, 16, 16);
  EXPECT_GT(choice.levels, 0);
  EXPECT_LT(choice.bytes, model.ListBytes(100'000, 10) / 100);
  // The same question answers the same (memoised) choice.
  const CostModel::Choice again = model.Best(100'000, 10, 3, 16, 16);
  EXPECT_EQ(again.levels, choice.levels);
  EXPECT_EQ(again.bytes, choice.bytes);
}

TEST(DiffCost, ReadingRowsStopsADescentAtTheLeaves) {
  // A node of 1,220 rows 4 levels above leaves of 76 rows (5M rows in a
  // depth-16 tree, at level 12), one difference, one descent left before
  // the listing. By bytes alone the descent goes past the leaves, to
  // isolate the row; priced, reading all 1,220 rows to answer below the
  // leaves costs more than listing a leaf, and it stops at them.
  CostModel bytes_only(CostOf(AskMode::kOwnFirst, 19, 35, 50, 0));
  CostModel with_reads(CostOf(AskMode::kOwnFirst, 19, 35, 50, 1));
  const int to_leaf = 4;
  const CostModel::Choice by_bytes = bytes_only.Best(1220, 1, 2, 16, to_leaf);
  const CostModel::Choice priced = with_reads.Best(1220, 1, 2, 16, to_leaf);
  EXPECT_GT(by_bytes.levels, to_leaf);
  EXPECT_GT(priced.levels, 0);
  EXPECT_LE(priced.levels, to_leaf);
  // Its bytes are a little more than the bytes-only choice's.
  EXPECT_GE(priced.bytes, by_bytes.bytes);
}

}  // namespace
}  // namespace internal
}  // namespace tree
}  // namespace tally
