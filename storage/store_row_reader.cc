// StoreImpl as a SnapshotRowReader (internal/snapshot_row_reader.h): row
// records at a snapshot, checked against their digests and made tree
// entries; damage marking; the in-memory trees. The reads (Get) and the
// tree views (store_tree_view.cc) both go through here.
#include <leveldb/db.h>
#include <leveldb/env.h>

#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "storage/internal/leveldb_status.h"
#include "storage/internal/prefix_scan.h"
#include "storage/internal/records.h"
#include "storage/internal/snapshot_row_reader.h"
#include "storage/internal/store_impl.h"
#include "storage/row_backend.h"
#include "tree/status_macros.h"

namespace tally {
namespace storage {
namespace internal {

using tree::Token;
using tree::Version;

const leveldb::Snapshot* StoreImpl::GetSnapshot() { return db_->GetSnapshot(); }

void StoreImpl::ReleaseSnapshot(const leveldb::Snapshot* snapshot) {
  db_->ReleaseSnapshot(snapshot);
}

absl::Status StoreImpl::ForEachRow(const leveldb::Snapshot* snapshot,
                                   uint32_t keyspace_id,
                                   const tree::NodeRef& range, CacheFill fill,
                                   RowVisitor visit) {
  return ScanRows(snapshot, keyspace_id, range, fill, DamagedRows::kSkip,
                  visit);
}

absl::Status StoreImpl::ScanRows(const leveldb::Snapshot* snapshot,
                                 uint32_t keyspace_id,
                                 const tree::NodeRef& range, CacheFill fill,
                                 DamagedRows damaged, RowVisitor visit) {
  leveldb::ReadOptions read;
  read.snapshot = snapshot;
  read.fill_cache = fill == CacheFill::kYes;
  const Token last = range.last_token();
  // The visitor's own errors are not the tables'.
  bool visitor_failed = false;
  const absl::Status scanned = ScanPrefix(
      *db_, read, RowKeyPrefix(keyspace_id),
      RowKey(keyspace_id, range.first_token(), ""), "scanning rows",
      [&](absl::string_view k, absl::string_view v) -> absl::StatusOr<bool> {
        ParsedRowKey key;
        if (!ParseRowKey(k, &key)) return Corrupt("row key", k);
        if (key.token > last) return false;
        // Damaged rows are out of the tree until replaced: out of every
        // answer but the index's own.
        const bool is_damaged = damaged_count_.load() > 0 && IsDamaged(k);
        if (is_damaged && damaged == DamagedRows::kSkip) return true;
        StoredRow row;
        row.damaged = is_damaged;
        row.token = key.token;
        row.key = key.key;
        if (!DecodeRowRecord(v, &row.header, &row.payload)) {
          return Corrupt("row", k);
        }
        absl::StatusOr<bool> visited = visit(row);
        visitor_failed = !visited.ok();
        return visited;
      });
  return visitor_failed ? scanned : NoteTableDamage(scanned);
}

absl::StatusOr<std::vector<absl::StatusOr<tree::RowEntry>>>
StoreImpl::CheckedEntries(const Keyspace& keyspace,
                          absl::Span<const StoredRow> rows,
                          Values with_values) const {
  std::vector<absl::StatusOr<tree::RowEntry>> entries;
  if (rows.empty()) return entries;
  std::vector<RowLocation> locations;
  std::vector<absl::string_view> payloads;
  locations.reserve(rows.size());
  payloads.reserve(rows.size());
  for (const StoredRow& row : rows) {
    locations.push_back(RowLocation{keyspace.name, row.token, row.key});
    payloads.push_back(row.payload);
  }
  TALLY_ASSIGN_OR_RETURN(std::vector<absl::StatusOr<std::string>> values,
                         backend_->ReadValues(locations, payloads));
  if (values.size() != rows.size()) {
    return absl::InternalError(
        absl::StrFormat("backend '%s' answered %d values for %d rows",
                        backend_->name(), values.size(), rows.size()));
  }
  entries.reserve(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const StoredRow& row = rows[i];
    if (absl::IsAborted(values[i].status()) ||
        absl::IsUnavailable(values[i].status())) {
      // The backend's row is not the version the index describes now (an
      // application changed it; its capture indexes the change): listed as
      // the index and the tree describe it, without a value, so that a diff
      // under writes goes on; a repair that needs the value fetches it, and
      // skips it then if it still differs (storage/store.h, MultiGet).
      entries.push_back(ToEntry(row.token, row.key, row.header));
      continue;
    }
    absl::Status checked = values[i].status();
    if (checked.ok()) {
      checked =
          CheckValue(keyspace.name, row.token, row.key, row.header, *values[i]);
    }
    if (!checked.ok()) {
      entries.push_back(checked);
      continue;
    }
    entries.push_back(ToEntry(row.token, row.key, row.header));
    if (with_values == Values::kYes && entries.back().ok()) {
      entries.back()->value = *std::move(values[i]);
    }
  }
  return entries;
}

void StoreImpl::ReadTree(
    const Keyspace& keyspace,
    absl::FunctionRef<void(const tree::MerkleTree&)> read) const {
  catalogue_.ReadTree(keyspace,
                      [&](const tree::MerkleTree& tree) { read(tree); });
}

absl::StatusOr<tree::RowEntry> StoreImpl::ToEntry(
    Token token, absl::string_view key, const RowHeader& header) const {
  tree::RowEntry entry;
  entry.token = token;
  entry.key = std::string(key);
  entry.version.timestamp = header.timestamp;
  entry.version.origin = OriginName(header.origin_id);
  if (entry.version.origin.empty()) {
    return absl::DataLossError(absl::StrFormat(
        "row '%s' names origin id %d, which the origin table lacks",
        absl::CHexEscape(key), header.origin_id));
  }
  entry.deleted = header.deleted;
  entry.digest = header.digest;
  return entry;
}

bool StoreImpl::IsDamaged(absl::string_view row_key) const {
  if (damaged_count_.load() == 0) return false;
  absl::MutexLock lock(&damaged_mu_);
  return damaged_.contains(row_key);
}

absl::StatusOr<std::string> StoreImpl::CheckedValue(
    absl::string_view keyspace, Token token, absl::string_view key,
    const RowHeader& header, absl::string_view payload) const {
  TALLY_ASSIGN_OR_RETURN(
      std::string value,
      backend_->ReadValue(RowLocation{keyspace, token, key}, payload));
  TALLY_RETURN_IF_ERROR(CheckValue(keyspace, token, key, header, value));
  return value;
}

absl::Status StoreImpl::CheckValue(absl::string_view keyspace, Token token,
                                   absl::string_view key,
                                   const RowHeader& header,
                                   absl::string_view value) const {
  const std::string origin = OriginName(header.origin_id);
  if (origin.empty()) {
    return absl::DataLossError(absl::StrFormat(
        "row '%s' of keyspace '%s' names origin id %d, which the origin "
        "table lacks",
        absl::CHexEscape(key), keyspace, header.origin_id));
  }
  // The digest covers keyspace, key, version, flag and value: a flipped
  // byte anywhere in the record shows here, whatever LevelDB's checksums
  // were told to verify.
  if (token != tree::TokenOf(key) ||
      tree::RowDigest(keyspace, key, Version{header.timestamp, origin},
                      header.deleted, value) != header.digest) {
    return absl::DataLossError(absl::StrFormat(
        "row '%s' of keyspace '%s' is damaged on this node (its stored bytes "
        "do not match its digest); it is not served, and anti-entropy "
        "replaces it with a peer's copy",
        absl::CHexEscape(key), keyspace));
  }
  return absl::OkStatus();
}

absl::Status StoreImpl::NoteTableDamage(absl::Status status) {
  if (!absl::IsDataLoss(status) || table_damage_noted_.exchange(true)) {
    return status;
  }
  // Beside the tables, for the next open to find: the store cannot mend a
  // block LevelDB cannot decode while it runs (LevelDB reads, but never
  // rewrites, a table), and every compaction that reads the block fails.
  leveldb::Env* env = config_->options.env;
  const leveldb::Status written = leveldb::WriteStringToFile(
      env,
      absl::StrCat("a table block could not be decoded: ", status.message(),
                   "\n"),
      absl::StrCat(dir_, "/", kTablesDamagedFile));
  if (options_.on_table_damage) {
    options_.on_table_damage(
        written.ok()
            ? status
            : absl::DataLossError(absl::StrCat(
                  status.message(), " (and writing ", kTablesDamagedFile,
                  " failed: ", written.ToString(), ")")));
  }
  return status;
}

absl::Status StoreImpl::MarkDamaged(const Keyspace& ks, Token token) {
  const uint64_t leaf = tree::NodeIndexOf(token, ks.depth);
  return ScrubLeaves(ks.name, leaf, 1).status();
}

}  // namespace internal
}  // namespace storage
}  // namespace tally
