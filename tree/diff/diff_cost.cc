#include "tree/diff/diff_cost.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <unordered_map>

#include "tree/fingerprint.h"
#include "tree/tree_view.h"

namespace tally {
namespace tree {
namespace internal {

size_t VarintBytes(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

double VarintBytesOf(double v) {
  return static_cast<double>(
      VarintBytes(static_cast<uint64_t>(std::max(0.0, v))));
}

WireCost CostOf(AskMode mode, int node_bits, int row_bits, double entry_bytes,
                double scan_row_bytes) {
  WireCost cost;
  // Both views read the rows, however they are asked.
  cost.read_row = 2 * std::max(0.0, scan_row_bytes);
  switch (mode) {
    case AskMode::kPlain:
      cost.listed_row = 2 * entry_bytes;
      break;
    case AskMode::kSeeded:
      cost.child_fingerprints = 2 * node_bits / 8.0;
      cost.listed_row = 2 * entry_bytes;
      break;
    case AskMode::kOwnFirst:
      // Sent: the own fingerprint; answered: one bit, and a count for the
      // children that differ. Listing: a row fingerprint per own row, a bit
      // back, and the other view's rows that differ.
      cost.named_node = 10;
      cost.child_fingerprints = node_bits / 8.0 + 1 / 8.0;
      cost.child_counts = 0;
      cost.mismatched_counts = 1;
      cost.listed_row = row_bits / 8.0 + 1 / 8.0;
      cost.differing_row = entry_bytes;
      break;
  }
  return cost;
}

int FingerprintBits(double differences, double miss_probability) {
  const double compares = 4 * std::max(1.0, differences);
  const double bits =
      std::ceil(std::log2(compares / std::clamp(miss_probability, 1e-18, 1.0)));
  return std::clamp(static_cast<int>(bits), kMinFingerprintBits,
                    kMaxFingerprintBits);
}

// The most rounds a pass plans for views of `rows` rows (docs/design/diff.md,
// "Rounds").
int RoundBudget(uint64_t rows, const DiffOptions& options) {
  const double excess =
      static_cast<double>(rows) / std::max(1.0, options.budget_rows);
  const int more =
      excess > 1 ? static_cast<int>(std::ceil(std::log10(excess))) : 0;
  return std::min(options.max_rounds, options.budget_rounds + more);
}

CostModel::Choice CostModel::Best(double rows, double expected, int rounds,
                                  int max_levels, int to_leaf) {
  const int qr = static_cast<int>(std::lround(std::log2(rows + 1) * 16));
  const int qe = static_cast<int>(std::lround(std::log2(expected) * 16));
  const uint64_t key = (uint64_t(rounds) << 56) | (uint64_t(max_levels) << 48) |
                       (uint64_t(to_leaf) << 40) |
                       (uint64_t(uint32_t(qr)) << 20) | uint32_t(qe);
  auto it = memo_.find(key);
  if (it != memo_.end()) return it->second;
  const double list_bytes = ListBytes(rows, expected);
  Choice best{list_bytes + cost_.Read(rows), list_bytes, 0};
  if (rounds > 1 && rows > 1) {
    for (int levels = 1; levels <= max_levels; ++levels) {
      const double n = std::ldexp(1.0, levels);
      const double mismatched = std::max(1.0, n * -std::expm1(-expected / n));
      const double own_bytes = cost_.named_node + n * cost_.Child(rows / n) +
                               mismatched * cost_.MismatchedChild(rows / n);
      // Answered from the stored tree down to the leaves; past them, by
      // reading every row under the node.
      const double own =
          own_bytes + (levels > to_leaf ? cost_.Read(rows) : 0.0);
      if (own >= best.cost) break;  // grows with levels; cannot win
      const double child_expected = std::max(1.0, expected / mismatched);
      // The child that holds a difference holds it plus its share of the
      // rest.
      const double child_rows =
          child_expected + std::max(0.0, rows - expected) / n;
      const Choice child =
          Best(child_rows, child_expected, rounds - 1, std::min(max_levels, 16),
               std::max(0, to_leaf - levels));
      const double cost = own + mismatched * child.cost;
      if (cost < best.cost) {
        best = Choice{cost, own_bytes + mismatched * child.bytes, levels};
      }
    }
  }
  memo_.emplace(key, best);
  return best;
}

double CostModel::ListBytes(double rows, double expected) const {
  return cost_.named_node + cost_.listed_row * std::max(rows, expected) +
         cost_.differing_row * expected;
}

}  // namespace internal

namespace {

using internal::AskMode;
using internal::CostOf;
using internal::FingerprintBits;
using internal::kRowExtraBits;
using internal::RoundBudget;
using internal::VarintBytes;
using internal::WireCost;

// A summary answer besides its top nodes: depth, 128-bit root, row count,
// the responder's clock; and its request.
constexpr double kSummaryBytes = 40;

// EstimateDiffCost's search: the cheapest way, in bytes of both views and
// rows read priced as CostModel prices them, to resolve the mismatched nodes
// of one level within a number of rounds, when every node of a level is
// treated alike (the uniform case the planner's per-node choices
// approximate).
class UniformPlan {
 public:
  UniformPlan(double rows, double differences, const WireCost& cost,
              int leaf_level)
      : rows_(rows),
        differences_(differences),
        cost_(cost),
        leaf_level_(leaf_level) {}

