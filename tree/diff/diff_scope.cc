#include "tree/diff/diff_scope.h"

#include "absl/strings/str_cat.h"
#include "tree/diff/absent_as_empty_view.h"
#include "tree/diff/token_range_view.h"
#include "tree/status_macros.h"

namespace tally {
namespace tree {

std::string DiffScope::Describe() const {
  if (keys != nullptr) {
    return absl::StrCat(keys->size(), keys->size() == 1 ? " key" : " keys");
  }
  if (range.IsAll()) return "";
  return absl::StrCat("tokens ", range.ToString());
}

std::unique_ptr<TreeView> NarrowView(TreeView& whole, const DiffScope& scope) {
  if (scope.keys != nullptr) {
    return std::make_unique<KeyListView>(whole, scope.keys);
  }
  if (scope.range.IsAll()) return nullptr;
  return std::make_unique<TokenRangeView>(whole, scope.range);
}

absl::StatusOr<std::optional<ViewSummary>> ScopedSummary(
    std::unique_ptr<TreeView> view, const DiffScope& scope) {
  AbsentAsEmptyView whole(std::move(view));
  std::unique_ptr<TreeView> part = NarrowView(whole, scope);
  TALLY_ASSIGN_OR_RETURN(ViewSummary summary,
                         part != nullptr ? part->Summary(0) : whole.Summary(0));
  if (whole.absent()) return std::optional<ViewSummary>();
  return std::optional<ViewSummary>(std::move(summary));
}

}  // namespace tree
}  // namespace tally
