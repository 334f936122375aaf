#include "tree/memory_tree_view.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "tree/status_macros.h"

namespace tally {
namespace tree {

absl::StatusOr<std::unique_ptr<MemoryTreeView>> MemoryTreeView::Create(
    int depth, std::vector<RowEntry> rows) {
  TALLY_ASSIGN_OR_RETURN(MerkleTree tree, MerkleTree::Create(depth));
  std::sort(rows.begin(), rows.end(), [](const RowEntry& x, const RowEntry& y) {
    return x.token != y.token ? x.token < y.token : x.key < y.key;
  });
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowEntry& row = rows[i];
    if (row.token != TokenOf(row.key)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "row '%s' has token %d, not TokenOf(key)", row.key, row.token));
    }
    if (i > 0 && rows[i - 1].key == row.key) {
      return absl::InvalidArgumentError(
          absl::StrFormat("key '%s' appears twice", row.key));
    }
    tree.Update(NodeIndexOf(row.token, depth), row.digest, 1);
  }
  return std::unique_ptr<MemoryTreeView>(
      new MemoryTreeView(std::move(tree), std::move(rows)));
}

absl::StatusOr<ViewSummary> MemoryTreeView::Summary(int top_levels) {
  TALLY_RETURN_IF_ERROR(ValidateSummaryTopLevels(top_levels));
  ViewSummary summary{
      tree_.depth(), tree_.root().digest, tree_.root().count, {}};
  if (top_levels > 0) {
    ViewRequest request;
    request.descend.push_back(DescendRequest{NodeRef{0, 0}, top_levels});
    TALLY_ASSIGN_OR_RETURN(ViewResponse response, Exchange(request));
    summary.top = std::move(response.descendants);
  }
  return summary;
}

std::pair<size_t, size_t> MemoryTreeView::RowsOf(const NodeRef& node) const {
  const Token first = node.first_token();
  const Token last = node.last_token();
  auto begin = std::lower_bound(
      rows_.begin(), rows_.end(), first,
      [](const RowEntry& row, Token t) { return row.token < t; });
  auto end = std::upper_bound(
      begin, rows_.end(), last,
      [](Token t, const RowEntry& row) { return t < row.token; });
  return {static_cast<size_t>(begin - rows_.begin()),
          static_cast<size_t>(end - rows_.begin())};
}

absl::StatusOr<ViewResponse> MemoryTreeView::Exchange(
    const ViewRequest& request) {
  TALLY_RETURN_IF_ERROR(ValidateViewRequest(request));
  ViewResponse response;
  for (const DescendRequest& d : request.descend) {
    const int target = d.node.level + d.levels_ahead;
    if (target <= tree_.depth()) {
      const uint64_t n = uint64_t{1} << d.levels_ahead;
      for (uint64_t i = 0; i < n; ++i) {
        const NodeState& s =
            tree_.node(target, (d.node.index << d.levels_ahead) | i);
        response.descendants.push_back(
            NodeDigest{s.digest.Fingerprint(), s.count});
      }
      continue;
    }
    DescendantAccumulator acc(d, &response.descendants);
    const auto [begin, end] = RowsOf(d.node);
    for (size_t i = begin; i < end; ++i)
      acc.Add(rows_[i].token, rows_[i].digest);
  }
  for (const NodeRef& range : request.list) {
    const auto [begin, end] = RowsOf(range);
    if (response.entries.size() + (end - begin) > kMaxEntriesPerExchange) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "listing would return more than %d rows; list fewer ranges",
          kMaxEntriesPerExchange));
    }
    response.entries_per_range.push_back(static_cast<uint32_t>(end - begin));
    response.entries.insert(response.entries.end(), rows_.begin() + begin,
                            rows_.begin() + end);
  }
  return response;
}

absl::Status MemoryTreeView::Scan(absl::Span<const NodeRef> ranges,
                                  const EntrySink& sink) {
  for (const NodeRef& range : ranges) {
    if (!range.IsValid()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "scan names an invalid range: %s", range.DebugString()));
    }
    const auto [begin, end] = RowsOf(range);
    for (size_t i = begin; i < end; ++i) TALLY_RETURN_IF_ERROR(sink(rows_[i]));
  }
  return absl::OkStatus();
}

}  // namespace tree
}  // namespace tally
