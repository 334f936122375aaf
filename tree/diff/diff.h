// The diff algorithm: the exact set of keys that differ between two tree
// views, at a cost that follows the number of differences d, not the number
// of rows N. Used by a node's anti-entropy sessions (its own store against a
// peer) and by `tally diff` (two remote nodes).
//
// docs/design/diff.md says how and why: the handshake, the descent planned
// every round by a cost model of the wire and of the rows the views read
// (tree/diff/diff_cost.h), the listing below it, the ways of asking the views
// (DiffOptions::own_view, seeded), the short fingerprints under a per-pass
// seed, and the rule that adds a round. What a caller relies on:
//  - The result is exact. A pass whose differences do not account for the
//    difference of the two roots (the XOR of the row fingerprints, the row
//    counts) is followed by another under a new seed, up to max_passes;
//    keys already delivered are not delivered again. With max_passes = 1 a
//    miss (about 1% of seeded passes) is left to the next diff, whose seed
//    differs.
//  - Within a round the two views are asked at the same time (view b from a
//    thread of its own, view a from the caller's); the exchanges of one
//    round to one view go one after the other. Scans of ranges empty on one
//    side run on the calling thread, and the sink is always called on it.
//  - The views may have different depths: every view answers for any level
//    (from its tree above its depth, by scanning below it).
//  - Writes during a diff may make a key appear or vanish from the result,
//    and cost a second pass; the next diff sees the settled state.
//  - Memory is bounded by the per-exchange limits (tree_view.h) times
//    max_exchanges_per_round and the depth of the descent, whatever N and d
//    are; differences are delivered through a sink rather than collected. A
//    diff that may run a second pass keeps a 64-bit hash of every key
//    delivered (~16 bytes per difference).
//
//   DiffStats stats;
//   absl::Status s = DiffViews(a, b, DiffOptions{},
//       [](const RowEntry* in_a, const RowEntry* in_b) {
//         // nullptr: the key is absent on that side.
//         return absl::OkStatus();
//       }, &stats);
#ifndef TALLY_TREE_DIFF_DIFF_H_
#define TALLY_TREE_DIFF_DIFF_H_

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
  // Within that, a latency budget by size: at most `budget_rounds` rounds
  // for views of up to `budget_rows` rows, and one more for every tenfold
  // beyond (4 up to 2M rows, 5 up to 20M, 6 beyond).
  int budget_rounds = 4;
  double budget_rows = 2e6;
  // Every round, the planner chooses how many rounds the rest of the diff
  // takes: it adds a round only while the model says that round saves at
  // least this share of the bytes still to come (25% keeps a session's
  // bytes per difference flat from 100k to 10M rows; docs/design/diff.md,
  // "Rounds")...
  double round_saving = 0.25;
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
  // A row a view reads to answer a descent below its leaves or a listing,
  // priced in bytes (docs/design/diff.md, "Reading rows is a cost too");
  // 0 prices bytes alone.
  double scan_row_bytes = 1;
  // Bound on how many levels one node is expanded in one round.
  int max_levels_per_round = 16;
  // Exchanges per view one round may send; bounds the memory of a round.
  int max_exchanges_per_round = 16;
  // Wire size of a listed row, until rows have been seen.
  double entry_bytes_guess = 80;
  // When the pending nodes of one level are at least this share of that
  // level, the whole level below is fetched without naming nodes.
  double dense_fraction = 0.5;
  // Whether the scans of ranges empty on the other side ask view a (view
  // b) for values (TreeView::ScanWithValues): a repair that is about to
  // copy every row of such a range asks the view it copies from, and writes
  // the rows without fetching them again by key. Off for a diff that only
  // reports, and for the side whose one-sided rows are erased, not copied.
  bool scan_values_a = false;
  bool scan_values_b = false;
  // The view that answers in this process (a node's own store, in its
  // sessions): it is asked first and its fingerprints are sent to the other
  // view, which answers which children differ (a bitmap) and lists only the
  // rows that differ; its bytes are not counted. kNeither (`tally diff`
  // from a third party): both views are asked alike, at the same time.
  enum class OwnView { kNeither, kA, kB };
  OwnView own_view = OwnView::kNeither;
  // Short seeded fingerprints when both views answer them
  // (docs/design/diff.md, "Short fingerprints"); false: 64-bit ones, as a
  // node from before seeds.
  bool seeded = true;
  // The first pass's seed; 0 draws a fresh one. Fixed only by tests.
  uint64_t seed = 0;
  // The chance per pass that a false match hides a difference, which sets
  // the fingerprint width from the differences expected.
  double miss_probability = 0.01;
  // A pass whose differences do not add up to the roots' difference is
  // followed by another under a new seed, up to this many passes.
  int max_passes = 2;
};

struct DiffStats {
  uint64_t rounds = 0;            // round trips (one per batch to both views)
  uint64_t exchanges = 0;         // Exchange calls per view, over all rounds
  uint64_t digests = 0;           // node digests received from both views
  uint64_t entries = 0;           // rows listed or streamed by both views
  uint64_t bytes_sent = 0;        // request payload, both views
  uint64_t bytes_received = 0;    // response payload, both views
  uint64_t differences = 0;       // keys delivered to the sink
  uint64_t passes = 0;            // passes run (max_passes)
  uint64_t seed = 0;              // the first pass's seed
  uint64_t fingerprint_bits = 0;  // widest seeded fingerprint used
  // Whether the last pass's differences added up to the roots' difference.
  bool verified = false;

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
// payload bytes of both views it expects (docs/design/diff.md, "The cost
// model"), for views whose stored leaves are at `depth` (rows read priced).
// What a diff measures may differ by the Poisson spread of real data and by the
// planner's estimates of d, which it learns as it descends.
struct DiffCostEstimate {
  double bytes = 0;
  int rounds = 0;
};
DiffCostEstimate EstimateDiffCost(uint64_t rows, uint64_t differences,
                                  double entry_bytes,
                                  const DiffOptions& options,
                                  int depth = kDefaultDepth);

// Computes the differences between `a` and `b`. Returns the first error of a
// view or of the sink. `stats` (optional) is filled in either case.
absl::Status DiffViews(TreeView& a, TreeView& b, const DiffOptions& options,
                       const DifferenceSink& sink, DiffStats* stats);

}  // namespace tree
}  // namespace tally

#endif  // TALLY_TREE_DIFF_DIFF_H_
