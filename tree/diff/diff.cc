#include "tree/diff/diff.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "tree/diff/diff_batches.h"
#include "tree/diff/diff_compare.h"
#include "tree/diff/diff_cost.h"
#include "tree/diff/diff_planner.h"
#include "tree/diff/view_asker.h"
#include "tree/fingerprint.h"
#include "tree/status_macros.h"

namespace tally {
namespace tree {
namespace {

using internal::AskMode;
using internal::Batch;
using internal::CheckAnswerShape;
using internal::CompareChildren;
using internal::CompareRows;
using internal::CostModel;
using internal::CostOf;
using internal::DiffPlanner;
using internal::FingerprintBits;
using internal::kRowExtraBits;
using internal::PackRound;
using internal::Pending;
using internal::Planned;
using internal::RoundRequests;
using internal::SeededFingerprints;
using internal::Side;
using internal::Step;
using internal::ViewAsker;

// Runs one diff as passes of rounds. A round plans every pending node from
// what earlier rounds saw (DiffPlanner), lays the plan out as exchanges
// (PackRound), asks the views (ViewAsker) and compares their answers
// (CompareChildren, CompareRows): the mismatched children are the next
// round's pending nodes, the differing rows go to the sink.
class Differ {
 public:
  Differ(TreeView& a, TreeView& b, const DiffOptions& options,
         const DifferenceSink& sink, DiffStats* stats)
      : a_(a),
        b_(b),
        options_(options),
        sink_(sink),
        stats_(*stats),
        asker_(a, b, options),
        emit_([this](const RowEntry* in_a, const RowEntry* in_b) {
          return Emit(in_a, in_b);
        }) {}

  // Runs passes until one's differences account for the difference of the
  // roots (docs/design/diff.md, "Short fingerprints"), or max_passes.
  absl::Status Run() {
    seed_ = options_.seed != 0 ? options_.seed : NewSessionSeed();
    stats_.seed = seed_;
    const int passes = std::max(1, options_.max_passes);
    for (int pass = 1;; ++pass) {
      stats_.passes = static_cast<uint64_t>(pass);
      TALLY_RETURN_IF_ERROR(RunPass());
      stats_.verified = found_.fingerprints == roots_.fingerprints &&
                        found_.count_gap == roots_.count_gap;
      // A plain diff compares every fingerprint at 64 bits: another pass
      // would compare the same.
      if (stats_.verified || mode_ == AskMode::kPlain || pass >= passes) {
        return absl::OkStatus();
      }
      seed_ = XXH3_64bits_withSeed(&seed_, sizeof(seed_), pass);
      found_ = Balance{};
      work_.clear();
    }
  }

  // Fills the byte counts: what a view measured where it can, the model
  // where it cannot.
  void FinishTraffic() {
    const ViewTraffic traffic = asker_.Traffic();
    stats_.bytes_sent = traffic.bytes_sent;
    stats_.bytes_received = traffic.bytes_received;
  }

