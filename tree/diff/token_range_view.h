// TokenRangeView: a TreeView decorator that answers as if the view it wraps
// held only the rows whose tokens lie in one TokenRange. A diff of two such
// views finds exactly the differing keys of that range, and a repair moves
// only them (`tally repair A B --range FROM:TO`): a subrange repair, as
// Cassandra's `nodetool repair -st -et` runs one.
//
// Nodes inside the range are asked of the wrapped view as they are; nodes
// outside it answer empty without asking; the few nodes a boundary cuts
// (at most two per level) are answered from their pieces inside the range
// (CoverOf), each asked as one half of its parent, in the same exchange.
// A scan of a cut range scans its pieces only, so a range of a few
// thousand rows costs a few thousand rows, whatever the keyspace holds.
//
// Seeded exchanges (tree/tree_view.h) of nodes inside the range go to the
// wrapped view as they are; those of cut nodes are answered here from plain
// 64-bit answers (AnswerSeeded), so a round that holds both costs one more
// round trip. The summary's root is the XOR of the range's rows' 64-bit
// fingerprints (its high half zero): two ranges compare as equal when their
// fingerprints and counts do, a 2^-64 chance for different ones.
//
//   AbsentAsEmptyView whole(remote->NewTreeView("users"));
//   TokenRangeView part(whole, *ParseTokenRange("0400000000000000:07ff"));
//   absl::Status s = DiffViews(part_a, part_b, options, sink, &stats);
//
// Thread-compatible, like the view it wraps: one diff at a time.
#ifndef TALLY_TREE_DIFF_TOKEN_RANGE_VIEW_H_
#define TALLY_TREE_DIFF_TOKEN_RANGE_VIEW_H_

#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tree/token_range.h"
#include "tree/tree_view.h"

namespace tally {
namespace tree {

class TokenRangeView : public TreeView {
 public:
  // `view` must outlive this view.
  TokenRangeView(TreeView& view, const TokenRange& range)
      : view_(view), range_(range) {}

  TokenRangeView(const TokenRangeView&) = delete;
  TokenRangeView& operator=(const TokenRangeView&) = delete;

  const TokenRange& range() const { return range_; }

  // The wrapped view's depth; root and count of the range's rows only. Two
  // exchanges of the wrapped view (its summary, then the range's nodes).
  absl::StatusOr<ViewSummary> Summary(int top_levels) override;
  absl::StatusOr<ViewResponse> Exchange(const ViewRequest& request) override;
  absl::StatusOr<SeededResponse> ExchangeSeeded(
      const SeededRequest& request) override;
  bool AnswersSeeded() const override { return view_.AnswersSeeded(); }
  absl::Status Scan(absl::Span<const NodeRef> ranges,
                    const EntrySink& sink) override;
  absl::Status ScanWithValues(absl::Span<const NodeRef> ranges,
                              const EntrySink& sink) override;
  std::optional<ViewTraffic> MeasuredTraffic() const override {
    return view_.MeasuredTraffic();
  }

 private:
  // `ranges` cut to the range: nodes outside dropped, cut ones replaced by
  // their pieces, in the same order.
  std::vector<NodeRef> Clip(absl::Span<const NodeRef> ranges) const;

  TreeView& view_;
  const TokenRange range_;
};

}  // namespace tree
}  // namespace tally

#endif  // TALLY_TREE_DIFF_TOKEN_RANGE_VIEW_H_
