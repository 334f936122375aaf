// AbsentAsEmptyView: a TreeView decorator that answers as an empty keyspace
// when the replica it wraps does not have the keyspace at all.
//
// A comparison of two replicas treats a keyspace one side lacks as empty:
// "A has 10 rows, B has none" is a difference (and repair creates the
// keyspace on B with its first rows), not an error. The view remembers that
// the keyspace was absent, so that a caller can report a keyspace absent on
// both sides (usually a typo) with KeyspaceAbsentOnBoth().
//
//   AbsentAsEmptyView a(remote_a->NewTreeView("users"));
//   AbsentAsEmptyView b(remote_b->NewTreeView("users"));
//   absl::Status s = DiffViews(a, b, options, on_difference, &stats);
//   if (a.absent() && b.absent()) {
//     return KeyspaceAbsentOnBoth("users", "node-a", "node-b");
//   }
//
// Thread-compatible, like the view it wraps: one diff at a time.
#ifndef TALLY_TREE_DIFF_ABSENT_AS_EMPTY_VIEW_H_
#define TALLY_TREE_DIFF_ABSENT_AS_EMPTY_VIEW_H_

#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tree/memory_tree_view.h"
#include "tree/tree_view.h"

namespace tally {
namespace tree {

class AbsentAsEmptyView : public TreeView {
 public:
  // Takes ownership of `view`. A null `view` means the caller already knows
  // the replica lacks the keyspace (e.g. opening the view said kNotFound):
  // the view is then absent without asking anyone.
  explicit AbsentAsEmptyView(std::unique_ptr<TreeView> view)
      : view_(std::move(view)) {}

  AbsentAsEmptyView(const AbsentAsEmptyView&) = delete;
  AbsentAsEmptyView& operator=(const AbsentAsEmptyView&) = delete;

  // True once Summary() found the keyspace absent (the wrapped view answered
  // kNotFound, or there is none). The diff asks for the summary first, so
  // after a diff this says whether the replica had the keyspace.
  bool absent() const { return empty_ != nullptr; }

  // The wrapped view's summary; an empty keyspace's (tree::kDefaultDepth)
  // when it answers kNotFound. Its other errors are returned as they are.
  absl::StatusOr<ViewSummary> Summary(int top_levels) override;

  // REQUIRES: Summary() returned OK (as the diff calls them).
  absl::StatusOr<ViewResponse> Exchange(const ViewRequest& request) override;
  absl::StatusOr<SeededResponse> ExchangeSeeded(
      const SeededRequest& request) override;
  // The wrapped view's; true when absent (the empty view answers in
  // process).
  bool AnswersSeeded() const override;
  absl::Status Scan(absl::Span<const NodeRef> ranges,
                    const EntrySink& sink) override;
  absl::Status ScanWithValues(absl::Span<const NodeRef> ranges,
                              const EntrySink& sink) override;

  // What the wrapped view moved (its kNotFound answer travelled too); zero
  // when there is no wrapped view.
  std::optional<ViewTraffic> MeasuredTraffic() const override;

 private:
  std::unique_ptr<TreeView> view_;         // null: known absent
  std::unique_ptr<MemoryTreeView> empty_;  // set when absent
};

// The kNotFound a comparison returns when neither replica has `keyspace`;
// `a` and `b` name the replicas as the caller's user knows them.
absl::Status KeyspaceAbsentOnBoth(absl::string_view keyspace,
                                  absl::string_view a, absl::string_view b);

}  // namespace tree
}  // namespace tally

#endif  // TALLY_TREE_DIFF_ABSENT_AS_EMPTY_VIEW_H_
