// The diff's cost model (docs/design/diff.md, "The cost model" and "Reading
// rows is a cost too"): what one step of a diff costs on the wire for each
// way of asking the views, the fingerprint widths, the round budget by size,
// and the choice between listing a mismatched node and expanding it, which
// the planner (tree/diff/diff_planner.h) makes for every node every round.
// EstimateDiffCost (tree/diff/diff.h) is the same model over a tree whose nodes
// of a level are all alike.
//
// Thread-compatible: a CostModel memoises its answers; one per round of one
// diff.
#ifndef TALLY_TREE_DIFF_DIFF_COST_H_
#define TALLY_TREE_DIFF_DIFF_COST_H_

#include <cstddef>
#include <cstdint>
#include <unordered_map>

#include "tree/diff/diff.h"

namespace tally {
namespace tree {
namespace internal {

// The bytes of `v` as a varint (what a count costs on the wire).
size_t VarintBytes(uint64_t v);
// The same for a count estimated as a real number (negative counts as 0).
double VarintBytesOf(double v);

// What one step costs on the wire, every view asked together, in the units
// WireSize counts. How the views are asked sets it (docs/design/diff.md, "The
// cost model").
struct WireCost {
  // Naming a node in a request, to every view asked (groups of deltas).
  double named_node = 20;
  // Per child: fingerprint bytes over the views, and how many views send
  // its row count; and for a child that differs, counts sent for it alone.
  double child_fingerprints = 16;
  double child_counts = 2;
  double mismatched_counts = 0;
  // Per row of a listed range, and per differing row besides.
  double listed_row = 160;
  double differing_row = 0;
  // Not the wire's: per row under a node the views read to answer it (a
  // descent that ends below their leaves, a listing), every view together,
  // priced in bytes (docs/design/diff.md, "Reading rows is a cost too"). A
  // node's own view counts too: it is CPU, not traffic.
  double read_row = 0;

  double Child(double rows) const {
    return child_fingerprints + child_counts * VarintBytesOf(rows);
  }
  double MismatchedChild(double rows) const {
    return mismatched_counts * VarintBytesOf(rows);
  }
  double Read(double rows) const { return read_row * rows; }
};

enum class AskMode {
  kPlain,     // both views, 64-bit fingerprints (a node from before seeds)
  kSeeded,    // both views, short seeded fingerprints
  kOwnFirst,  // the own view first, its fingerprints sent to the other
};

// What each step costs when the views are asked by `mode`, with node
// fingerprints of `node_bits`, row fingerprints of `row_bits`, listed rows
// of `entry_bytes` (WireSize) and a row read priced `scan_row_bytes`.
WireCost CostOf(AskMode mode, int node_bits, int row_bits, double entry_bytes,
                double scan_row_bytes);

// Rows take this many bits more than nodes: a row that falsely matches
// another key's would not only hide its own difference but report the other
// key absent.
inline constexpr int kRowExtraBits = 16;

// The fingerprint width (kMinFingerprintBits..kMaxFingerprintBits) that
// keeps the chance that one of the ~4 d comparisons of differing nodes and
// rows a pass makes is a false match below `miss_probability`: 19 bits at
// d = 1,000 and 1%.
int FingerprintBits(double differences, double miss_probability);

// The most rounds a pass plans for views of `rows` rows: budget_rounds up
// to budget_rows, one more for every tenfold beyond, at most max_rounds.
int RoundBudget(uint64_t rows, const DiffOptions& options);

// What the wire costs, both views together, in the units WireSize counts:
// the expected bytes to resolve a mismatched node, and the expansion that
// achieves them. A node digest costs ~9-10 bytes per view and naming a node
// in a request ~10; a row ~60-100 bytes per view (keys and origin names
// vary), which is why listing is the expensive step and expansions deep
// enough to isolate single rows usually pay for themselves.
//
// The model: a node holds `rows` rows per view and `expected` differences
// spread uniformly (Poisson); expanding it 2^L ways leaves
// 2^L(1 - e^{-expected/2^L}) mismatched children, each resolved with one
// round fewer. With one round left the node is listed. Results are memoised
// on a log-scale grid, so a round plans thousands of nodes cheaply.
//
// What it minimises is the bytes plus the rows the views read to answer
// (docs/design/diff.md, "Reading rows is a cost too"): a descent that ends
// below the views' stored leaves, and a listing, make each view read every row
// under the node, priced at WireCost::read_row each. `to_leaf` is how many
// levels the node lies above the leaves (0 at or below them).
class CostModel {
 public:
  explicit CostModel(const WireCost& cost) : cost_(cost) {}

  struct Choice {
    double cost = 0;   // bytes plus the rows read, priced
    double bytes = 0;  // bytes alone
    int levels = 0;    // 0: list now
  };

  // The cheapest way to resolve a node of `rows` rows per view (the mean
  // of the two) holding `expected` differences, with `rounds` rounds left
  // (this one included), expanding at most `max_levels` levels in one
  // round, `to_leaf` levels above the shallower view's leaves.
  // REQUIRES: rounds >= 1, expected >= 1, 1 <= max_levels <= 16,
  // 0 <= to_leaf <= kTokenBits.
  Choice Best(double rows, double expected, int rounds, int max_levels,
              int to_leaf);

  // What listing the node costs on the wire.
  double ListBytes(double rows, double expected) const;

 private:
  const WireCost cost_;
  std::unordered_map<uint64_t, Choice> memo_;
};

}  // namespace internal
}  // namespace tree
}  // namespace tally

#endif  // TALLY_TREE_DIFF_DIFF_COST_H_
