#include "tree/diff_scope.h"

#include "absl/strings/str_cat.h"
#include "tree/token_range_view.h"

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

}  // namespace tree
}  // namespace tally
