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
//     How many is chosen by a cost model of the wire (below) for the number
//     of rounds the rest of the diff is to take, which the planner chooses
//     again every round from what it has seen (see "Rounds"): the share of
//     children that differed in the previous round estimates how many
//     differences lie below each node, and its row count says what listing
//     it would cost. When most nodes of a level differ, the whole level is
//     fetched instead of node by node. A round may hold several exchanges
//     (within the per-exchange limits); they do not depend on one another.
//  3. Below the leaves the same descent continues over token sub-ranges,
//     which the views answer by range scans, until listing a range costs
//     less than expanding it further.
//  4. Listing: both sides list (key, version, digest) for those ranges; keys
//     missing on one side or with different digests are the differences.
//     A range that is empty on one side is streamed from the other.
//
// Cost. A node digest costs w ~ 10 bytes per view (a 64-bit fingerprint and
// a varint row count), a listed row e ~ 40 (WireSize: key, HLC, origin
// index, fingerprint). With d differing keys spread over N rows, m(l) =
// 2^l (1 - e^(-d / 2^l)) nodes of level l differ. A diff of r rounds
// (the handshake at level h = handshake_levels, r - 2 descents
// h -> l_1 -> ... -> l_k, then the listing at l_k) moves, both views
// together,
//
//   B(N, d, r) = 2^h 2w + sum_i m(l_i) 2^(l_(i+1) - l_i) 2w
//                + m(l_k) 2e (N / 2^l_k + d / m(l_k)),
//
// minimised over the levels by EstimateDiffCost(). Per difference that is
// about (r - 1) 2w (N/d)^(1/(r - 1)) plus the two or three rows listed with
// each difference: at a fixed number of rounds it grows as a root of N/d,
// and every round added takes one more root. The depth of the stored trees
// does not enter: below it the views answer by range scans, at the same
// wire cost, so only N, d and r do.
//
// Rounds. Each round adds one round trip; the planner adds a round only
// while the model says it saves at least `round_saving` of the bytes still
// to come and at least `round_price_bytes`, up to `max_rounds`. With the
// defaults that gives 4 rounds from N/d ~ 100 to ~1000 and 5 at ~10,000
// (diff-mem below), and fewer for a handful of differences (d = 1 at 100k:
// 3 rounds, 5 KB).
//
// Measured (tally-bench --scenario=diff-mem, d = 1000, both views' bytes,
// "model" = EstimateDiffCost in the rounds taken):
//
//   N      rounds  bytes/diff  model
//   100k   4         654        513
//   1M     4       1,102        989
//   10M    5       1,462      1,206
//
// (before this planner, with 4 rounds always: 648, 1,102, 3,192.) The model
// is the optimum of a diff that knows d from the start and treats every
// node of a level alike, so the diff costs 10-25% more. It also says that
// bytes per difference cannot be flat from 100k to 10M within 4-5 rounds
// while a node digest costs ~10 bytes per view: its own optimum at those
// rounds grows 2.4x. What flattens it is cheaper digests deep in the tree
// (shorter, seeded fingerprints; a bitmap of the children that differ):
// at ~1 byte per node the model gives ~190 / ~270 / ~290 B per difference.
//
// Latency: within a round the two views are asked at the same time (view b
// from a thread of its own, view a from the caller's), so a round costs one
// round trip of the slower view, not one per view: two nodes each 50 ms
// away cost 50 ms a round, not 100. The exchanges of one round to one view
// go one after the other. Scans (ranges empty on one side) run on the
// calling thread. The sink is always called on the calling thread.
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
  // The most rounds a diff plans for, the handshake included. Estimates can
  // be wrong and ranges too large to list are never listed, so a diff may
  // take more; it never plans more.
  int max_rounds = 6;
  // Every round, the planner chooses how many rounds the rest of the diff
  // takes: it adds a round only while the model says that round saves at
  // least this share of the bytes still to come...
  double round_saving = 0.5;
  // ... and at least this many bytes: below it, bytes are cheaper than a
  // round trip on any link (8 KiB is 1.3 ms at 50 Mbit/s).
  double round_price_bytes = 8192;
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

// The cost model as numbers, for views of `rows` rows each with
// `differences` differing keys spread uniformly and listed rows of
// `entry_bytes` each (WireSize): the rounds the planner's rule picks and the
// payload bytes of both views it expects (see "Cost" above). What a diff
// measures may differ by the Poisson spread of real data and by the
// planner's estimates of d, which it learns as it descends.
struct DiffCostEstimate {
  double bytes = 0;
  int rounds = 0;
};
DiffCostEstimate EstimateDiffCost(uint64_t rows, uint64_t differences,
                                  double entry_bytes,
                                  const DiffOptions& options);

// Computes the differences between `a` and `b`. Returns the first error of a
// view or of the sink. `stats` (optional) is filled in either case.
absl::Status DiffViews(TreeView& a, TreeView& b, const DiffOptions& options,
                       const DifferenceSink& sink, DiffStats* stats);

}  // namespace tree
}  // namespace tally

#endif  // TALLY_TREE_DIFF_H_
