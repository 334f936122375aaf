// StoreImpl's keyspace drop (Store::DropKeyspace, UndropKeyspace).
//
// A drop erases the keyspace's rows through the ordinary commit path, in
// batches, so that its leaves, the per-origin counts and the damage marks
// change as they do for any erase (and the change log's entries are erases,
// which a feed never sends), while writers are refused the keyspace. Then
// one batch, under the commit token, removes the keyspace's record and
// writes its drop record, after a leaf checkpoint has removed the emptied
// leaves' records. The catalogue keeps the keyspace's entry (retired), so
// that views still holding it read an empty tree.
#include <leveldb/db.h>
#include <leveldb/write_batch.h>

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "storage/internal/prefix_scan.h"
#include "storage/internal/records.h"
#include "storage/internal/store_impl.h"
#include "storage/names.h"
#include "storage/store.h"
#include "tree/status_macros.h"

namespace tally {
namespace storage {
namespace internal {

absl::StatusOr<uint64_t> StoreImpl::DropKeyspace(absl::string_view name) {
  TALLY_RETURN_IF_ERROR(ValidateKeyspaceName(name));
  const Keyspace* ks = FindKeyspace(name);
  if (ks == nullptr) {
    if (catalogue_.IsDropped(name)) {
      return absl::AlreadyExistsError(absl::StrFormat(
          "keyspace '%s' was already dropped on node %s", name, node_name_));
    }
    return KeyspaceNotFound(name);
  }
  {
    absl::MutexLock commit_lock(&commit_mu_);
    // Dropped by another caller since it was found (drops record
    // themselves under the commit token).
    if (FindKeyspace(name) != ks) {
      return absl::AlreadyExistsError(absl::StrFormat(
          "keyspace '%s' was already dropped on node %s", name, node_name_));
    }
    if (!dropping_.insert(std::string(name)).second) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "a drop of keyspace '%s' is already under way", name));
    }
  }
  uint64_t erased = 0;
  absl::Status status = EraseKeyspaceRows(*ks, &erased);
  absl::MutexLock commit_lock(&commit_mu_);
  if (status.ok()) status = RecordDrop(*ks);
  dropping_.erase(std::string(name));
  if (!status.ok()) {
    return absl::Status(
        status.code(),
        absl::StrFormat("dropping keyspace '%s' stopped after erasing %d "
                        "rows (it is still there; run the drop again): %s",
                        name, erased, status.message()));
  }
  return erased;
}

absl::Status StoreImpl::EraseKeyspaceRows(const Keyspace& ks,
                                          uint64_t* erased) {
  const std::string prefix = RowKeyPrefix(ks.id.value());
  std::string start = prefix;
  for (;;) {
    WriteRequest request;
    // Every row goes, whatever its version: a source override's erase.
    request.mode = ApplyMode::kSourceOverride;
    size_t bytes = 0;
    std::string last;
    TALLY_RETURN_IF_ERROR(ScanPrefix(
        *db_, leveldb::ReadOptions(), prefix, start, "reading rows to drop",
        [&](absl::string_view row_key,
            absl::string_view record) -> absl::StatusOr<bool> {
          if (request.mutations.size() >= options_.max_batch_mutations) {
            return false;
          }
          ParsedRowKey row;
          RowHeader header;
          absl::string_view payload;
          if (!ParseRowKey(row_key, &row) ||
              !DecodeRowRecord(record, &header, &payload)) {
            return Corrupt("row", row_key);
          }
          std::string origin = OriginName(header.origin_id);
          if (origin.empty()) origin = node_name_;
          Mutation m;
          m.keyspace = ks.name;
          m.key = std::string(row.key);
          m.erase = true;
          m.version = tree::Version{header.timestamp, std::move(origin)};
          bytes += m.keyspace.size() + m.key.size();
          request.mutations.push_back(std::move(m));
          last = std::string(row_key);
          return true;
        }));
    if (request.mutations.empty()) return absl::OkStatus();
    PendingWrite writer(request.mutations.size(), bytes);
    writer.request = &request;
    writer.drop_erase = true;
    TALLY_ASSIGN_OR_RETURN(WriteResult result, Enqueue(&writer));
    for (bool applied : result.applied) *erased += applied ? 1 : 0;
    // The next batch starts after the last row read: one that could not be
    // erased is not read again.
    start = last + '\0';
  }
}

absl::Status StoreImpl::RecordDrop(const Keyspace& ks) {
  commit_mu_.AssertHeld();
  TALLY_RETURN_IF_ERROR(write_status());
  // The erases emptied the keyspace's leaves and marked them dirty: the
  // checkpoint removes their records (an empty leaf has none).
  TALLY_RETURN_IF_ERROR(CheckpointLeaves());
  leveldb::WriteBatch batch;
  TALLY_RETURN_IF_ERROR(
      ScanPrefix(*db_, leveldb::ReadOptions(), LeafKeyPrefix(ks.id.value()),
                 "reading the leaves of a keyspace to drop",
                 [&](absl::string_view key, absl::string_view) -> absl::Status {
                   batch.Delete(leveldb::Slice(key.data(), key.size()));
                   return absl::OkStatus();
                 }));
  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  batch.Delete(KeyspaceKey(ks.name));
  batch.Put(RetiredKeyspaceIdKey(ks.id.value()), ks.name);
  batch.Put(DroppedKeyspaceKey(ks.name),
            EncodeDroppedKeyspaceRecord(DroppedKeyspaceRecord{
                ks.id.value(), static_cast<uint64_t>(now_ms)}));
  TALLY_RETURN_IF_ERROR(
      WriteToLevelDb(&batch, /*sync=*/true, "recording a keyspace's drop"));
  catalogue_.Drop(ks.name, now_ms);
  return absl::OkStatus();
}

absl::Status StoreImpl::UndropKeyspace(absl::string_view name) {
  TALLY_RETURN_IF_ERROR(ValidateKeyspaceName(name));
  absl::MutexLock commit_lock(&commit_mu_);
  if (!catalogue_.IsDropped(name)) {
    return absl::NotFoundError(absl::StrFormat(
        "keyspace '%s' was not dropped on node %s", name, node_name_));
  }
  TALLY_RETURN_IF_ERROR(write_status());
  leveldb::WriteBatch batch;
  batch.Delete(DroppedKeyspaceKey(name));
  TALLY_RETURN_IF_ERROR(
      WriteToLevelDb(&batch, /*sync=*/true, "undoing a keyspace's drop"));
  catalogue_.Undrop(name);
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace storage
}  // namespace tally
