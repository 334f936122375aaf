#include "tree/diff/key_list_view.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "tree/status_macros.h"

namespace tally {
namespace tree {
namespace {

// One listing exchange: well inside the per-exchange limits (tree_view.h),
// also for 16 KiB keys.
constexpr size_t kKeysPerExchange = 4096;
constexpr size_t kKeyBytesPerExchange = 1 << 20;
// A listed row's bytes besides its key (version, origin, fingerprint).
constexpr size_t kRowOverheadBytes = 64;

}  // namespace

absl::StatusOr<ViewSummary> KeyListView::Summary(int top_levels) {
  TALLY_RETURN_IF_ERROR(ValidateSummaryTopLevels(top_levels));
  if (rows_ == nullptr) TALLY_RETURN_IF_ERROR(ListKeys());
  return rows_->Summary(top_levels);
}

absl::Status KeyListView::ListKeys() {
  TALLY_ASSIGN_OR_RETURN(const ViewSummary whole, view_.Summary(0));
  const absl::flat_hash_set<std::string> wanted(keys_->begin(), keys_->end());
  // Each token once, in order, with the bytes its rows will take in the
  // answer (keys sharing a token come in one listing).
  std::vector<std::pair<Token, size_t>> tokens;
  tokens.reserve(wanted.size());
  for (const std::string& key : wanted) {
    tokens.push_back({TokenOf(key), key.size() + kRowOverheadBytes});
  }
  std::sort(tokens.begin(), tokens.end());

  std::vector<RowEntry> rows;
  for (size_t i = 0; i < tokens.size() && whole.row_count > 0;) {
    ViewRequest request;
    size_t bytes = 0;
    while (i < tokens.size() && request.list.size() < kKeysPerExchange &&
           bytes < kKeyBytesPerExchange) {
      const Token token = tokens[i].first;
      request.list.push_back(NodeRef{kTokenBits, token});
      for (; i < tokens.size() && tokens[i].first == token; ++i) {
        bytes += tokens[i].second;
      }
    }
    TALLY_ASSIGN_OR_RETURN(ViewResponse response, view_.Exchange(request));
    for (RowEntry& entry : response.entries) {
      if (!wanted.contains(entry.key)) continue;
      // Only the fingerprint travels from a remote view: a local view's
      // rows keep just that too, so that the same rows give the same root
      // on either side.
      entry.digest = Digest128{0, entry.digest.Fingerprint()};
      rows.push_back(std::move(entry));
    }
  }
  TALLY_ASSIGN_OR_RETURN(rows_,
                         MemoryTreeView::Create(whole.depth, std::move(rows)));
  return absl::OkStatus();
}

}  // namespace tree
}  // namespace tally
