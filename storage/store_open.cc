// Opening a store: Store::Open (the directory checks and LevelDB's opens),
// StoreImpl::Load (identity, metadata, keyspaces, origins, leaves) and the
// migrations of older stores (the tombstone index).
#include <leveldb/db.h>
#include <leveldb/write_batch.h>

#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "storage/internal/coding.h"
#include "storage/internal/leveldb_status.h"
#include "storage/internal/records.h"
#include "storage/internal/repair.h"
#include "storage/internal/slice.h"
#include "storage/internal/store_impl.h"
#include "storage/leveldb_config.h"
#include "storage/store.h"
#include "tree/status_macros.h"

namespace tally {
namespace storage {
namespace internal {

using tree::HlcTimestamp;
using tree::Token;

absl::Status StoreImpl::Load() {
  std::string value;
  leveldb::ReadOptions read;
  const leveldb::Status format_status =
      db_->Get(read, internal::MetaKey(internal::kMetaFormat), &value);
  if (format_status.IsNotFound()) {
    // A new store: write its identity in one batch.
    TALLY_RETURN_IF_ERROR(ValidateNodeName(options_.node_name));
    std::random_device random;
    do {
      epoch_ = (uint64_t{random()} << 32) | random();
    } while (epoch_ == 0);
    node_name_ = options_.node_name;
    leveldb::WriteBatch batch;
    batch.Put(internal::MetaKey(internal::kMetaFormat),
              Fixed32String(internal::kFormatVersion));
    batch.Put(internal::MetaKey(internal::kMetaNodeName), node_name_);
    batch.Put(internal::MetaKey(internal::kMetaEpoch), Fixed64String(epoch_));
    batch.Put(internal::OriginByIdKey(kLocalOriginId), node_name_);
    batch.Put(internal::OriginByNameKey(node_name_),
              Fixed32String(kLocalOriginId));
    batch.Put(internal::MetaKey(internal::kMetaNextOriginId),
              Fixed32String(kLocalOriginId + 1));
    batch.Put(internal::MetaKey(internal::kMetaOriginRows), Fixed32String(1));
    batch.Put(internal::MetaKey(internal::kMetaTombstoneIndex), "");
    batch.Put(internal::MetaKey(internal::kMetaTombstoneArrival), "");
    leveldb::WriteOptions write;
    write.sync = true;
    TALLY_RETURN_IF_ERROR(
        FromLevelDb(db_->Write(write, &batch), "writing a new store"));
  } else {
    TALLY_RETURN_IF_ERROR(FromLevelDb(format_status, "reading the format"));
    uint32_t format;
    if (!internal::ParseFixed32Value(value, &format)) {
      return Corrupt("format", internal::kMetaFormat);
    }
    if (format != internal::kFormatVersion) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "the store has format version %d; this build reads version %d "
          "only",
          format, internal::kFormatVersion));
    }
  }

  // A store written before the per-origin counts were kept is counted
  // once, from its rows, and marked.
  value.clear();
  const leveldb::Status counted =
      db_->Get(read, internal::MetaKey(internal::kMetaOriginRows), &value);
  if (counted.IsNotFound()) {
    TALLY_ASSIGN_OR_RETURN(auto counts, CountOriginRows(nullptr));
    leveldb::WriteBatch batch;
    for (const auto& [id, rows] : counts) {
      batch.Put(internal::OriginRowsKey(id), Fixed64String(rows));
    }
    batch.Put(internal::MetaKey(internal::kMetaOriginRows), Fixed32String(1));
    leveldb::WriteOptions write;
    write.sync = true;
    TALLY_RETURN_IF_ERROR(
        FromLevelDb(db_->Write(write, &batch), "writing the rows per origin"));
  } else {
    TALLY_RETURN_IF_ERROR(FromLevelDb(counted, "reading the metadata"));
  }
  TALLY_ASSIGN_OR_RETURN(auto origin_rows, ReadOriginRows(nullptr));

