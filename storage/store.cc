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
    uint32_t origin_id;
    uint64_t rows;
    if (!internal::ParseOriginRowsKey(ToStringView(it->key()), &origin_id) ||
        !internal::ParseFixed64Value(ToStringView(it->value()), &rows)) {
      return Corrupt("rows per origin", it->key().ToString());
    }
    counts[origin_id] = rows;
  }
  TALLY_RETURN_IF_ERROR(FromLevelDb(it->status(), "reading rows per origin"));
  return counts;
}

HlcTimestamp StoreImpl::PhysicalNow() const {
  return HlcTimestamp::FromParts(clock_.PhysicalMillis(), 0);
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
  const std::string origin = OriginName(header.origin_id);
  if (origin.empty()) {
    return absl::DataLossError(absl::StrFormat(
        "row '%s' of keyspace '%s' names origin id %d, which the origin "
        "table lacks",
        absl::CHexEscape(key), keyspace, header.origin_id));
  }
  TALLY_ASSIGN_OR_RETURN(
      std::string value,
      backend_->ReadValue(RowLocation{keyspace, token, key}, payload));
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
  return value;
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
