#include "tree/diff/absent_as_empty_view.h"

#include "absl/strings/str_format.h"
#include "tree/status_macros.h"

namespace tally {
namespace tree {

absl::StatusOr<ViewSummary> AbsentAsEmptyView::Summary(int top_levels) {
  if (view_ != nullptr) {
    absl::StatusOr<ViewSummary> summary = view_->Summary(top_levels);
    if (!absl::IsNotFound(summary.status())) return summary;
  }
  if (empty_ == nullptr) {
    TALLY_ASSIGN_OR_RETURN(empty_, MemoryTreeView::Create(kDefaultDepth, {}));
  }
  return empty_->Summary(top_levels);
}

absl::StatusOr<ViewResponse> AbsentAsEmptyView::Exchange(
    const ViewRequest& request) {
  return absent() ? empty_->Exchange(request) : view_->Exchange(request);
}

absl::StatusOr<SeededResponse> AbsentAsEmptyView::ExchangeSeeded(
    const SeededRequest& request) {
  return absent() ? empty_->ExchangeSeeded(request)
                  : view_->ExchangeSeeded(request);
}

bool AbsentAsEmptyView::AnswersSeeded() const {
  return absent() || view_->AnswersSeeded();
}

absl::Status AbsentAsEmptyView::Scan(absl::Span<const NodeRef> ranges,
                                     const EntrySink& sink) {
  return absent() ? empty_->Scan(ranges, sink) : view_->Scan(ranges, sink);
}

absl::Status AbsentAsEmptyView::ScanWithValues(absl::Span<const NodeRef> ranges,
                                               const EntrySink& sink) {
  return absent() ? empty_->ScanWithValues(ranges, sink)
                  : view_->ScanWithValues(ranges, sink);
}

std::optional<ViewTraffic> AbsentAsEmptyView::MeasuredTraffic() const {
  if (view_ == nullptr) return ViewTraffic{};
  return view_->MeasuredTraffic();
}

absl::Status KeyspaceAbsentOnBoth(absl::string_view keyspace,
                                  absl::string_view a, absl::string_view b) {
  return absl::NotFoundError(absl::StrFormat(
      "keyspace '%s' exists on neither %s nor %s", keyspace, a, b));
}

}  // namespace tree
}  // namespace tally
