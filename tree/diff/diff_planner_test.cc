#include "tree/diff/diff_planner.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "tree/diff/diff_cost.h"
#include "tree/token.h"
#include "tree/tree_view.h"

namespace tally {
namespace tree {
namespace internal {
namespace {

// A third party's costs at 20-bit fingerprints and 80-byte rows.
CostModel ThirdPartyModel() {
  return CostModel(CostOf(AskMode::kSeeded, 20, 36, 80, 1));
}

Pending NodeWith(int level, uint64_t index, uint64_t count_a, uint64_t count_b,
                 double expected = 1) {
  return Pending{NodeRef{level, index}, count_a, count_b, expected};
}

TEST(DiffPlanner, StreamsTheSideThatHasRows) {
  const DiffOptions options;
  const DiffPlanner planner(options, 1000, 16);
  CostModel model = ThirdPartyModel();
  EXPECT_EQ(planner.Plan(NodeWith(8, 3, 0, 500), 4, model).step, Step::kScanB);
  EXPECT_EQ(planner.Plan(NodeWith(8, 3, 500, 0), 4, model).step, Step::kScanA);
}

TEST(DiffPlanner, ListsRangesAtTheThresholdAndSingleTokens) {
  DiffOptions options;
  options.list_threshold = 3;
  const DiffPlanner planner(options, 1000, 16);
  CostModel model = ThirdPartyModel();
  const Planned small = planner.Plan(NodeWith(20, 7, 3, 2), 4, model);
  EXPECT_EQ(small.step, Step::kList);
  EXPECT_EQ(small.levels_ahead, 0);
  EXPECT_EQ(small.pending.node, (NodeRef{20, 7}));
  // One token cannot be split further, however many rows it holds.
  EXPECT_EQ(planner.Plan(NodeWith(kTokenBits, 7, 500, 500), 4, model).step,
            Step::kList);
}

TEST(DiffPlanner, ListsWhenTheLastRoundHasCome) {
  const DiffOptions options;  // lists up to 64 rows
  const DiffPlanner planner(options, 1'000'000, 16);
  CostModel model = ThirdPartyModel();
  EXPECT_EQ(planner.Plan(NodeWith(20, 7, 60, 61), 1, model).step, Step::kList);
}

TEST(DiffPlanner, RangesTooLargeToListDescendEvenPastTheBudget) {
  const DiffOptions options;
  const DiffPlanner planner(options, 1'000'000, 16);
  CostModel model = ThirdPartyModel();
  for (int rounds : {0, 1}) {
    const Planned p = planner.Plan(NodeWith(10, 7, 1000, 1001), rounds, model);
    EXPECT_EQ(p.step, Step::kDescend) << rounds;
    EXPECT_GE(p.levels_ahead, 1) << rounds;
  }
}

TEST(DiffPlanner, RoundsToSpareBuyDeepDescents) {
  const DiffOptions options;
  const DiffPlanner planner(options, 1'000'000, 16);
  CostModel model = ThirdPartyModel();
  // One difference among a million rows: listing costs megabytes; a
  // descent of several levels a round isolates it for kilobytes.
  const Planned p = planner.Plan(NodeWith(5, 7, 30'000, 30'000), 3, model);
  EXPECT_EQ(p.step, Step::kDescend);
  EXPECT_GT(p.levels_ahead, 1);
  EXPECT_LE(p.levels_ahead, options.max_levels_per_round);
}

TEST(DiffPlanner, NeverDescendsPastOneToken) {
  const DiffOptions options;
  const DiffPlanner planner(options, 1'000'000, 16);
  CostModel model = ThirdPartyModel();
  const Planned p =
      planner.Plan(NodeWith(kTokenBits - 2, 7, 1000, 1000), 1, model);
  EXPECT_EQ(p.step, Step::kDescend);
  EXPECT_GE(p.levels_ahead, 1);
  EXPECT_LE(p.levels_ahead, 2);
}

TEST(DiffPlanner, OneRoundWhenListingIsCheaperThanARoundTrip) {
  const DiffOptions options;
  const DiffPlanner planner(options, 1'000'000, 16);
  CostModel model = ThirdPartyModel();
  // A few small ranges: listing them costs less than round_price_bytes.
  const std::vector<Pending> frontier{NodeWith(20, 1, 5, 6),
                                      NodeWith(20, 9, 4, 4)};
  EXPECT_EQ(planner.ChooseRounds(frontier, 2, model), 1);
}

TEST(DiffPlanner, TwoRoundsWhileARangeIsTooLargeToList) {
  const DiffOptions options;
  const DiffPlanner planner(options, 1'000'000, 16);
  CostModel model = ThirdPartyModel();
  const std::vector<Pending> frontier{NodeWith(20, 1, 5, 6),
                                      NodeWith(12, 9, 400, 401)};
  // Even with the budget spent.
  EXPECT_EQ(planner.ChooseRounds(frontier, 20, model), 2);
}

TEST(DiffPlanner, AddsRoundsWhileTheySaveEnough) {
  const DiffOptions options;  // 5 rounds for 10M rows
  ASSERT_EQ(RoundBudget(10'000'000, options), 5);
  const DiffPlanner planner(options, 10'000'000, 16);
  CostModel model = ThirdPartyModel();
  // A thousand differences below one node of 300k rows per view.
  const std::vector<Pending> frontier{NodeWith(5, 3, 300'000, 300'000, 1000)};
  // The handshake and this round are taken: at most 4 left.
  const int rounds = planner.ChooseRounds(frontier, 2, model);
  EXPECT_GE(rounds, 3);
  EXPECT_LE(rounds, 4);
}

TEST(DiffPlanner, TheBudgetCapsTheRounds) {
  DiffOptions options;
  // Every saving is worth a round: only the budget stops them.
  options.round_saving = 0;
  options.round_price_bytes = 0;
  const DiffPlanner planner(options, 1'000'000, 16);
  ASSERT_EQ(RoundBudget(1'000'000, options), 4);
  CostModel model = ThirdPartyModel();
  const std::vector<Pending> frontier{NodeWith(5, 3, 30'000, 30'000, 100)};
  EXPECT_EQ(planner.ChooseRounds(frontier, 2, model), 3);
  EXPECT_EQ(planner.ChooseRounds(frontier, 3, model), 2);
  // Past the budget, one round: the rest is listed; but a range too large
  // to list takes a descent more.
  const std::vector<Pending> listable{NodeWith(20, 3, 50, 50, 2)};
  EXPECT_EQ(planner.ChooseRounds(listable, 4, model), 1);
  EXPECT_EQ(planner.ChooseRounds(listable, 9, model), 1);
  EXPECT_EQ(planner.ChooseRounds(frontier, 9, model), 2);
}

TEST(DiffPlanner, ARoundTakesTheTopOfTheStackUpToItsCarryingLimit) {
  DiffOptions options;
  options.max_exchanges_per_round = 1;  // kMaxDescendantsPerExchange a round
  options.list_threshold = 100'000;     // every range listed
  options.max_list_rows = 100'000;
  const DiffPlanner planner(options, 1'000'000, 16);
  CostModel model = ThirdPartyModel();
  std::vector<Pending> frontier{NodeWith(9, 1, 30'000, 30'000),
                                NodeWith(9, 2, 30'000, 30'000),
                                NodeWith(9, 3, 30'000, 29'000)};
  const std::vector<Planned> round = planner.TakeRound(&frontier, 3, model);
  ASSERT_EQ(round.size(), 2u);
  // The top (the back) first.
  EXPECT_EQ(round[0].pending.node, (NodeRef{9, 3}));
  EXPECT_EQ(round[1].pending.node, (NodeRef{9, 2}));
  EXPECT_EQ(round[0].step, Step::kList);
  ASSERT_EQ(frontier.size(), 1u);
  EXPECT_EQ(frontier[0].node, (NodeRef{9, 1}));
}

TEST(DiffPlanner, ARoundTakesOneNodeHoweverLarge) {
  DiffOptions options;
  options.max_exchanges_per_round = 1;
  options.list_threshold = 1'000'000;
  options.max_list_rows = 1'000'000;
  const DiffPlanner planner(options, 1'000'000, 16);
  CostModel model = ThirdPartyModel();
  std::vector<Pending> frontier{NodeWith(9, 1, 1, 1),
                                NodeWith(9, 2, 200'000, 200'000)};
  const std::vector<Planned> round = planner.TakeRound(&frontier, 3, model);
  ASSERT_EQ(round.size(), 1u);
  EXPECT_EQ(round[0].pending.node, (NodeRef{9, 2}));
  EXPECT_EQ(frontier.size(), 1u);
}

TEST(DiffPlanner, OneChildOfManyDifferingHoldsAboutOneDifference) {
  const double expected = ExpectedPerChild(50, 32, 1, 0);
  EXPECT_GE(expected, 1.0);
  EXPECT_NEAR(expected, -32 * std::log1p(-1.0 / 32), 1e-12);
}

TEST(DiffPlanner, AShareOfChildrenDifferingEstimatesByPoissonOccupancy) {
  // Half of 1024 children differ: 1024 ln 2 differences over 512 children.
  EXPECT_NEAR(ExpectedPerChild(1, 1024, 512, 0), 2 * std::log(2.0), 1e-12);
}

TEST(DiffPlanner, AllChildrenDifferingMeansMany) {
  // 3 s ln s over s children, at least.
  EXPECT_NEAR(ExpectedPerChild(1, 32, 32, 0), 3 * std::log(32.0), 1e-12);
  // And the parent's estimate when larger.
  EXPECT_DOUBLE_EQ(ExpectedPerChild(10'000, 32, 32, 0), 10'000.0 / 32);
}

TEST(DiffPlanner, RowCountGapsAreDifferences) {
  // Two children of 1024 differ, their counts by 50 rows in all.
  EXPECT_DOUBLE_EQ(ExpectedPerChild(1, 1024, 2, 50), 25);
}

}  // namespace
}  // namespace internal
}  // namespace tree
}  // namespace tally