  // Every metadata record, origin and keyspace, then the leaves.
  std::unique_ptr<leveldb::Iterator> it(db_->NewIterator(read));
  {
    absl::flat_hash_map<OriginId, uint64_t> rows;
    for (const auto& [id, count] : origin_rows) rows[OriginId(id)] = count;
    catalogue_.RecoverOriginRows(std::move(rows));
  }
  bool tombstones_indexed = false;
  bool tombstones_by_arrival = false;
  Sequence last_sequence = 0;
  Sequence trimmed_through = 0;
  Sequence leaves_sequence = 0;
  uint32_t next_keyspace_id = 1;
  uint32_t next_origin_id = kLocalOriginId + 1;
  for (it->Seek(std::string(1, internal::kMetaTag));
       it->Valid() && it->key()[0] == internal::kMetaTag; it->Next()) {
    absl::string_view name;
    internal::ParseMetaKey(ToStringView(it->key()), &name);  // the tag: sought
    const absl::string_view v = ToStringView(it->value());
    if (name == internal::kMetaNodeName) {
      node_name_ = std::string(v);
    } else if (name == internal::kMetaEpoch) {
      if (!ParseFixed64Value(v, &epoch_)) return Corrupt("epoch", name);
    } else if (name == internal::kMetaLastSequence) {
      if (!ParseFixed64Value(v, &last_sequence))
        return Corrupt("last sequence", name);
    } else if (name == internal::kMetaNextKeyspaceId) {
      if (!ParseFixed32Value(v, &next_keyspace_id))
        return Corrupt("keyspace counter", name);
    } else if (name == internal::kMetaLeavesSequence) {
      if (!ParseFixed64Value(v, &leaves_sequence))
        return Corrupt("leaves sequence", name);
    } else if (name == internal::kMetaNextOriginId) {
      if (!ParseFixed32Value(v, &next_origin_id))
        return Corrupt("origin counter", name);
    } else if (name == internal::kMetaTrimmedThrough) {
      if (!ParseFixed64Value(v, &trimmed_through))
        return Corrupt("trimmed sequence", name);
    } else if (name == internal::kMetaTombstoneIndex) {
      tombstones_indexed = true;
    } else if (name == internal::kMetaTombstoneArrival) {
      tombstones_by_arrival = true;
    }
  }
  TALLY_RETURN_IF_ERROR(FromLevelDb(it->status(), "reading metadata"));
  change_log_.Recover(last_sequence, trimmed_through);
  leaf_checkpoints_.Recover(leaves_sequence);
  catalogue_.RecoverNextIds(KeyspaceId(next_keyspace_id),
                            OriginId(next_origin_id));
  if (node_name_.empty() || epoch_ == 0) {
    return absl::DataLossError("the store's node name or epoch is missing");
  }
  if (!options_.node_name.empty() && options_.node_name != node_name_) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the store belongs to node '%s', not '%s'; a node keeps its name "
        "for the life of its data directory",
        node_name_, options_.node_name));
  }

  for (it->Seek(std::string(1, internal::kOriginByIdTag));
       it->Valid() && it->key()[0] == internal::kOriginByIdTag; it->Next()) {
    uint32_t id;
    if (!internal::ParseOriginByIdKey(ToStringView(it->key()), &id)) {
      return Corrupt("origin", it->key().ToString());
    }
    catalogue_.RecoverOrigin(OriginId(id), it->value().ToString());
  }
  TALLY_RETURN_IF_ERROR(FromLevelDb(it->status(), "reading origins"));

  std::vector<Keyspace> keyspaces;
  for (it->Seek(std::string(1, internal::kKeyspaceTag));
       it->Valid() && it->key()[0] == internal::kKeyspaceTag; it->Next()) {
    absl::string_view key_name;
    internal::ParseKeyspaceKey(ToStringView(it->key()), &key_name);  // sought
    const std::string name(key_name);
    internal::KeyspaceRecord record;
    if (!internal::ParseKeyspaceRecord(ToStringView(it->value()), &record)) {
      return Corrupt("keyspace", name);
    }
    Keyspace ks{name, KeyspaceId(record.id), record.depth};
    if (ks.depth < tree::kMinDepth || ks.depth > tree::kMaxDepth) {
      return Corrupt("keyspace depth", name);
    }
    keyspaces.push_back(std::move(ks));
  }
  TALLY_RETURN_IF_ERROR(FromLevelDb(it->status(), "reading keyspaces"));

  // Leaves: O(leaves) plus the changes since the last checkpoint, never
  // the rows.
  for (Keyspace& ks : keyspaces) {
    // Leaves the replay changed differ from their checkpoint: the next
    // checkpoint must write them.
    std::vector<uint32_t> replayed;
    TALLY_ASSIGN_OR_RETURN(
        std::vector<tree::NodeState> leaves,
        leaf_checkpoints_.RecoverLeaves(nullptr, ks.id, ks.depth,
                                        leaves_sequence, &replayed));
    for (uint32_t leaf : replayed) {
      leaf_checkpoints_.MarkDirty(LeafRef{ks.id, leaf});
    }
    TALLY_ASSIGN_OR_RETURN(
        tree::MerkleTree tree,
        tree::MerkleTree::FromLeaves(ks.depth, std::move(leaves)));
    catalogue_.RecoverKeyspace(std::move(ks), std::move(tree));
  }
  absl::flat_hash_set<std::string> damaged;
  for (it->Seek(std::string(1, internal::kDamagedTag));
       it->Valid() && it->key()[0] == internal::kDamagedTag; it->Next()) {
    absl::string_view row_key;
    internal::ParseDamagedKey(ToStringView(it->key()), &row_key);  // sought
    damaged.insert(std::string(row_key));
  }
  TALLY_RETURN_IF_ERROR(FromLevelDb(it->status(), "reading damaged rows"));
  {
    absl::MutexLock lock(&damaged_mu_);
    damaged_ = std::move(damaged);
    damaged_count_.store(damaged_.size());
  }
  if (!tombstones_indexed) return IndexTombstones();
  if (!tombstones_by_arrival) return MigrateTombstoneIndex();
  return absl::OkStatus();
}

