// The diff's planner: what to ask of the views next, decided from what the
// earlier rounds saw (docs/design/diff.md, "Steps" and "Rounds"). Every
// round the loop (tree/diff/diff.cc) hands it the mismatched nodes still to
// examine; it picks how many rounds the rest of the diff is to take, and
// for each node whether to stream it (one side empty), list its rows, or
// expand it some levels, by the cost model of tree/diff/diff_cost.h. When
// the answers come back, ExpectedPerChild turns the share of a node's
// children that differed into the differences each of them is expected to
// hold, which the next round plans with.
//
// Pure: no view is asked here, so every decision can be tested from its
// inputs alone.
//
//   DiffPlanner planner(options, /*rows=*/1'000'000, /*leaf_level=*/16);
//   CostModel model(CostOf(AskMode::kSeeded, 20, 36, 80, 1));
//   const int rounds_left = planner.ChooseRounds(frontier, 2, model);
//   std::vector<Planned> round = planner.TakeRound(&frontier, rounds_left,
//                                                  model);
//
// Thread-compatible: a value; the CostModel it is given memoises.
#ifndef TALLY_TREE_DIFF_DIFF_PLANNER_H_
#define TALLY_TREE_DIFF_DIFF_PLANNER_H_

#include <cstdint>
#include <vector>

#include "tree/diff/diff.h"
#include "tree/diff/diff_cost.h"
#include "tree/token.h"

namespace tally {
namespace tree {
namespace internal {

// A node whose digests differ between the views, waiting to be examined.
struct Pending {
  NodeRef node;
  uint64_t count_a = 0;
  uint64_t count_b = 0;
  // Estimated number of differing keys below this node (at least 1).
  double expected = 1;
};

// What is done with a pending node in a round.
enum class Step {
  kDescend,  // its descendants' digests, levels_ahead below it
  kList,     // the rows of its range, from both views
  kScanA,    // every row of view a's range: view b has none there
  kScanB,    // every row of view b's range: view a has none there
};

struct Planned {
  Pending pending;
  Step step = Step::kList;
  int levels_ahead = 0;  // kDescend only: 1..max_levels_per_round
};

class DiffPlanner {
 public:
  // `rows`: the larger view's row count; `leaf_level`: the shallower view's
  // depth (0..kTokenBits), below which a view answers a descent by reading
  // rows. Both are known once the summaries have answered. `options` must
  // outlive the planner.
  DiffPlanner(const DiffOptions& options, uint64_t rows, int leaf_level)
      : options_(options), rows_(rows), leaf_level_(leaf_level) {}

  // Decides what to do with one mismatched node, with `rounds` rounds left
  // (this one included) in the budget. A side without rows is streamed; a
  // range of at most list_threshold rows, or one token, is listed; past the
  // budget, a range too large to list (max_list_rows) still descends; else
  // the model's cheapest choice, a listing or a descent of at least a level.
  Planned Plan(const Pending& pending, int rounds, CostModel& model) const;

  // How many rounds, this one included, the rest of the diff should take:
  // the fewest after which one more round would save less than
  // `round_saving` of the bytes still to come, or less than
  // `round_price_bytes` (see DiffOptions), and at most what the round
  // budget (RoundBudget) leaves after `rounds_taken`, the rounds of this
  // pass so far with the handshake and this one included. At least 2 while
  // `frontier` holds a range too large to list. Chosen again every round,
  // from what the earlier rounds saw.
  int ChooseRounds(const std::vector<Pending>& frontier, int rounds_taken,
                   CostModel& model) const;

  // Takes from the top (the back) of `frontier` the nodes one round may
  // carry and plans each with `rounds` rounds left: at least one node, then
  // as long as their weights (2^levels_ahead descendants, or the larger
  // side's rows) fit in kMaxDescendantsPerExchange times
  // max_exchanges_per_round. The rest waits for a later round.
  std::vector<Planned> TakeRound(std::vector<Pending>* frontier, int rounds,
                                 CostModel& model) const;

 private:
  // The bytes the model expects `frontier` to cost if it must be resolved
  // within `rounds` rounds, this one included, each node planned at its
  // least cost (bytes and rows read, CostModel). Ranges streamed or listed
  // whatever the budget cost the same for every `rounds` and are left out.
  double FrontierBytes(const std::vector<Pending>& frontier, int rounds,
                       CostModel& model) const;

  // Levels between `pending`'s node and the shallower view's leaves (0 at
  // or below them).
  int ToLeaf(const Pending& pending) const;

  const DiffOptions& options_;
  const uint64_t rows_;
  const int leaf_level_;
};

// The differences each mismatched child of a node is expected to hold, from
// the share of its `children` that differed (`mismatched`, at least 1;
// Poisson occupancy), the node's own estimate `parent_expected` and the sum
// `count_gap` of the mismatched children's row count gaps. When all s
// children differed, the share says only "many": the estimate is then at
// least 3 s ln s (the d for which all would differ with probability
// 1 - 1/s^2; s ln 2s for a single child), and the parent's estimate if
// larger. Row count gaps are differences too, whatever the share says. At
// least 1.
double ExpectedPerChild(double parent_expected, uint64_t children,
                        uint64_t mismatched, double count_gap);

}  // namespace internal
}  // namespace tree
}  // namespace tally

#endif  // TALLY_TREE_DIFF_DIFF_PLANNER_H_
