// The diff algorithm: the exact set of keys that differ between two views.
//
// Used by a node's anti-entropy sessions (local store against a remote peer)
// and by `tally diff` (two remote nodes). It works top-down, as seed 000's
// iterative method does, but batches and adapts so that its cost follows the
// number of differences d, not the number of rows N:
//
//  1. Handshake: the summaries, and in the same round the root expanded
//     `handshake_levels` levels. Equal roots and counts end the diff in one
//     round. An empty side skips the tree: the other side is streamed.
//  2. Descent: every mismatched node is expanded several levels in one round.
//     How many is chosen by a cost model of the wire (a node digest ~9-10
//     bytes per view, a listed row ~60-100) to finish within
//     `target_rounds`: the share of children that differed in the previous
//     round estimates how many differences lie below each node, and its row
//     count says what listing it would cost. When most nodes of a level
//     differ, the whole level is fetched instead of node by node. A round
//     may hold several exchanges (within the per-exchange limits); they do
//     not depend on one another, so it costs one round trip.
//  3. Below the leaves the same descent continues over token sub-ranges,
//     which the views answer by range scans, until listing a range costs
//     less than expanding it further.
//  4. Listing: both sides list (key, version, digest) for those ranges; keys
//     missing on one side or with different digests are the differences.
//     A range that is empty on one side is streamed from the other.
//
// Cost at N = 1M rows (tally-bench --scenario=diff-mem): 4 rounds, ~1.3 KB
// per difference at d = 1000, ~0.8 KB at d = 10000. With only both views'
// digests and rows on the wire, bytes and rounds trade against each other:
// target_rounds = 5 gives ~0.95 KB, 6 ~0.8 KB at d = 1000.
//
// The views may have different depths: nodes are token ranges, and every
// view answers for any level (from its tree above its depth, by scanning
// below it).
//
// Concurrent writes on either side may make a key appear or vanish from the
// result; the next diff sees the settled state.
//
// Memory: bounded by the per-exchange limits in tree_view.h times
// `max_exchanges_per_round` and the depth of the descent, whatever N and d
// are; differences are delivered through a sink
// rather than collected.
//
//   DiffStats stats;
//   absl::Status s = DiffViews(a, b, DiffOptions{},
//       [](const RowEntry* in_a, const RowEntry* in_b) {
//         // nullptr: the key is absent on that side.
//         return absl::OkStatus();
//       }, &stats);
#ifndef TALLY_TREE_DIFF_H_
#define TALLY_TREE_DIFF_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tree/tree_view.h"

namespace tally {
namespace tree {

struct DiffOptions {
  // Rounds a diff aims to finish in, the handshake included. The expansion
  // of each node is chosen by a cost model (bytes on the wire) to finish
  // within what is left; estimates can be wrong, so it is a target.
  int target_rounds = 4;
  // Levels of the root fetched with the summaries, in the same round.
  // Costs 2 * 2^levels node digests even when the views are equal; views
  // shallower than this answer it by a scan. 5 keeps an in-sync check
  // under 1 KB (about 800 bytes) and costs ~10% more per difference at
  // d = 1000 than 8 levels would (tally-bench --scenario=diff-mem).
  int handshake_levels = 5;
  // Ranges with at most this many rows on both sides are listed.
  uint64_t list_threshold = 1;
  // Ranges with more rows than this are never listed, whatever the budget.
  uint64_t max_list_rows = 64;
  // Bound on how many levels one node is expanded in one round.
  int max_levels_per_round = 16;
  // Exchanges per view one round may send; bounds the memory of a round.
  int max_exchanges_per_round = 16;
  // Wire size of a listed row, until rows have been seen.
  double entry_bytes_guess = 80;
  // When the pending nodes of one level are at least this share of that
  // level, the whole level below is fetched without naming nodes.
  double dense_fraction = 0.5;
};

struct DiffStats {
  uint64_t rounds = 0;          // round trips (one per batch to both views)
  uint64_t exchanges = 0;       // Exchange calls per view, over all rounds
  uint64_t digests = 0;         // node digests received from both views
  uint64_t entries = 0;         // rows listed or streamed by both views
  uint64_t bytes_sent = 0;      // request payload, both views
  uint64_t bytes_received = 0;  // response payload, both views
  uint64_t differences = 0;     // keys delivered to the sink

  uint64_t payload_bytes() const { return bytes_sent + bytes_received; }
  std::string DebugString() const;
};

// Receives each differing key once: its row in view a and in view b, or
// nullptr where the key is absent. The pointers live only during the call.
using DifferenceSink =
    std::function<absl::Status(const RowEntry* in_a, const RowEntry* in_b)>;

// Computes the differences between `a` and `b`. Returns the first error of a
// view or of the sink. `stats` (optional) is filled in either case.
absl::Status DiffViews(TreeView& a, TreeView& b, const DiffOptions& options,
                       const DifferenceSink& sink, DiffStats* stats);

}  // namespace tree
}  // namespace tally

#endif  // TALLY_TREE_DIFF_H_
