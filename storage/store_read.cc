// StoreImpl's reads: rows, tree views, keyspace and origin tables,
// leaves and upstream progress (storage/store.h).
#include <leveldb/db.h>
#include <leveldb/env.h>
#include <leveldb/write_batch.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "storage/internal/coding.h"
#include "storage/internal/leveldb_status.h"
#include "storage/internal/records.h"
#include "storage/internal/repair.h"
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
using internal::DirectoryState;
using internal::Fixed32String;
using internal::Fixed64String;
using internal::FromLevelDb;
using internal::InspectDirectory;
using internal::kLocalOriginId;
using internal::RecoveryAdvice;
using internal::RowHeader;
using tree::Digest128;
using tree::HlcTimestamp;
using tree::NodeRef;
using tree::Token;
using tree::Version;

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
  TALLY_RETURN_IF_ERROR(ValidateKeyspaceName(keyspace));
  if (key.empty() || key.size() > options_.max_key_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("key is %d bytes; keys are 1..%d bytes (max_key_bytes)",
                        key.size(), options_.max_key_bytes));
  }
  const Keyspace* ks = FindKeyspace(keyspace);
  if (ks == nullptr) {
    return KeyspaceNotFound(keyspace);
  }
  const Token token = tree::TokenOf(key);
  const std::string row_key = internal::RowKey(ks->id.value(), token, key);
  if (IsDamaged(row_key)) {
    return absl::DataLossError(absl::StrFormat(
        "row '%s' of keyspace '%s' is damaged on this node (its stored bytes "
        "do not match its digest); it is not served, and anti-entropy "
        "replaces it with a peer's copy",
        absl::CHexEscape(key), keyspace));
  }
  std::string record;
  leveldb::ReadOptions read;
  read.verify_checksums = true;
  leveldb::Status s = db_->Get(read, row_key, &record);
  bool block_damaged = false;
  if (s.IsCorruption()) {
    // The block holding the row fails its checksum. The damage may be in
    // another row of the block: read it unchecked and let the row's own
    // digest decide, then recompute the leaf to find the damaged rows.
    block_damaged = true;
    s = db_->Get(leveldb::ReadOptions(), row_key, &record);
  }
  if (s.IsNotFound()) {
    return absl::NotFoundError(absl::StrFormat(
        "key '%s' is not in keyspace '%s'", absl::CHexEscape(key), keyspace));
  }
  absl::Status found = FromLevelDb(s, "reading a row");
  RowHeader header;
  absl::string_view payload;
  absl::StatusOr<std::string> value;
  if (found.ok() && !internal::DecodeRowRecord(record, &header, &payload)) {
    found = Corrupt("row", row_key);
  }
  if (found.ok()) {
    value = CheckedValue(keyspace, token, key, header, payload);
    found = value.status();
  }
  if (!found.ok()) {
    if (!absl::IsDataLoss(found)) return found;
    // The read's error is the answer, whatever the marking found.
    (void)MarkDamaged(*ks, token);
    return found;
  }
  if (block_damaged) (void)MarkDamaged(*ks, token);
  TALLY_ASSIGN_OR_RETURN(tree::RowEntry entry, ToEntry(token, key, header));
  return RowOf(std::move(entry), *std::move(value));
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
