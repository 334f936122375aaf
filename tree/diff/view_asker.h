// The ways a diff asks its two views (docs/design/diff.md, "How the views
// are asked"): their summaries; the exchanges of a round
// (tree/diff/diff_batches.h) plainly, with short seeded fingerprints, or
// the own view first with its fingerprints sent to the other; and the
// streaming of ranges empty on one side. Whatever the way, the answers reach
// the caller in the plain form the comparison reads (tree/diff/diff_compare.h).
// The asker also counts the payload each view moves.
//
//   ViewAsker asker(a, b, options);
//   ViewSummary summary_a, summary_b;
//   TALLY_RETURN_IF_ERROR(asker.AskSummaries(5, &summary_a, &summary_b));
//   TALLY_RETURN_IF_ERROR(asker.AskBatches(
//       AskMode::kSeeded, fingerprints, round.batches,
//       [&](const Batch& batch, ViewResponse answer_a,
//           ViewResponse answer_b) { ... compare ... }));
//
// Thread-compatible: one diff at a time. Where both views are asked at
// once, view b is asked from a thread of its own and view a from the
// caller's; each view is still used by one thread at a time, and the
// callbacks run on the caller's thread.
#ifndef TALLY_TREE_DIFF_VIEW_ASKER_H_
#define TALLY_TREE_DIFF_VIEW_ASKER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "tree/diff/diff.h"
#include "tree/diff/diff_batches.h"
#include "tree/diff/diff_cost.h"
#include "tree/token.h"
#include "tree/tree_view.h"

namespace tally {
namespace tree {
namespace internal {

enum class Side { kA, kB };

// The seed and widths of a round's short fingerprints (AskMode::kSeeded and
// kOwnFirst; tree/fingerprint.h).
struct SeededFingerprints {
  uint64_t seed = 0;
  int node_bits = 64;
  int row_bits = 64;
};

// Receives the two views' answers to one batch, in the plain form.
using BatchAnswersSink = std::function<absl::Status(
    const Batch& batch, ViewResponse answer_a, ViewResponse answer_b)>;

class ViewAsker {
 public:
  // Reads what the views have measured of their traffic so far
  // (TreeView::MeasuredTraffic), to count from there. `a`, `b` and
  // `options` must outlive the asker.
  ViewAsker(TreeView& a, TreeView& b, const DiffOptions& options);

  ViewAsker(const ViewAsker&) = delete;
  ViewAsker& operator=(const ViewAsker&) = delete;

  // Both views' summaries with `top_levels` levels below the root, asked at
  // the same time. Returns view a's error first, then view b's.
  absl::Status AskSummaries(int top_levels, ViewSummary* summary_a,
                            ViewSummary* summary_b);

  // Sends every batch to both views the way `mode` says, with
  // `fingerprints` unless kPlain, and hands each batch's answers to
  // `on_answers` in batch order. kPlain and kSeeded ask both views at the
  // same time, each view the batches one after the other, and hand over the
  // answers once both have answered every batch (or failed): a round then
  // costs one round trip when it holds one batch. kOwnFirst asks, batch by
  // batch, the own view (DiffOptions::own_view) and then the other one with
  // the own fingerprints, and hands over each batch before asking the next:
  // the other view's equal children as copies of the own ones (any other
  // fingerprint marks those that differ), and on either side only the rows
  // that differ. Stops at and returns the first error of a view, of an
  // answer's shape (kDataLoss) or of `on_answers`.
  absl::Status AskBatches(AskMode mode, const SeededFingerprints& fingerprints,
                          const std::vector<Batch>& batches,
                          const BatchAnswersSink& on_answers);

  // Streams every row of `ranges` from one view to `on_row`: ranges empty
  // on the other side, every row of which differs. With values when
  // DiffOptions::scan_values_a (scan_values_b) asks for them. Runs on the
  // caller's thread; returns the first error of the view or of `on_row`.
  absl::Status ScanSide(Side side, const std::vector<NodeRef>& ranges,
                        const EntrySink& on_row);

  // The payload bytes both views moved since the asker was made: what a
  // view measured where it can, WireSize() of what was asked and answered
  // where it cannot. The own view's modeled bytes are not counted: it
  // answers in this process.
  ViewTraffic Traffic() const;

 private:
  absl::Status AskPlain(const std::vector<Batch>& batches,
                        const BatchAnswersSink& on_answers);
  absl::Status AskSeeded(const SeededFingerprints& fingerprints,
                         const std::vector<Batch>& batches,
                         const BatchAnswersSink& on_answers);
  absl::Status AskOwnFirst(const SeededFingerprints& fingerprints,
                           const std::vector<Batch>& batches,
                           const BatchAnswersSink& on_answers);

  // Counts modeled payload (WireSize) for one side.
  void Count(Side side, size_t sent, size_t received);

  TreeView& a_;
  TreeView& b_;
  const DiffOptions& options_;
  const std::optional<ViewTraffic> start_a_;
  const std::optional<ViewTraffic> start_b_;
  ViewTraffic modeled_a_;
  ViewTraffic modeled_b_;
};

}  // namespace internal
}  // namespace tree
}  // namespace tally

#endif  // TALLY_TREE_DIFF_VIEW_ASKER_H_