absl::Status StoreImpl::IndexTombstones() {
  // One pass over the rows, once in the life of a store; one batch, so
  // that the index is complete or absent.
  // Their arrival is unknown: they count as arriving now, so they are
  // purged later than their age says, never earlier.
  const HlcTimestamp now = PhysicalNow();
  leveldb::WriteBatch batch;
  TALLY_RETURN_IF_ERROR(
      ForEachStoredRow(nullptr, "indexing tombstones",
                       [&](absl::string_view row_key, const RowHeader& header) {
                         if (header.deleted) {
                           batch.Put(internal::TombstoneKey(now, row_key),
                                     EncodeTombstoneValue(header.timestamp));
                         }
                       }));
  batch.Put(internal::MetaKey(internal::kMetaTombstoneIndex), "");
  batch.Put(internal::MetaKey(internal::kMetaTombstoneArrival), "");
  leveldb::WriteOptions write;
  write.sync = true;
  return FromLevelDb(db_->Write(write, &batch), "indexing tombstones");
}

absl::Status StoreImpl::MigrateTombstoneIndex() {
  // Once in the life of a store, one batch: the index is either all keyed
  // by timestamp (empty values) or all by arrival.
  const HlcTimestamp now = PhysicalNow();
  leveldb::WriteBatch batch;
  leveldb::ReadOptions read;
  read.fill_cache = false;
  std::unique_ptr<leveldb::Iterator> it(db_->NewIterator(read));
  for (it->Seek(std::string(1, internal::kTombstoneTag));
       it->Valid() && it->key()[0] == internal::kTombstoneTag; it->Next()) {
    // Keyed by the tombstone's timestamp: it becomes the value.
    internal::ParsedTombstoneKey old;
    if (!internal::ParseTombstoneKey(ToStringView(it->key()), &old)) {
      return Corrupt("tombstone index", it->key().ToString());
    }
    batch.Delete(it->key());
    batch.Put(internal::TombstoneKey(now, old.row_key),
              internal::EncodeTombstoneValue(old.arrival));
  }
  TALLY_RETURN_IF_ERROR(
      FromLevelDb(it->status(), "reading the tombstone index"));
  batch.Put(internal::MetaKey(internal::kMetaTombstoneArrival), "");
  leveldb::WriteOptions write;
  write.sync = true;
  return FromLevelDb(db_->Write(write, &batch),
                     "rewriting the tombstone index by arrival");
}

}  // namespace internal

using internal::DirectoryState;
using internal::FromLevelDb;
using internal::InspectDirectory;
using internal::RecoveryAdvice;

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& dir,
                                                   StoreOptions options) {
  if (options.default_depth < tree::kMinDepth ||
      options.default_depth > tree::kMaxDepth) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "default depth %d is out of range; it must be %d..%d",
        options.default_depth, tree::kMinDepth, tree::kMaxDepth));
  }
  if (!options.node_name.empty()) {
    TALLY_RETURN_IF_ERROR(ValidateNodeName(options.node_name));
  }
  if (options.backend == nullptr) options.backend = NewEmbeddedBackend();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrFormat(
        "cannot create data directory %s: %s", dir, ec.message()));
  }
  TALLY_ASSIGN_OR_RETURN(const DirectoryState state, InspectDirectory(dir));
  std::unique_ptr<LevelDbConfig> config = MakeLevelDbConfig(options);
  // LevelDB creates a database wherever CURRENT is missing, and its first
  // cleanup then deletes every table it does not know: only a new
  // directory may get a new store.
  config->options.create_if_missing = state == DirectoryState::kEmpty;
  auto open_failed = [&dir](const leveldb::Status& s) {
    if (s.IsCorruption()) {
      return absl::DataLossError(absl::StrFormat(
          "the store in %s is damaged (%s); it is not opened, since LevelDB "
          "would drop what it cannot read. %s",
          dir, s.ToString(), RecoveryAdvice(dir)));
    }
    return FromLevelDb(s, absl::StrCat("opening the store in ", dir));
  };
  leveldb::DB* raw = nullptr;
  if (state != DirectoryState::kEmpty) {
    // A checking open first, with paranoid checks: LevelDB then fails on a
    // damaged log record instead of dropping it (and every later record of
    // its block) silently. The store then runs without them (see
    // MakeLevelDbConfig). The checking open turns the log into a table, so
    // the second open has nothing left to replay.
    leveldb::Options checking = config->options;
    checking.paranoid_checks = true;
    const leveldb::Status s = leveldb::DB::Open(checking, dir, &raw);
    if (!s.ok()) return open_failed(s);
    delete raw;
    raw = nullptr;
  }
  const leveldb::Status s = leveldb::DB::Open(config->options, dir, &raw);
  if (!s.ok()) return open_failed(s);
  auto store = std::make_unique<internal::StoreImpl>(
      std::move(options), std::unique_ptr<leveldb::DB>(raw), std::move(config));
  TALLY_RETURN_IF_ERROR(store->Load());
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace storage
}  // namespace tally