  struct Cost {
    double cost = 0;   // bytes plus the rows read, priced
    double bytes = 0;  // bytes alone
  };

  // What resolving level `level`'s mismatched nodes in `rounds` rounds costs.
  Cost Best(int level, int rounds) {
    const int key = level * 64 + rounds;
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    const double nodes = std::ldexp(1.0, level);
    const double rows_per_node = rows_ / nodes;
    // Poisson occupancy: the nodes of the level that hold a difference.
    const double mismatched = nodes * -std::expm1(-differences_ / nodes);
    // Listing: both views list every row of each mismatched node, which
    // holds its share of the differences plus its share of the rest (a node
    // picked because it holds a difference is larger than the average one).
    const double listed_rows = std::max(
        1.0, rows_per_node + differences_ / mismatched - differences_ / nodes);
    const double list_bytes =
        mismatched * (cost_.named_node + cost_.listed_row * listed_rows +
                      cost_.differing_row * differences_ / mismatched);
    Cost best{list_bytes + mismatched * cost_.Read(listed_rows), list_bytes};
    if (rounds > 1) {
      for (int levels = 1;
           levels <= kMaxLevelsAhead && level + levels <= kTokenBits;
           ++levels) {
        const double children = std::ldexp(1.0, levels);
        const double child_rows = rows_per_node / children;
        // The mismatched children below, as Best() counts them.
        const double below =
            std::ldexp(1.0, level + levels) *
            -std::expm1(-differences_ / std::ldexp(1.0, level + levels));
        const double own_bytes =
            mismatched *
                (cost_.named_node / 2 + children * cost_.Child(child_rows)) +
            below * cost_.MismatchedChild(child_rows);
        const double own =
            own_bytes + (level + levels > leaf_level_
                             ? mismatched * cost_.Read(listed_rows)
                             : 0.0);
        if (own >= best.cost) break;  // grows with levels; cannot win
        const Cost rest = Best(level + levels, rounds - 1);
        if (own + rest.cost < best.cost) {
          best = Cost{own + rest.cost, own_bytes + rest.bytes};
        }
      }
    }
    memo_.emplace(key, best);
    return best;
  }

 private:
  const double rows_;
  const double differences_;
  const WireCost cost_;
  const int leaf_level_;
  std::unordered_map<int, Cost> memo_;
};

}  // namespace

DiffCostEstimate EstimateDiffCost(uint64_t rows, uint64_t differences,
                                  double entry_bytes,
                                  const DiffOptions& options, int depth) {
  const int top = std::clamp(options.handshake_levels, 0, kMaxSummaryTopLevels);
  const double top_nodes = std::ldexp(1.0, top);
  // The summaries carry 64-bit fingerprints; the own view's cost nothing.
  const double views =
      options.own_view == DiffOptions::OwnView::kNeither ? 2 : 1;
  const double handshake =
      views * (kSummaryBytes +
               top_nodes * (8 + static_cast<double>(VarintBytes(
                                    static_cast<uint64_t>(rows / top_nodes)))));
  if (differences == 0 || rows == 0) return DiffCostEstimate{handshake, 1};
  const AskMode mode = !options.seeded ? AskMode::kPlain
                       : options.own_view == DiffOptions::OwnView::kNeither
                           ? AskMode::kSeeded
                           : AskMode::kOwnFirst;
  const int bits = FingerprintBits(static_cast<double>(differences),
                                   options.miss_probability);
  UniformPlan plan(
      static_cast<double>(rows), static_cast<double>(differences),
      CostOf(mode, bits, std::min(bits + kRowExtraBits, kMaxFingerprintBits),
             entry_bytes, options.scan_row_bytes),
      std::clamp(depth, 0, kTokenBits));
  // The same rule as the planner's: add a round while it saves enough.
  int rounds = 2;
  UniformPlan::Cost best = plan.Best(top, 1);
  const int max_rounds = std::max(2, RoundBudget(rows, options));
  while (rounds < max_rounds) {
    const UniformPlan::Cost more = plan.Best(top, rounds);
    if (best.bytes - more.bytes < std::max(options.round_saving * best.bytes,
                                           options.round_price_bytes)) {
      break;
    }
    best = more;
    ++rounds;
  }
  return DiffCostEstimate{handshake + best.bytes, rounds};
}

}  // namespace tree
}  // namespace tally
