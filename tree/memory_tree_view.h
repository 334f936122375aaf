// MemoryTreeView: a TreeView over rows held in memory.
//
// Used by the diff's property tests and by `tally-bench diff-mem`: it answers
// exactly as a store would (tree above its depth, range scans below), without
// I/O, so the algorithm can be measured on its own.
//
//   std::vector<RowEntry> rows = ...;  // any order; keys unique
//   absl::StatusOr<MemoryTreeView> view = MemoryTreeView::Create(16, rows);
//
// Thread-compatible: const after construction except for Exchange/Scan, which
// only read; one diff at a time is the intended use.
#ifndef TALLY_TREE_MEMORY_TREE_VIEW_H_
#define TALLY_TREE_MEMORY_TREE_VIEW_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "tree/merkle_tree.h"
#include "tree/tree_view.h"

namespace tally {
namespace tree {

class MemoryTreeView : public TreeView {
 public:
  // Builds the tree of depth `depth` over `rows`. Returns kInvalidArgument
  // for a bad depth, a duplicate key, or a row whose token is not
  // TokenOf(key).
  static absl::StatusOr<std::unique_ptr<MemoryTreeView>> Create(
      int depth, std::vector<RowEntry> rows);

  absl::StatusOr<ViewSummary> Summary(int top_levels) override;
  absl::StatusOr<ViewResponse> Exchange(const ViewRequest& request) override;
  absl::Status Scan(absl::Span<const NodeRef> ranges,
                    const EntrySink& sink) override;

  const MerkleTree& tree() const { return tree_; }

 private:
  MemoryTreeView(MerkleTree tree, std::vector<RowEntry> rows)
      : tree_(std::move(tree)), rows_(std::move(rows)) {}

  // Index range [first, last) of the rows of `node` in rows_.
  std::pair<size_t, size_t> RowsOf(const NodeRef& node) const;

  MerkleTree tree_;
  std::vector<RowEntry> rows_;  // sorted by (token, key)
};

}  // namespace tree
}  // namespace tally

#endif  // TALLY_TREE_MEMORY_TREE_VIEW_H_
