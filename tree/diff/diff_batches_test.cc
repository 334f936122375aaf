#include "tree/diff/diff_batches.h"

#include <vector>

#include "gtest/gtest.h"
#include "tree/diff/diff_planner.h"
#include "tree/token.h"
#include "tree/tree_view.h"

namespace tally {
namespace tree {
namespace internal {
namespace {

Planned Descend(int level, uint64_t index, int levels_ahead) {
  return Planned{Pending{NodeRef{level, index}, 100, 100, 1}, Step::kDescend,
                 levels_ahead};
}

Planned OfRange(Step step, int level, uint64_t index, uint64_t rows) {
  return Planned{Pending{NodeRef{level, index}, rows, rows, 1}, step, 0};
}

TEST(PackRound, RangesEmptyOnOneSideAreStreamedApart) {
  const std::vector<Planned> plan{OfRange(Step::kScanA, 4, 1, 10),
                                  OfRange(Step::kScanB, 4, 2, 10),
                                  OfRange(Step::kScanA, 4, 3, 10)};
  const RoundRequests round = PackRound(plan, 0.5);
  EXPECT_EQ(round.scan_a, (std::vector<NodeRef>{{4, 1}, {4, 3}}));
  EXPECT_EQ(round.scan_b, (std::vector<NodeRef>{{4, 2}}));
  EXPECT_TRUE(round.batches.empty());
}

TEST(PackRound, NamedDescentsShareABatchAndKnowTheirSlots) {
  // 2 of the 8 nodes of level 3: not dense.
  const std::vector<Planned> plan{Descend(3, 5, 2), Descend(3, 1, 4)};
  const RoundRequests round = PackRound(plan, 0.5);
  ASSERT_EQ(round.batches.size(), 1u);
  const Batch& batch = round.batches[0];
  ASSERT_EQ(batch.request.descend.size(), 2u);
  EXPECT_EQ(batch.request.descend[0].node, (NodeRef{3, 5}));
  EXPECT_EQ(batch.request.descend[0].levels_ahead, 2);
  EXPECT_EQ(batch.request.descend[1].node, (NodeRef{3, 1}));
  EXPECT_EQ(batch.request.descend[1].levels_ahead, 4);
  EXPECT_EQ(batch.descendants, 4u + 16u);
  ASSERT_EQ(batch.descended.size(), 2u);
  EXPECT_EQ(batch.descended[0].first, &plan[0]);
  EXPECT_EQ(batch.descended[0].second, 0u);
  EXPECT_EQ(batch.descended[1].first, &plan[1]);
  EXPECT_EQ(batch.descended[1].second, 4u);
  EXPECT_TRUE(batch.request.list.empty());
}

TEST(PackRound, ADenseLevelIsFetchedWholeFromTheRoot) {
  // 5 of the 8 nodes of level 3, each 2 levels ahead.
  std::vector<Planned> plan;
  for (uint64_t index : {6, 0, 2, 3, 7}) plan.push_back(Descend(3, index, 2));
  const RoundRequests round = PackRound(plan, 0.5);
  ASSERT_EQ(round.batches.size(), 1u);
  const Batch& batch = round.batches[0];
  ASSERT_EQ(batch.request.descend.size(), 1u);
  EXPECT_EQ(batch.request.descend[0].node, (NodeRef{0, 0}));
  EXPECT_EQ(batch.request.descend[0].levels_ahead, 5);
  EXPECT_EQ(batch.descendants, 32u);
  ASSERT_EQ(batch.descended.size(), plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    EXPECT_EQ(batch.descended[i].first, &plan[i]);
    // A node's children sit where its index puts them in the level below.
    EXPECT_EQ(batch.descended[i].second, plan[i].pending.node.index << 2);
  }
}

TEST(PackRound, TheRootIsNeverALevelToFetchWhole) {
  const std::vector<Planned> plan{Descend(0, 0, 3)};
  const RoundRequests round = PackRound(plan, 0.5);
  ASSERT_EQ(round.batches.size(), 1u);
  ASSERT_EQ(round.batches[0].request.descend.size(), 1u);
  EXPECT_EQ(round.batches[0].request.descend[0].node, (NodeRef{0, 0}));
  EXPECT_EQ(round.batches[0].request.descend[0].levels_ahead, 3);
}

TEST(PackRound, DescentsOfDifferentDepthsAreNotOneLevel) {
  // 4 of 8 nodes of level 3, but two ways deep: neither group is dense.
  const std::vector<Planned> plan{Descend(3, 0, 2), Descend(3, 1, 3),
                                  Descend(3, 2, 2), Descend(3, 3, 3)};
  const RoundRequests round = PackRound(plan, 0.5);
  ASSERT_EQ(round.batches.size(), 1u);
  const auto& descend = round.batches[0].request.descend;
  ASSERT_EQ(descend.size(), 4u);
  // By (level, levels_ahead), in plan order within.
  EXPECT_EQ(descend[0].node, (NodeRef{3, 0}));
  EXPECT_EQ(descend[1].node, (NodeRef{3, 2}));
  EXPECT_EQ(descend[2].node, (NodeRef{3, 1}));
  EXPECT_EQ(descend[3].node, (NodeRef{3, 3}));
}

TEST(PackRound, ABatchHoldsAtMostTheDescendantsOfOneExchange) {
  // 2^15 descendants each: two fill an exchange.
  const std::vector<Planned> plan{Descend(20, 1, 15), Descend(20, 2, 15),
                                  Descend(20, 3, 15)};
  const RoundRequests round = PackRound(plan, 0.5);
  ASSERT_EQ(round.batches.size(), 2u);
  EXPECT_EQ(round.batches[0].descendants, kMaxDescendantsPerExchange);
  EXPECT_EQ(round.batches[0].request.descend.size(), 2u);
  EXPECT_EQ(round.batches[1].descendants, kMaxDescendantsPerExchange / 2);
  ASSERT_EQ(round.batches[1].descended.size(), 1u);
  EXPECT_EQ(round.batches[1].descended[0].first, &plan[2]);
  // Slots count from the start of each exchange's answer.
  EXPECT_EQ(round.batches[1].descended[0].second, 0u);
}

TEST(PackRound, ListingsLeaveHeadroomForCountsThatMoved) {
  // Half of kMaxEntriesPerExchange rows a batch: 10,000-row ranges go one
  // to a batch.
  const std::vector<Planned> plan{OfRange(Step::kList, 30, 1, 10'000),
                                  OfRange(Step::kList, 30, 2, 10'000),
                                  OfRange(Step::kList, 30, 3, 6'000)};
  const RoundRequests round = PackRound(plan, 0.5);
  ASSERT_EQ(round.batches.size(), 2u);
  EXPECT_EQ(round.batches[0].request.list, (std::vector<NodeRef>{{30, 1}}));
  EXPECT_EQ(round.batches[0].listed_rows, 10'000u);
  EXPECT_EQ(round.batches[1].request.list,
            (std::vector<NodeRef>{{30, 2}, {30, 3}}));
  EXPECT_EQ(round.batches[1].listed_rows, 16'000u);
  ASSERT_EQ(round.batches[1].listed.size(), 2u);
  EXPECT_EQ(round.batches[1].listed[0], &plan[1]);
}

TEST(PackRound, ListingsFollowDescentsInTheSameBatch) {
  const std::vector<Planned> plan{OfRange(Step::kList, 30, 1, 3),
                                  Descend(10, 4, 3)};
  const RoundRequests round = PackRound(plan, 0.5);
  ASSERT_EQ(round.batches.size(), 1u);
  EXPECT_EQ(round.batches[0].request.descend.size(), 1u);
  EXPECT_EQ(round.batches[0].request.list, (std::vector<NodeRef>{{30, 1}}));
}

TEST(CheckAnswerShape, AcceptsWhatWasAskedFor) {
  ViewRequest request;
  request.descend.push_back(DescendRequest{NodeRef{0, 0}, 2});
  request.list.push_back(NodeRef{10, 1});
  request.list.push_back(NodeRef{10, 2});
  ViewResponse response;
  response.descendants.resize(4);
  response.entries_per_range = {2, 0};
  response.entries.resize(2);
  EXPECT_TRUE(CheckAnswerShape(request, response).ok());
}

TEST(CheckAnswerShape, RejectsMissingDigestsRangesOrRows) {
  ViewRequest request;
  request.descend.push_back(DescendRequest{NodeRef{0, 0}, 2});
  request.list.push_back(NodeRef{10, 1});
  ViewResponse good;
  good.descendants.resize(4);
  good.entries_per_range = {1};
  good.entries.resize(1);
  ASSERT_TRUE(CheckAnswerShape(request, good).ok());

  ViewResponse digests = good;
  digests.descendants.pop_back();
  EXPECT_EQ(CheckAnswerShape(request, digests).code(),
            absl::StatusCode::kDataLoss);
  ViewResponse ranges = good;
  ranges.entries_per_range.push_back(0);
  EXPECT_EQ(CheckAnswerShape(request, ranges).code(),
            absl::StatusCode::kDataLoss);
  ViewResponse rows = good;
  rows.entries.emplace_back();
  EXPECT_EQ(CheckAnswerShape(request, rows).code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace internal
}  // namespace tree
}  // namespace tally
