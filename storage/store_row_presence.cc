// StoreImpl's row filters (internal/row_presence.h): the background build,
// at open, of the filters of the keyspaces the store already holds.
#include <leveldb/db.h>

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "storage/internal/prefix_scan.h"
#include "storage/internal/records.h"
#include "storage/internal/store_impl.h"

namespace tally {
namespace storage {
namespace internal {

void StoreImpl::StartRowPresenceBuild() {
  if (!options_.row_filter) return;
  // The keyspaces Load() registered with AddExisting.
  std::vector<KeyspaceId> keyspaces = row_presence_.Unbuilt();
  if (keyspaces.empty()) return;
  row_presence_builder_ =
      std::thread([this, keyspaces = std::move(keyspaces)]() mutable {
        BuildRowPresence(std::move(keyspaces));
      });
}

RowFilterStats StoreImpl::row_filter_stats() const {
  const RowPresence::Stats presence = row_presence_.stats();
  RowFilterStats stats;
  stats.rows_read = rows_read_.load(std::memory_order_relaxed);
  stats.reads_skipped = reads_skipped_.load(std::memory_order_relaxed);
  stats.keyspaces = presence.keyspaces;
  stats.built = presence.built;
  stats.memory_bytes = presence.memory_bytes;
  return stats;
}

void StoreImpl::StopRowPresenceBuild() {
  stop_row_presence_build_.store(true);
  if (row_presence_builder_.joinable()) row_presence_builder_.join();
}

void StoreImpl::BuildRowPresence(std::vector<KeyspaceId> keyspaces) {
  // The snapshot is taken after Load() registered the keyspaces, so every
  // row is in it or was written (its token added) after that.
  const leveldb::Snapshot* snapshot = db_->GetSnapshot();
  leveldb::ReadOptions read;
  read.snapshot = snapshot;
  // A build reads every row once: it must not push the rows being written
  // and read now out of the block cache.
  read.fill_cache = false;
  std::vector<tree::Token> tokens;
  tokens.reserve(4096);
  for (KeyspaceId keyspace : keyspaces) {
    const std::string prefix = RowKeyPrefix(keyspace.value());
    tokens.clear();
    const absl::Status status = ScanPrefix(
        *db_, read, prefix, prefix, "building a row filter",
        [&](absl::string_view key, absl::string_view) -> absl::StatusOr<bool> {
          ParsedRowKey row;
          // A key that does not parse is Verify's to report; the filter
          // cannot say the row is absent, so it is never built.
          if (!ParseRowKey(key, &row)) return Corrupt("row key", key);
          tokens.push_back(row.token);
          if (tokens.size() == tokens.capacity()) {
            row_presence_.Add(keyspace, tokens);
            tokens.clear();
            if (stop_row_presence_build_.load()) return false;
          }
          return true;
        });
    if (!status.ok() || stop_row_presence_build_.load()) {
      // Unbuilt, the filter answers "may exist": every write reads.
      break;
    }
    row_presence_.Add(keyspace, tokens);
    row_presence_.MarkBuilt(keyspace);
  }
  db_->ReleaseSnapshot(snapshot);
}

}  // namespace internal
}  // namespace storage
}  // namespace tally