 private:
  // One pass: handshake, descent and listing under one seed.
  absl::Status RunPass() {
    // Handshake: the summaries, and with them (independent of them, so in
    // the same round) the first expansion of the root, which any mismatch
    // needs and whose size nothing known yet can improve on.
    pass_start_ = stats_.rounds;
    ++stats_.rounds;
    const int top_levels =
        std::clamp(options_.handshake_levels, 0, kMaxSummaryTopLevels);
    ViewSummary summary_a;
    ViewSummary summary_b;
    TALLY_RETURN_IF_ERROR(
        asker_.AskSummaries(top_levels, &summary_a, &summary_b));
    // Known once the summaries have answered: a node from before seeds
    // answers only plain exchanges, with 64-bit fingerprints.
    mode_ = !options_.seeded || !a_.AnswersSeeded() || !b_.AnswersSeeded()
                ? AskMode::kPlain
            : options_.own_view == DiffOptions::OwnView::kNeither
                ? AskMode::kSeeded
                : AskMode::kOwnFirst;
    const DiffPlanner planner(
        options_, std::max(summary_a.row_count, summary_b.row_count),
        std::clamp(std::min(summary_a.depth, summary_b.depth), 0, kTokenBits));
    roots_ =
        Balance{summary_a.root.Fingerprint() ^ summary_b.root.Fingerprint(),
                static_cast<int64_t>(summary_a.row_count) -
                    static_cast<int64_t>(summary_b.row_count)};
    const NodeRef root{0, 0};
    const uint64_t gap = summary_a.row_count > summary_b.row_count
                             ? summary_a.row_count - summary_b.row_count
                             : summary_b.row_count - summary_a.row_count;
    Planned handshake{Pending{root, summary_a.row_count, summary_b.row_count,
                              std::max<double>(1, static_cast<double>(gap))},
                      Step::kDescend, top_levels};
    const size_t top_size = size_t{1} << top_levels;
    if (top_levels > 0 && (summary_a.top.size() != top_size ||
                           summary_b.top.size() != top_size)) {
      return absl::DataLossError(absl::StrFormat(
          "a view's summary carried %d and %d top nodes; %d were asked for",
          summary_a.top.size(), summary_b.top.size(), top_size));
    }
    stats_.digests += summary_a.top.size() + summary_b.top.size();
    std::vector<Pending> next;
    if (top_levels > 0) {
      ViewResponse top_a;
      ViewResponse top_b;
      top_a.descendants = summary_a.top;
      top_b.descendants = summary_b.top;
      CompareChildren(handshake, top_a, top_b, 0, &next);
    }
    if (summary_a.root == summary_b.root &&
        summary_a.row_count == summary_b.row_count) {
      return absl::OkStatus();
    }
    if (summary_a.row_count == 0 || summary_b.row_count == 0) {
      // Nothing to compare against: stream the side that has rows.
      ++stats_.rounds;
      std::vector<NodeRef> ranges{root};
      if (summary_a.row_count > 0) {
        TALLY_RETURN_IF_ERROR(ScanSide(Side::kA, ranges));
      }
      if (summary_b.row_count > 0) {
        TALLY_RETURN_IF_ERROR(ScanSide(Side::kB, ranges));
      }
      return absl::OkStatus();
    }
    if (handshake.levels_ahead == 0) next.push_back(handshake.pending);
    work_ = std::move(next);
    while (!work_.empty()) {
      TALLY_RETURN_IF_ERROR(RunRound(planner));
    }
    return absl::OkStatus();
  }

  // One round: plans the frontier, up to what one round may carry (the rest
  // waits), asks the views and compares their answers.
  absl::Status RunRound(const DiffPlanner& planner) {
    ++stats_.rounds;
    double expected = 0;
    for (const Pending& p : work_) expected += p.expected;
    bits_ = FingerprintBits(expected, options_.miss_probability);
    if (mode_ != AskMode::kPlain) {
      stats_.fingerprint_bits = std::max<uint64_t>(
          stats_.fingerprint_bits, static_cast<uint64_t>(RowBits()));
    }
    CostModel model(
        CostOf(mode_, bits_, RowBits(), EntryBytes(), options_.scan_row_bytes));
    const int rounds_left = planner.ChooseRounds(
        work_, static_cast<int>(stats_.rounds - pass_start_), model);
    const std::vector<Planned> plan =
        planner.TakeRound(&work_, rounds_left, model);
    const RoundRequests round = PackRound(plan, options_.dense_fraction);
    // Streams first: they need no comparison.
    if (!round.scan_a.empty()) {
      TALLY_RETURN_IF_ERROR(ScanSide(Side::kA, round.scan_a));
    }
    if (!round.scan_b.empty()) {
      TALLY_RETURN_IF_ERROR(ScanSide(Side::kB, round.scan_b));
    }
    std::vector<Pending> next;
    TALLY_RETURN_IF_ERROR(asker_.AskBatches(
        mode_, SeededFingerprints{seed_, bits_, RowBits()}, round.batches,
        [&](const Batch& batch, ViewResponse answer_a, ViewResponse answer_b) {
          return CompareBatch(batch, answer_a, answer_b, &next);
        }));
    // Deepest first keeps the stack short; `next` goes on top of what waits.
    work_.insert(work_.end(), next.begin(), next.end());
    return absl::OkStatus();
  }

  // Reads both views' answers to one batch: the mismatched children go to
  // `next`, the differing rows to the sink.
  absl::Status CompareBatch(const Batch& batch, const ViewResponse& answer_a,
                            const ViewResponse& answer_b,
                            std::vector<Pending>* next) {
    ++stats_.exchanges;
    TALLY_RETURN_IF_ERROR(CheckAnswerShape(batch.request, answer_a));
    TALLY_RETURN_IF_ERROR(CheckAnswerShape(batch.request, answer_b));
    stats_.digests += answer_a.descendants.size() + answer_b.descendants.size();
    stats_.entries += answer_a.entries.size() + answer_b.entries.size();
    for (const RowEntry& e : answer_a.entries) entry_bytes_ += WireSize(e);
    for (const RowEntry& e : answer_b.entries) entry_bytes_ += WireSize(e);
    entries_seen_ += answer_a.entries.size() + answer_b.entries.size();

    for (const auto& [planned, slot] : batch.descended) {
      CompareChildren(*planned, answer_a, answer_b, slot, next);
    }
    return CompareRows(answer_a, answer_b, emit_);
  }

