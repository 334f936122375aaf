// DiffScope: the part of a keyspace a diff or repair covers — all of it
// (the default, what sessions use), one token range (TokenRangeView), or a
// list of keys (KeyListView).
//
//   DiffScope scope;
//   scope.range = *ParseTokenRange("0400000000000000:07ffffffffffffff");
//   std::unique_ptr<TreeView> part = NarrowView(whole, scope);
//   TreeView& view = part != nullptr ? *part : whole;
//
// Thread-safe: a value type; the views it makes are thread-compatible.
#ifndef TALLY_TREE_DIFF_DIFF_SCOPE_H_
#define TALLY_TREE_DIFF_DIFF_SCOPE_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "tree/diff/key_list_view.h"
#include "tree/token_range.h"
#include "tree/tree_view.h"

namespace tally {
namespace tree {

struct DiffScope {
  TokenRange range;  // all tokens unless set
  // Set: only these keys (then `range` is all tokens).
  std::shared_ptr<const KeyList> keys;

  bool IsWhole() const { return keys == nullptr && range.IsAll(); }
  // For messages: "tokens 0400000000000000:07ffffffffffffff", "3 keys",
  // "" for the whole keyspace.
  std::string Describe() const;
};

// A view of `whole` limited to `scope`, or nullptr when the scope is the
// whole keyspace (use `whole` itself). `whole` must outlive the result.
std::unique_ptr<TreeView> NarrowView(TreeView& whole, const DiffScope& scope);

// The summary (root and rows) of `scope` in `view`'s keyspace, or nullopt
// when `view` is null or answers kNotFound (the replica lacks the
// keyspace): the proof shown after a scoped repair. Other errors of the
// view are returned as they are.
absl::StatusOr<std::optional<ViewSummary>> ScopedSummary(
    std::unique_ptr<TreeView> view, const DiffScope& scope);

}  // namespace tree
}  // namespace tally

#endif  // TALLY_TREE_DIFF_DIFF_SCOPE_H_
