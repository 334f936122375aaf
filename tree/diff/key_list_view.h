// KeyListView: a TreeView decorator that answers as if the view it wraps
// held only the rows of a given list of keys. A diff of two such views
// finds which of those keys differ, and a repair moves only them (`tally
// repair A B --keys-from FILE`): the keys an application reported wrong,
// without a pass over the keyspace.
//
// At its summary the view lists each key's token from the wrapped view
// (batched: a few thousand keys an exchange, one round trip each), keeps
// the rows of the listed keys (another key sharing a token is dropped) and
// answers everything from those rows in memory (MemoryTreeView, at the
// wrapped view's depth). The diff then costs the listing and nothing more.
// Rows keep their 64-bit fingerprint only (the high half of the digest
// zero), as a remote view lists them: the root is then the same for the
// same rows, local or remote.
//
//   auto keys = std::make_shared<const KeyList>(KeyList{"user:1", "user:7"});
//   KeyListView part_a(whole_a, keys), part_b(whole_b, keys);
//   absl::Status s = DiffViews(part_a, part_b, options, sink, &stats);
//
// Memory: the listed rows (key, version, digest: ~80 bytes and the key),
// bounded by the list the caller gives (node/sync/diff_run.h caps a request).
//
// Thread-compatible: one diff at a time.
#ifndef TALLY_TREE_DIFF_KEY_LIST_VIEW_H_
#define TALLY_TREE_DIFF_KEY_LIST_VIEW_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tree/memory_tree_view.h"
#include "tree/tree_view.h"

namespace tally {
namespace tree {

// Keys to limit a comparison to; duplicates are harmless.
using KeyList = std::vector<std::string>;

class KeyListView : public TreeView {
 public:
  // `view` must outlive this view. REQUIRES: keys != nullptr.
  KeyListView(TreeView& view, std::shared_ptr<const KeyList> keys)
      : view_(view), keys_(std::move(keys)) {}

  KeyListView(const KeyListView&) = delete;
  KeyListView& operator=(const KeyListView&) = delete;

  // Lists the keys from the wrapped view the first time (its errors are
  // returned as they are: kNotFound for an absent keyspace), then answers
  // from them.
  absl::StatusOr<ViewSummary> Summary(int top_levels) override;

  // REQUIRES: Summary() returned OK (as the diff calls them).
  absl::StatusOr<ViewResponse> Exchange(const ViewRequest& request) override {
    return rows_->Exchange(request);
  }
  absl::StatusOr<SeededResponse> ExchangeSeeded(
      const SeededRequest& request) override {
    return rows_->ExchangeSeeded(request);
  }
  // The listed rows answer in this process.
  bool AnswersSeeded() const override { return true; }
  absl::Status Scan(absl::Span<const NodeRef> ranges,
                    const EntrySink& sink) override {
    return rows_->Scan(ranges, sink);
  }
  // The wrapped view's listing; answers from memory move nothing.
  std::optional<ViewTraffic> MeasuredTraffic() const override {
    return view_.MeasuredTraffic();
  }

 private:
  absl::Status ListKeys();

  TreeView& view_;
  const std::shared_ptr<const KeyList> keys_;
  std::unique_ptr<MemoryTreeView> rows_;  // set by the first Summary()
};

}  // namespace tree
}  // namespace tally

#endif  // TALLY_TREE_DIFF_KEY_LIST_VIEW_H_
