#include "storage/store_tree_view.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "storage/internal/coding.h"
#include "storage/internal/leveldb_status.h"
#include "storage/internal/records.h"
#include "storage/internal/snapshot_row_reader.h"
#include "storage/internal/store_impl.h"  // Keyspace
#include "tree/status_macros.h"

namespace tally {
namespace storage {
namespace internal {

using tree::Digest128;
using tree::HlcTimestamp;
using tree::NodeRef;
using tree::Token;
using tree::Version;

absl::StatusOr<tree::ViewSummary> StoreTreeView::Summary(int top_levels) {
  TALLY_RETURN_IF_ERROR(tree::ValidateSummaryTopLevels(top_levels));
  tree::ViewSummary summary;
  reader_->ReadTree(*keyspace_, [&summary](const tree::MerkleTree& t) {
    summary = tree::ViewSummary{t.depth(), t.root().digest, t.root().count, {}};
  });
  if (top_levels > 0) {
    tree::ViewRequest request;
    request.descend.push_back(tree::DescendRequest{NodeRef{0, 0}, top_levels});
    TALLY_ASSIGN_OR_RETURN(tree::ViewResponse response, Exchange(request));
    summary.top = std::move(response.descendants);
  }
  return summary;
}

absl::StatusOr<tree::ViewResponse> StoreTreeView::Exchange(
    const tree::ViewRequest& request) {
  TALLY_RETURN_IF_ERROR(tree::ValidateViewRequest(request));
  tree::ViewResponse response;
  const int depth = keyspace_->depth;
  // Nodes at or above the leaves come from the tree, under one lock.
  reader_->ReadTree(*keyspace_, [&](const tree::MerkleTree& t) {
    for (const tree::DescendRequest& d : request.descend) {
      const int target = d.node.level + d.levels_ahead;
      if (target > depth) continue;
      const uint64_t n = uint64_t{1} << d.levels_ahead;
      for (uint64_t i = 0; i < n; ++i) {
        const tree::NodeState& s =
            t.node(target, (d.node.index << d.levels_ahead) | i);
        response.descendants.push_back(
            tree::NodeDigest{s.digest.Fingerprint(), s.count});
      }
    }
  });
  const bool needs_scan =
      !request.list.empty() ||
      std::any_of(request.descend.begin(), request.descend.end(),
                  [&](const tree::DescendRequest& d) {
                    return d.node.level + d.levels_ahead > depth;
                  });
  if (!needs_scan) return response;

  // Below the leaves: range scans over one snapshot. Rebuild the answer in
  // request order, since tree answers were gathered first.
  const leveldb::Snapshot* snapshot = reader_->GetSnapshot();
  absl::Status status;
  // Listed rows found damaged, marked once the snapshot is released.
  std::vector<Token> damaged;
  std::vector<tree::NodeDigest> ordered;
  size_t from_tree = 0;
  for (const tree::DescendRequest& d : request.descend) {
    const uint64_t n = uint64_t{1} << d.levels_ahead;
    if (d.node.level + d.levels_ahead <= depth) {
      ordered.insert(ordered.end(), response.descendants.begin() + from_tree,
                     response.descendants.begin() + from_tree + n);
      from_tree += n;
      continue;
    }
    tree::DescendantAccumulator acc(d, &ordered);
    status = reader_->ForEachRow(
        snapshot, keyspace_->id.value(), d.node, FillFor(d.node),
        [&](const StoredRow& row) -> absl::StatusOr<bool> {
          acc.Add(row.token, row.header.digest);
          return true;
        });
    if (!status.ok()) break;
  }
  response.descendants = std::move(ordered);
  size_t entry_bytes = 0;
  response.entries_per_range.assign(request.list.size(), 0);
  if (status.ok()) {
    status = ForEachSoundEntry(
        snapshot, request.list, SnapshotRowReader::Values::kNo, &damaged,
        [&](size_t range, tree::RowEntry entry) -> absl::StatusOr<bool> {
          if (response.entries.size() >= tree::kMaxEntriesPerExchange) {
            return absl::ResourceExhaustedError(absl::StrFormat(
                "listing would return more than %d rows; list fewer ranges",
                tree::kMaxEntriesPerExchange));
          }
          // An answer is never built past what could be sent.
          entry_bytes += tree::WireSize(entry);
          if (entry_bytes > tree::kMaxEntryBytesPerExchange) {
            return absl::ResourceExhaustedError(absl::StrFormat(
                "listing would return more than %d bytes of rows; list "
                "fewer ranges",
                tree::kMaxEntryBytesPerExchange));
          }
          response.entries.push_back(std::move(entry));
          ++response.entries_per_range[range];
          return true;
        });
  }
  reader_->ReleaseSnapshot(snapshot);
  for (Token token : damaged) (void)reader_->MarkDamaged(*keyspace_, token);
  if (!status.ok()) return status;
  return response;
}

absl::Status StoreTreeView::Scan(absl::Span<const NodeRef> ranges,
                                 const tree::EntrySink& sink) {
  return ScanRanges(ranges, SnapshotRowReader::Values::kNo, sink);
}

absl::Status StoreTreeView::ScanWithValues(absl::Span<const NodeRef> ranges,
                                           const tree::EntrySink& sink) {
  return ScanRanges(ranges, SnapshotRowReader::Values::kYes, sink);
}

absl::Status StoreTreeView::ScanRanges(absl::Span<const NodeRef> ranges,
                                       SnapshotRowReader::Values values,
                                       const tree::EntrySink& sink) {
  for (const NodeRef& range : ranges) {
    if (!range.IsValid()) {
      return absl::InvalidArgumentError(
          absl::StrCat("scan names an invalid range: ", range.DebugString()));
    }
  }
  const leveldb::Snapshot* snapshot = reader_->GetSnapshot();
  std::vector<Token> damaged;
  const absl::Status status = ForEachSoundEntry(
      snapshot, ranges, values, &damaged,
      [&](size_t, tree::RowEntry entry) -> absl::StatusOr<bool> {
        TALLY_RETURN_IF_ERROR(sink(entry));
        return true;
      });
  reader_->ReleaseSnapshot(snapshot);
  for (Token token : damaged) (void)reader_->MarkDamaged(*keyspace_, token);
  return status;
}

CacheFill StoreTreeView::FillFor(const NodeRef& range) const {
  // The range's rows as the tree counts them: its own node, or below the
  // leaves the leaf that holds it (at least as many).
  const int depth = keyspace_->depth;
  const NodeRef node =
      range.level <= depth
          ? range
          : NodeRef{depth, range.index >> (range.level - depth)};
  uint64_t rows = 0;
  reader_->ReadTree(*keyspace_, [&](const tree::MerkleTree& t) {
    rows = t.node(node.level, node.index).count;
  });
  return rows <= kCachedRangeRows ? CacheFill::kYes : CacheFill::kNo;
}

absl::Status StoreTreeView::ForEachSoundEntry(
    const leveldb::Snapshot* snapshot, absl::Span<const NodeRef> ranges,
    SnapshotRowReader::Values values, std::vector<Token>* damaged,
    absl::FunctionRef<absl::StatusOr<bool>(size_t, tree::RowEntry)> fn) {
  // The rows are checked kCheckBatch at a time, with one backend read each
  // (CheckedEntries), whatever ranges they come from: a row read alone from
  // a PostgreSQL backend is a round trip, a diff lists whole leaves, and one
  // exchange lists about as many ranges as there are differences.
  struct Copied {
    size_t range;
    Token token;
    std::string key;
    RowHeader header;
    std::string payload;
  };
  std::vector<Copied> batch;
  std::vector<StoredRow> views;
  bool stopped = false;
  auto flush = [&]() -> absl::Status {
    views.clear();
    for (const Copied& c : batch) {
      views.push_back(StoredRow{c.token, c.key, c.header, c.payload});
    }
    TALLY_ASSIGN_OR_RETURN(std::vector<absl::StatusOr<tree::RowEntry>> entries,
                           reader_->CheckedEntries(*keyspace_, views, values));
    for (size_t i = 0; i < entries.size() && !stopped; ++i) {
      if (absl::IsDataLoss(entries[i].status())) {
        damaged->push_back(batch[i].token);  // left out: a peer sends its copy
        continue;
      }
      TALLY_RETURN_IF_ERROR(entries[i].status());
      TALLY_ASSIGN_OR_RETURN(const bool more,
                             fn(batch[i].range, *std::move(entries[i])));
      stopped = !more;
    }
    batch.clear();
    return absl::OkStatus();
  };
  for (size_t r = 0; r < ranges.size() && !stopped; ++r) {
    TALLY_RETURN_IF_ERROR(reader_->ForEachRow(
        snapshot, keyspace_->id.value(), ranges[r], FillFor(ranges[r]),
        [&](const StoredRow& row) -> absl::StatusOr<bool> {
          batch.push_back(Copied{r, row.token, std::string(row.key), row.header,
                                 std::string(row.payload)});
          if (batch.size() < kCheckBatch) return true;
          TALLY_RETURN_IF_ERROR(flush());
          return !stopped;
        }));
  }
  if (!stopped && !batch.empty()) return flush();
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace storage
}  // namespace tally
