// The diff algorithm: the exact set of keys that differ between two views.
//
// Used by a node's anti-entropy sessions (local store against a remote peer)
// and by `tally diff` (two remote nodes). It works top-down, as the classic
// iterative hash-tree comparison does, but batches and adapts so that its cost
// follows the number of differences d, not the number of rows N:
//
//  1. Handshake: the summaries, and in the same round the root expanded
//     `handshake_levels` levels. Equal roots and counts end the diff in one
//     round. An empty side skips the tree: the other side is streamed.
//  2. Descent: every mismatched node is expanded several levels in one round.
//     How many is chosen by a cost model of the wire (below) for the number
//     of rounds the rest of the diff is to take, which the planner chooses
//     again every round from what it has seen (see "Rounds"): the share of
//     children that differed in the previous round estimates how many
//     differences lie below each node (Poisson occupancy), and its row count
//     says what listing it would cost. When all s children of a node differ
//     the share says only "many"; the estimate is then 3 s ln s, the d for
//     which all s would differ with probability 1 - 1/s^2 (333 for the
//     handshake's 32 nodes; s ln 2s = 133 before, which cut the first
//     descent short at d >= 1000 and cost a session 30% more at 1M rows).
//     When most nodes of a level differ, the whole level is fetched instead
//     of node by node. A round may hold several exchanges
//     (within the per-exchange limits); they do not depend on one another.
//  3. Below the leaves the same descent continues over token sub-ranges,
//     which the views answer by range scans, until listing a range costs
//     less than expanding it further.
//  4. Listing: both sides list (key, version, digest) for those ranges; keys
//     missing on one side or with different digests are the differences.
//     A range that is empty on one side is streamed from the other.
//
// How the views are asked (DiffOptions::own_view, seeded):
//  - a third party (`tally diff` across nodes that cannot reach each other):
//    both views alike, at the same time, node fingerprints cut to f bits
//    under the session's seed (a seeded exchange, tree_view.h);
//  - a node's own session: its own view answers first, in process and for
//    free; the peer is sent those f-bit fingerprints and answers with one
//    bit per child (differs or not) and a count for those that differ. For
//    a listed range it is sent an f-bit fingerprint of each own row (key and
//    digest) and answers with one bit per own row (unmatched or not) and only
//    its rows that match none: rows travel only for keys that differ;
//  - a node from before seeds answers neither: both views are asked with
//    64-bit fingerprints and full lists, as before.
//
// Fingerprints. A seed per pass (fresh per diff, so per session) makes a
// false match of two different nodes or rows under f bits a chance 2^-f
// event independent of every other session: it cannot repeat. The width is
// chosen from the differences expected, f = log2(4 d / miss_probability)
// (about 4d comparisons of differing nodes and rows per pass; 8..64 bits:
// 19 at d = 1000), so a pass misses a difference with probability about
// miss_probability = 1%. A miss hides the difference below the node (one,
// at the deep levels where short fingerprints pay). Rows take f + 16 bits:
// a row matching another key's would not only hide its own difference but
// report the other key absent, so that is made 65,536 times rarer
// (~4d x 2^-(f+16) per pass, 1.5e-7 at d = 1000). It is caught at the end
// of the pass: the XOR of the 64-bit fingerprints of the rows found on
// either side must equal the XOR of the two roots' (a root's fingerprint is
// the XOR of its rows'), and the row counts must balance. A pass that does
// not balance is followed by another under a new seed (max_passes; keys
// already delivered are not delivered again), so a miss costs one more
// pass (~1% of diffs pay twice) and the result stays exact. Writes during a
// diff also unbalance it and cost the second pass; with max_passes = 1 a
// miss is left to the next session, whose seed differs.
//
// Cost. Per child a node costs w bytes: 2 (f/8 + ~1) for a third party
// (each view's fingerprint and varint count), f/8 + 1/8 in a session (the
// own fingerprint sent, a bit back) plus ~1 for a child that differs, 2 x
// (8 + ~1) the plain way. A listed row costs e_l: 2e for a third party or
// the plain way (e ~ 40-70 B, WireSize: key, HLC, origin index,
// fingerprint; 40 for the bench's 16-byte keys), (f + 16)/8 + 1/8 in a
// session, which also receives e for each differing row. With d differing keys
// spread over N rows, m(l) = 2^l (1 - e^(-d / 2^l)) nodes of level l differ. A
// diff of r rounds (the handshake at level h = handshake_levels, r - 2 descents
// h -> l_1 -> ... -> l_k, then the listing at l_k) moves
//
//   B(N, d, r) = 2^h w_0 + sum_i m(l_i) 2^(l_(i+1) - l_i) w
//                + m(l_k) e_l (N / 2^l_k + d / m(l_k)) + d e_d,
//
// (w_0: the handshake's 64-bit digests, e_d: e in a session, else 0),
// minimised over the levels by EstimateDiffCost(). Per difference that is
// about
//
//   B / d ~ (r - 1) w F + e_l N / 2^l_k / m(l_k) + e_d,
//   F = (N / d)^(1 / (r - 1))  (the fan-out per round),
//
// the descent, the rows listed with each difference and the differing row
// itself: at a fixed number of rounds it grows as a root of N/d, and every
// round added takes one more root. The depth of the stored trees does not
// enter the wire cost: below it the views answer by range scans, at the
// same wire cost, so only N, d, r and the widths (f, f + 16 for rows, e)
// do; it enters through the rows the views read ("Reading"). The
// fingerprint widths enter through w and e_l: f = log2(4 d /
// miss_probability), so w grows by 1/8 byte per doubling of d.
//
// Flat in N. One round more per tenfold N/d holds F near 10, and then
// B / d differs from one size to the next only by the factor (r - 1) and
// the listing's share: what the round rule below gives a session at
// d = 1000 (3, 4, 5 rounds at 100k, 1M, 10M rows), and the rounds a
// diff takes are the ones EstimateDiffCost's rule picks (tested from 20k to
// 200k rows, d = 200 and 1000, in both modes: tree/diff_test.cc
// DiffFlatTest).
//
// Reading. Bytes are not the whole cost: a view answers a descent that ends
// below its stored leaves, and a listing, by reading every row under the
// node (a LevelDB range scan in a store), and a descent from above the leaves
// to below them reads the rows of every leaf it crosses. At 5M rows in a
// depth-16 tree (76 rows a leaf), descents of 5 levels from level 12 to 17
// read 1,220 rows each: 120k rows per diff at d = 100, two thirds of a
// node's CPU for it (~0.16 us a row), where stopping at the leaves and going
// on from each differing one in the next round reads 76. So the planner
// chooses levels by bytes plus `scan_row_bytes` per row each view reads (a
// row's read takes about a byte's time at 50 Mbit/s), with the leaves at the
// shallower view's depth (from the summaries); EstimateDiffCost does the
// same. Rounds are still added by bytes alone (the rule below), and the
// bytes reported are bytes. Two tallyd of 5M rows, d = 100, 20 `tally diff`
// in a row: A's CPU per diff 28 -> 10 ms, B's 22 -> 6 ms, A's own diff 32
// -> ~10 ms, bytes 45.6 -> 47.2 KB in the same 5 rounds. A session's bytes
// hardly move; a third party, which pays ~9 bytes a child, lists more
// instead of reading a leaf (tree/diff_test.cc,
// Diff.DescentsStopAtTheLeavesRatherThanReadEveryLeafBelow).
//
// Rounds. Each round adds one round trip; the planner adds a round only
// while the model says it saves at least `round_saving` (25%) of the bytes
// still to come and at least `round_price_bytes`, within a latency budget
// by size: 4 rounds up to 2M rows, 5 up to 20M, 6 beyond (budget_rounds,
// budget_rows), and never more than `max_rounds`. At 25% a session at 100k
// rows and d = 1000 stops at 3 rounds (a fourth saves 16%: 123 -> 103 B
// per difference) and at 10M takes 5 (the fifth saves 30%: 267 -> 188).
//
// Measured (tally-bench --scenario=diff-mem --diff_mem_runs=3, d = 1000,
// depth 16; a session counts the peer's bytes only, a third party both
// views'; "model" = EstimateDiffCost in the rounds taken; bytes were the
// same in all 3 runs, each under a fresh seed; with rows read priced,
// "Reading"):
//
//   N      session            third party (seeded)  plain (before seeds)
//          rounds B/diff model rounds B/diff model   rounds B/diff
//   100k   3        122   123  4        310   336    4        547
//   1M     4        170   169  4        566   591    4      1,104
//   10M    5        194   191  5        885   854    5      1,422
//   100M   (wire model only: the views need ~56 GB) 4 rounds, 493 B
//          for a session, 6 rounds, 818 B for a third party (leaves of
//          1,500 rows at depth 16: reading them is dearer than bytes)
//
// A session is flat within -25% / +5% / +20% of its mean (162 B); before
// rows read were priced, 122 / 148 / 194 B (-21% / -4% / +25.4%). A third
// party, whose digests cost ~2 x 3.4 bytes per child, is not (310 to 885):
// at 100k its fourth round saves 41% of its bytes (666 B in 3 rounds), so
// the rule takes it, and flat would need that round given up; at 10M it
// lists rather than read 152-row leaves (699 B before).
//
// The model is the optimum of a diff that knows d from the start and treats
// every node of a level alike; the planner comes within about 5% of it. In a
// session the floor is the differing row itself (~e = 40 B) and the own
// rows' fingerprints of the listed ranges; what grows with N is the descent.
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
// are; differences are delivered through a sink rather than collected. A
// seeded diff that may run a second pass also keeps a 64-bit hash of every
// key delivered (~16 bytes per difference).
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
  // Within that, a latency budget by size: at most `budget_rounds` rounds
  // for views of up to `budget_rows` rows, and one more for every tenfold
  // beyond (4 up to 2M rows, 5 up to 20M, 6 beyond).
  int budget_rounds = 4;
  double budget_rows = 2e6;
  // Every round, the planner chooses how many rounds the rest of the diff
  // takes: it adds a round only while the model says that round saves at
  // least this share of the bytes still to come (25% keeps a session's
  // bytes per difference flat from 100k to 10M rows; see "Rounds")...
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
  // priced in bytes (see "Reading"); 0 prices bytes alone.
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
  // Short seeded fingerprints when both views answer them (see
  // "Fingerprints"); false: 64-bit ones, as a node from before seeds.
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
  uint64_t passes = 0;            // passes run (see "Fingerprints")
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
// payload bytes of both views it expects (see "Cost" above), for views whose
// stored leaves are at `depth` (see "Reading"). What a diff
// measures may differ by the Poisson spread of real data and by the
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

#endif  // TALLY_TREE_DIFF_H_
