#include "storage/store.h"

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
#include "storage/internal/store_impl.h"
#include "storage/leveldb_config.h"
#include "storage/store_tree_view.h"
#include "tree/status_macros.h"

namespace tally {
namespace storage {
namespace {

using internal::Corrupt;
using internal::DecodeFixed32;
using internal::DecodeFixed64;
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

absl::Status StoreImpl::ForEachStoredRow(
    const leveldb::Snapshot* snapshot, absl::string_view what,
    const std::function<void(absl::string_view row_key,
                             const RowHeader& header)>& fn) {
  leveldb::ReadOptions read;
  read.snapshot = snapshot;
  read.fill_cache = false;  // one pass over everything: keep the cache
  std::unique_ptr<leveldb::Iterator> it(db_->NewIterator(read));
  for (it->Seek(std::string(1, internal::kRowTag));
       it->Valid() && it->key()[0] == internal::kRowTag; it->Next()) {
    RowHeader header;
    absl::string_view payload;
    const absl::string_view row_key(it->key().data(), it->key().size());
    if (!internal::DecodeRowRecord(
            absl::string_view(it->value().data(), it->value().size()), &header,
            &payload)) {
      // A damaged row that cannot be decoded is counted nowhere.
      if (IsDamaged(row_key)) continue;
      return Corrupt("row", it->key().ToString());
    }
    fn(row_key, header);
  }
  return FromLevelDb(it->status(), what);
}

absl::StatusOr<absl::flat_hash_map<uint32_t, uint64_t>>
StoreImpl::CountOriginRows(const leveldb::Snapshot* snapshot) {
  absl::flat_hash_map<uint32_t, uint64_t> counts;
  TALLY_RETURN_IF_ERROR(
      ForEachStoredRow(snapshot, "counting rows per origin",
                       [&](absl::string_view, const RowHeader& header) {
                         ++counts[header.origin_id];
                       }));
  return counts;
}

absl::StatusOr<absl::flat_hash_map<uint32_t, uint64_t>>
StoreImpl::ReadOriginRows(const leveldb::Snapshot* snapshot) {
  leveldb::ReadOptions read;
  read.snapshot = snapshot;
  std::unique_ptr<leveldb::Iterator> it(db_->NewIterator(read));
  absl::flat_hash_map<uint32_t, uint64_t> counts;
  for (it->Seek(std::string(1, internal::kOriginRowsTag));
       it->Valid() && it->key()[0] == internal::kOriginRowsTag; it->Next()) {
    if (it->key().size() != 5 || it->value().size() != 8) {
      return Corrupt("rows per origin", it->key().ToString());
    }
    counts[DecodeFixed32(it->key().data() + 1)] =
        DecodeFixed64(it->value().data());
  }
  TALLY_RETURN_IF_ERROR(FromLevelDb(it->status(), "reading rows per origin"));
  return counts;
}

HlcTimestamp StoreImpl::PhysicalNow() const {
  return HlcTimestamp::FromParts(clock_.PhysicalMillis(), 0);
}

absl::StatusOr<std::vector<tree::NodeState>> StoreImpl::RecoverLeaves(
    const leveldb::Snapshot* snapshot, uint32_t keyspace_id, int depth,
    Sequence leaves_sequence, std::vector<uint32_t>* replayed_leaves) {
  leveldb::ReadOptions read;
  read.snapshot = snapshot;
  std::unique_ptr<leveldb::Iterator> it(db_->NewIterator(read));
  std::vector<tree::NodeState> leaves(uint64_t{1} << depth);
  const std::string prefix = internal::LeafKey(keyspace_id, 0).substr(0, 5);
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    if (it->key().size() != 9 || it->value().size() != 24) {
      return Corrupt("leaf", it->key().ToString());
    }
    const uint32_t leaf = DecodeFixed32(it->key().data() + 5);
    if (leaf >= leaves.size()) return Corrupt("leaf", it->key().ToString());
    leaves[leaf].digest = Digest128::Load(it->value().data());
    leaves[leaf].count = DecodeFixed64(it->value().data() + 16);
  }
  TALLY_RETURN_IF_ERROR(FromLevelDb(it->status(), "reading leaves"));
  // Changes committed after the checkpoint carry their leaf deltas.
  for (it->Seek(internal::ChangeKey(leaves_sequence + 1));
       it->Valid() && it->key()[0] == internal::kChangeTag; it->Next()) {
    internal::ChangeRecord change;
    if (it->key().size() != 9 ||
        !internal::DecodeChangeRecord(
            absl::string_view(it->value().data(), it->value().size()),
            &change)) {
      return Corrupt("change", it->key().ToString());
    }
    if (change.keyspace_id != keyspace_id) continue;
    const uint64_t index = tree::NodeIndexOf(tree::TokenOf(change.key), depth);
    if (replayed_leaves != nullptr) {
      replayed_leaves->push_back(static_cast<uint32_t>(index));
    }
    tree::NodeState& leaf = leaves[index];
    leaf.digest ^= change.digest_delta;
    leaf.count += change.count_delta;
  }
  TALLY_RETURN_IF_ERROR(FromLevelDb(it->status(), "replaying changes"));
  return leaves;
}

const Keyspace* StoreImpl::FindKeyspace(absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  auto it = keyspaces_.find(name);
  return it == keyspaces_.end() ? nullptr : it->second.get();
}

std::string StoreImpl::OriginName(uint32_t id) const {
  absl::MutexLock lock(&mu_);
  auto it = origin_names_.find(id);
  return it == origin_names_.end() ? std::string() : it->second;
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
  absl::MutexLock lock(&mu_);
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

absl::Status StoreImpl::MarkDamaged(const Keyspace* ks, Token token,
                                    absl::Status found) {
  const uint64_t leaf = tree::NodeIndexOf(token, ks->depth);
  absl::StatusOr<ScrubReport> scrub = ScrubLeaves(ks->name, leaf, 1);
  if (!scrub.ok() && found.ok()) return scrub.status();
  return found;
}

}  // namespace internal

}  // namespace storage
}  // namespace tally