  // Streams ranges that are empty on the other side: every row differs.
  absl::Status ScanSide(Side side, const std::vector<NodeRef>& ranges) {
    return asker_.ScanSide(side, ranges, [&](const RowEntry& entry) {
      ++stats_.entries;
      return side == Side::kA ? Emit(&entry, nullptr) : Emit(nullptr, &entry);
    });
  }

  // Every difference a pass finds goes into its balance; the sink hears of
  // each key once over all passes.
  absl::Status Emit(const RowEntry* in_a, const RowEntry* in_b) {
    if (in_a != nullptr) {
      found_.fingerprints ^= in_a->digest.Fingerprint();
      ++found_.count_gap;
    }
    if (in_b != nullptr) {
      found_.fingerprints ^= in_b->digest.Fingerprint();
      --found_.count_gap;
    }
    if (options_.max_passes > 1 && mode_ != AskMode::kPlain) {
      const std::string& key = in_a != nullptr ? in_a->key : in_b->key;
      if (!emitted_.insert(XXH3_64bits(key.data(), key.size())).second) {
        return absl::OkStatus();
      }
    }
    ++stats_.differences;
    return sink_(in_a, in_b);
  }

  // What the differences of a pass add up to, to be checked against the
  // roots: the XOR of the rows' 64-bit fingerprints (a root's fingerprint
  // is the XOR of its rows') and the gap in row counts.
  struct Balance {
    uint64_t fingerprints = 0;
    int64_t count_gap = 0;
  };

  // Rows take 16 bits more than nodes: a false match of a row with another
  // key's would report its key absent on the other side, not merely hide
  // it, so it is made rarer than a miss (docs/design/diff.md, "Short
  // fingerprints").
  int RowBits() const {
    return std::min(bits_ + kRowExtraBits, kMaxFingerprintBits);
  }

  // Mean wire size of the rows seen so far; a guess before any.
  double EntryBytes() const {
    return entries_seen_ == 0 ? options_.entry_bytes_guess
                              : static_cast<double>(entry_bytes_) /
                                    static_cast<double>(entries_seen_);
  }

  TreeView& a_;
  TreeView& b_;
  const DiffOptions& options_;
  const DifferenceSink& sink_;
  DiffStats& stats_;
  ViewAsker asker_;
  // Emit, as the comparison of rows calls it.
  const DifferenceSink emit_;
  // Mismatched nodes still to examine; a stack, so that the descent goes
  // deep before wide and the stack stays bounded.
  std::vector<Pending> work_;
  uint64_t entry_bytes_ = 0;
  uint64_t entries_seen_ = 0;
  // The pass: how views are asked, its seed and fingerprint width, what
  // the roots say the differences add up to and what they do so far.
  AskMode mode_ = AskMode::kPlain;
  uint64_t seed_ = 0;
  int bits_ = kMaxFingerprintBits;
  Balance roots_;
  Balance found_;
  uint64_t pass_start_ = 0;  // rounds before this pass
  // Hashes of the keys sent to the sink, when a later pass may find them
  // again.
  absl::flat_hash_set<uint64_t> emitted_;
};

}  // namespace

std::string DiffStats::DebugString() const {
  return absl::StrFormat(
      "differences=%d rounds=%d exchanges=%d digests=%d entries=%d "
      "bytes_sent=%d bytes_received=%d passes=%d seed=%016x "
      "fingerprint_bits=%d verified=%s",
      differences, rounds, exchanges, digests, entries, bytes_sent,
      bytes_received, passes, seed, fingerprint_bits,
      verified ? "true" : "false");
}

absl::Status DiffViews(TreeView& a, TreeView& b, const DiffOptions& options,
                       const DifferenceSink& sink, DiffStats* stats) {
  DiffStats local_stats;
  DiffStats* out = stats != nullptr ? stats : &local_stats;
  *out = DiffStats{};
  Differ differ(a, b, options, sink, out);
  const absl::Status status = differ.Run();
  differ.FinishTraffic();
  return status;
}

}  // namespace tree
}  // namespace tally
