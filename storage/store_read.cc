// StoreImpl's reads: rows, tree views, keyspace and origin tables,
// leaves and upstream progress (storage/store.h).
#include <leveldb/db.h>
#include <leveldb/write_batch.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "storage/internal/coding.h"
#include "storage/internal/leveldb_status.h"
#include "storage/internal/records.h"
#include "storage/internal/slice.h"
#include "storage/internal/store_impl.h"
#include "storage/leveldb_config.h"
#include "storage/store.h"
#include "storage/store_tree_view.h"
#include "tree/status_macros.h"

namespace tally {
namespace storage {
namespace {

using internal::Corrupt;
using internal::FromLevelDb;
using internal::RowHeader;
using tree::Token;

}  // namespace

namespace internal {
namespace {

// A row as Store answers it: the entry of its header and key, and its
// value, checked against the entry's digest by the caller.
Row RowOf(tree::RowEntry entry, std::string value) {
  Row row;
  row.key = std::move(entry.key);
  row.value = std::move(value);
  row.version = std::move(entry.version);
  row.deleted = entry.deleted;
  row.digest = entry.digest;
  return row;
}

}  // namespace

// ----------------------------------------------------------------- reads

absl::StatusOr<Row> StoreImpl::Get(absl::string_view keyspace,
                                   absl::string_view key) {
  const absl::string_view keys[] = {key};
  TALLY_ASSIGN_OR_RETURN(std::vector<absl::StatusOr<Row>> rows,
                         MultiGet(keyspace, keys));
  return std::move(rows.front());
}

namespace {

// One distinct key of a MultiGet, as its row is read and checked.
struct Lookup {
  absl::string_view key;
  Token token = 0;
  std::string row_key;
  std::string record;
  RowHeader header;
  absl::string_view payload;  // into `record`
  // The block holding the row failed its checksum (the row itself may be
  // sound: its digest decides).
  bool block_damaged = false;
  // Marked damaged before this read (not read again).
  bool marked_before = false;
  // How many of the keys asked for name this one.
  size_t asked = 0;
  // Why there is no row (kNotFound, kDataLoss, ...), until the row is made.
  absl::Status status;
  absl::StatusOr<Row> row;
};

}  // namespace

// The rows are read with point lookups at one snapshot, in row-key order,
// rather than by seeking one iterator: a lookup consults each table's bloom
// filter and skips the tables that cannot hold the key, which an iterator's
// seek cannot (it positions itself in every table), and in key order the
// lookups of neighbouring keys find their index and data blocks in the
// block cache, just read.
absl::StatusOr<std::vector<absl::StatusOr<Row>>> StoreImpl::MultiGet(
    absl::string_view keyspace, absl::Span<const absl::string_view> keys) {
  TALLY_RETURN_IF_ERROR(ValidateKeyspaceName(keyspace));
  for (absl::string_view key : keys) {
    if (key.empty() || key.size() > options_.max_key_bytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "key is %d bytes; keys are 1..%d bytes (max_key_bytes)", key.size(),
          options_.max_key_bytes));
    }
  }
  const Keyspace* ks = FindKeyspace(keyspace);
  if (ks == nullptr) {
    return KeyspaceNotFound(keyspace);
  }

  // The distinct keys in row-key order; slot[i] is the lookup of keys[i].
  std::vector<std::pair<Token, size_t>> order;
  order.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    order.emplace_back(tree::TokenOf(keys[i]), i);
  }
  std::sort(order.begin(), order.end(),
            [&](const std::pair<Token, size_t>& a,
                const std::pair<Token, size_t>& b) {
              if (a.first != b.first) return a.first < b.first;
              return keys[a.second] < keys[b.second];
            });
  std::vector<Lookup> lookups;
  lookups.reserve(order.size());
  std::vector<size_t> slot(keys.size());
  for (const auto& [token, i] : order) {
    if (lookups.empty() || lookups.back().token != token ||
        lookups.back().key != keys[i]) {
      Lookup& l = lookups.emplace_back();
      l.key = keys[i];
      l.token = token;
      l.row_key = internal::RowKey(ks->id.value(), token, keys[i]);
    }
    slot[i] = lookups.size() - 1;
    ++lookups.back().asked;
  }

  // The records, from one snapshot.
  const leveldb::Snapshot* snapshot = db_->GetSnapshot();
  leveldb::ReadOptions checked;
  checked.snapshot = snapshot;
  checked.verify_checksums = true;
  leveldb::ReadOptions unchecked;
  unchecked.snapshot = snapshot;
  for (Lookup& l : lookups) {
    if (IsDamaged(l.row_key)) {
      l.marked_before = true;
      l.status = absl::DataLossError(absl::StrFormat(
          "row '%s' of keyspace '%s' is damaged on this node (its stored "
          "bytes do not match its digest); it is not served, and "
          "anti-entropy replaces it with a peer's copy",
          absl::CHexEscape(l.key), keyspace));
      continue;
    }
    leveldb::Status s = db_->Get(checked, l.row_key, &l.record);
    if (s.IsCorruption()) {
      // The block holding the row fails its checksum. The damage may be in
      // another row of the block: read it unchecked and let the row's own
      // digest decide, then recompute the leaf to find the damaged rows.
      l.block_damaged = true;
      s = db_->Get(unchecked, l.row_key, &l.record);
    }
    if (s.IsNotFound()) {
      l.status = absl::NotFoundError(
          absl::StrFormat("key '%s' is not in keyspace '%s'",
                          absl::CHexEscape(l.key), keyspace));
      continue;
    }
    l.status = NoteTableDamage(FromLevelDb(s, "reading a row"));
    if (l.status.ok() &&
        !internal::DecodeRowRecord(l.record, &l.header, &l.payload)) {
      l.status = Corrupt("row", l.row_key);
    }
  }
  db_->ReleaseSnapshot(snapshot);

