#include "tree/diff/diff_planner.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "tree/tree_view.h"

namespace tally {
namespace tree {
namespace internal {

Planned DiffPlanner::Plan(const Pending& pending, int rounds,
                          CostModel& model) const {
  Planned planned{pending, Step::kList, 0};
  if (pending.count_a == 0) {
    planned.step = Step::kScanB;
    return planned;
  }
  if (pending.count_b == 0) {
    planned.step = Step::kScanA;
    return planned;
  }
  const uint64_t rows = std::max(pending.count_a, pending.count_b);
  if (rows <= options_.list_threshold || pending.node.level == kTokenBits) {
    return planned;
  }
  // Past the budget, keep listing cheap rather than adding rounds, except
  // for ranges too large to list.
  if (rounds <= 1 && rows > options_.max_list_rows) rounds = 2;
  const int max_levels =
      std::min(options_.max_levels_per_round, kTokenBits - pending.node.level);
  const CostModel::Choice choice =
      model.Best(0.5 * static_cast<double>(pending.count_a + pending.count_b),
                 pending.expected, std::max(rounds, 1), std::max(max_levels, 1),
                 ToLeaf(pending));
  if (choice.levels == 0 && rows <= options_.max_list_rows) return planned;
  planned.step = Step::kDescend;
  planned.levels_ahead = std::max(choice.levels, 1);
  return planned;
}

int DiffPlanner::ToLeaf(const Pending& pending) const {
  return std::max(0, leaf_level_ - pending.node.level);
}

double DiffPlanner::FrontierBytes(const std::vector<Pending>& frontier,
                                  int rounds, CostModel& model) const {
  double bytes = 0;
  for (const Pending& p : frontier) {
    if (p.count_a == 0 || p.count_b == 0) continue;
    if (std::max(p.count_a, p.count_b) <= options_.list_threshold ||
        p.node.level == kTokenBits) {
      continue;
    }
    const int max_levels = std::max(
        1, std::min(options_.max_levels_per_round, kTokenBits - p.node.level));
    bytes += model
                 .Best(0.5 * static_cast<double>(p.count_a + p.count_b),
                       p.expected, rounds, max_levels, ToLeaf(p))
                 .bytes;
  }
  return bytes;
}

int DiffPlanner::ChooseRounds(const std::vector<Pending>& frontier,
                              int rounds_taken, CostModel& model) const {
  const int max_left =
      std::max(1, RoundBudget(rows_, options_) - rounds_taken + 1);
  // Ranges too large to list need at least one more descent (Plan).
  int rounds = 1;
  for (const Pending& p : frontier) {
    if (p.count_a > 0 && p.count_b > 0 &&
        std::max(p.count_a, p.count_b) > options_.max_list_rows) {
      rounds = 2;
      break;
    }
  }
  if (rounds >= max_left) return rounds;
  // Rounds are a latency traded for bytes: the rows read do not enter.
  double bytes = FrontierBytes(frontier, rounds, model);
  while (rounds < max_left) {
    const double more = FrontierBytes(frontier, rounds + 1, model);
    const double saving = bytes - more;
    if (saving <
        std::max(options_.round_saving * bytes, options_.round_price_bytes)) {
      break;
    }
    bytes = more;
    ++rounds;
  }
  return rounds;
}

std::vector<Planned> DiffPlanner::TakeRound(std::vector<Pending>* frontier,
                                            int rounds,
                                            CostModel& model) const {
  std::vector<Planned> plan;
  uint64_t budget = kMaxDescendantsPerExchange *
                    static_cast<uint64_t>(options_.max_exchanges_per_round);
  while (!frontier->empty()) {
    Planned p = Plan(frontier->back(), rounds, model);
    const uint64_t weight =
        p.step == Step::kDescend
            ? uint64_t{1} << p.levels_ahead
            : std::max(p.pending.count_a, p.pending.count_b);
    if (!plan.empty() && weight > budget) break;
    budget -= std::min(budget, weight);
    plan.push_back(std::move(p));
    frontier->pop_back();
  }
  return plan;
}

double ExpectedPerChild(double parent_expected, uint64_t children,
                        uint64_t mismatched, double count_gap) {
  const double slots = static_cast<double>(children);
  const double hit = static_cast<double>(mismatched);
  double total;
  if (hit < slots) {
    total = -slots * std::log1p(-hit / slots);
  } else {
    total = std::max({parent_expected, slots * std::log(2 * slots),
                      3 * slots * std::log(slots)});
  }
  total = std::max({total, hit, count_gap});
  return std::max(1.0, total / hit);
}

}  // namespace internal
}  // namespace tree
}  // namespace tally
