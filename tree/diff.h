// The diff algorithm: the exact set of keys that differ between two views.
//
// Used by a node's anti-entropy sessions (local store against a remote peer)
// and by `tally diff` (two remote nodes). It works top-down, as seed 000's
// iterative method does, but batches and adapts so that its cost follows the
// number of differences d, not the number of rows N:
//
//  1. Summaries: equal roots and counts end the diff in one round. An empty
//     side skips the tree: the other side is streamed.
//  2. Descent: every mismatched node is expanded several levels in one round.
//     How many depends on what the previous round saw: the share of children
//     that differed estimates how many differences lie below each node, and
//     the node's row count says how far listing is. When most nodes of a
//     level differ, the whole level is fetched instead of node by node.
//  3. Below the leaves the same descent continues over token sub-ranges,
//     which the views answer by range scans, until a range holds at most
//     `list_threshold` rows on both sides.
//  4. Listing: both sides list (key, version, digest) for those ranges; keys
//     missing on one side or with different digests are the differences.
//     A range that is empty on one side is streamed from the other.
//
// The views may have different depths: nodes are token ranges, and every
// view answers for any level (from its tree above its depth, by scanning
// below it).
//
// Concurrent writes on either side may make a key appear or vanish from the
// result; the next diff sees the settled state.
//
// Memory: bounded by the per-exchange limits in tree_view.h and the depth of
// the descent, whatever N and d are; differences are delivered through a sink
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
  // Ranges with at most this many rows on both sides are listed row by row.
  uint64_t list_threshold = 8;
  // Bounds on how many levels one node is expanded in one round.
  int min_levels_per_round = 3;
  int max_levels_per_round = 8;
  // Levels fetched below the root in the first descent round, before
  // anything is known about how many differences there are.
  int first_round_levels = 5;
  // Children per expected difference: 2^levels ~ spread * expected.
  double spread = 2.0;
  // When the pending nodes of one level are at least this share of that
  // level, the whole level below is fetched without naming nodes.
  double dense_fraction = 0.5;
};

struct DiffStats {
  uint64_t rounds = 0;          // round trips (one per batch to both views)
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