  // The values of the rows found, from the backend in one batch.
  std::vector<Lookup*> found;
  std::vector<RowLocation> locations;
  std::vector<absl::string_view> payloads;
  for (Lookup& l : lookups) {
    if (!l.status.ok()) continue;
    found.push_back(&l);
    locations.push_back(RowLocation{keyspace, l.token, l.key});
    payloads.push_back(l.payload);
  }
  if (!found.empty()) {
    TALLY_ASSIGN_OR_RETURN(std::vector<absl::StatusOr<std::string>> values,
                           backend_->ReadValues(locations, payloads));
    if (values.size() != found.size()) {
      return absl::InternalError(
          absl::StrFormat("backend '%s' answered %d values for %d rows",
                          backend_->name(), values.size(), found.size()));
    }
    for (size_t j = 0; j < found.size(); ++j) {
      Lookup& l = *found[j];
      absl::Status checked_value = values[j].status();
      if (checked_value.ok()) {
        checked_value =
            CheckValue(keyspace, l.token, l.key, l.header, *values[j]);
      }
      if (!checked_value.ok()) {
        l.status = checked_value;
        continue;
      }
      absl::StatusOr<tree::RowEntry> entry = ToEntry(l.token, l.key, l.header);
      if (!entry.ok()) {
        l.status = entry.status();
        continue;
      }
      l.row = RowOf(*std::move(entry), *std::move(values[j]));
    }
  }

  // Damage found here is marked: the leaf of each damaged row (or of each
  // row in a block that failed its checksum) is recomputed, once per leaf.
  // Rows marked before this call were not read and need nothing.
  absl::flat_hash_set<uint64_t> scrubbed;
  for (Lookup& l : lookups) {
    if (!l.status.ok()) l.row = l.status;
    const bool damaged = absl::IsDataLoss(l.status) && !l.marked_before;
    if (!damaged && !(l.block_damaged && l.status.ok())) continue;
    if (!scrubbed.insert(tree::NodeIndexOf(l.token, ks->depth)).second) {
      continue;
    }
    (void)MarkDamaged(*ks, l.token);
  }

  std::vector<absl::StatusOr<Row>> rows;
  rows.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    Lookup& l = lookups[slot[i]];
    // The last key naming a lookup takes its row; the ones before copy it.
    rows.push_back(--l.asked == 0 ? std::move(l.row) : l.row);
  }
  return rows;
}

absl::StatusOr<std::unique_ptr<tree::TreeView>> StoreImpl::NewTreeView(
    absl::string_view keyspace) {
  const Keyspace* ks = FindKeyspace(keyspace);
  if (ks == nullptr) {
    return KeyspaceNotFound(keyspace);
  }
  return std::unique_ptr<tree::TreeView>(new StoreTreeView(this, ks));
}

absl::StatusOr<KeyspaceInfo> StoreImpl::GetKeyspace(
    absl::string_view name) const {
  return catalogue_.GetKeyspace(name);
}

std::vector<KeyspaceInfo> StoreImpl::ListKeyspaces() const {
  return catalogue_.ListKeyspaces();
}

std::vector<OriginRowCount> StoreImpl::OriginRowCounts() const {
  return catalogue_.OriginRowCounts();
}

absl::StatusOr<std::vector<uint64_t>> StoreImpl::LeafCounts(
    absl::string_view keyspace) const {
  const Keyspace* ks = FindKeyspace(keyspace);
  if (ks == nullptr) {
    return KeyspaceNotFound(keyspace);
  }
  return catalogue_.ReadTree(*ks, [](const tree::MerkleTree& t) {
    std::vector<uint64_t> counts(t.leaf_count());
    for (uint64_t i = 0; i < counts.size(); ++i) counts[i] = t.leaf(i).count;
    return counts;
  });
}

absl::StatusOr<tree::MerkleTree> StoreImpl::CopyTree(
    absl::string_view keyspace) const {
  const Keyspace* ks = FindKeyspace(keyspace);
  if (ks == nullptr) {
    return KeyspaceNotFound(keyspace);
  }
  return catalogue_.ReadTree(
      *ks, [](const tree::MerkleTree& t) { return t.Copy(); });
}

absl::StatusOr<UpstreamProgress> StoreImpl::GetProgress(
    absl::string_view upstream) {
  TALLY_RETURN_IF_ERROR(ValidateNodeName(upstream));
  const std::string key = internal::ProgressKey(upstream);
  std::string value;
  const leveldb::Status s = db_->Get(leveldb::ReadOptions(), key, &value);
  if (s.IsNotFound()) {
    return absl::NotFoundError(
        absl::StrFormat("no progress stored for upstream '%s'", upstream));
  }
  TALLY_RETURN_IF_ERROR(FromLevelDb(s, "reading progress"));
  internal::ProgressRecord progress;
  if (!internal::DecodeProgress(value, &progress)) {
    return Corrupt("progress", key);
  }
  return UpstreamProgress{std::string(upstream), progress.epoch,
                          progress.sequence};
}

}  // namespace internal
}  // namespace storage
}  // namespace tally
