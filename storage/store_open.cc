// Opening a store: Store::Open (the directory checks and LevelDB's opens)
// and StoreImpl::Load (identity, metadata, origins, keyspaces, leaves,
// damage marks), which reads everything first and installs it under the
// lock at the end. The migrations of older stores it runs are in
// store_migrations.cc.
#include <leveldb/db.h>
#include <leveldb/write_batch.h>

#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "storage/internal/coding.h"
#include "storage/internal/leveldb_status.h"
#include "storage/internal/leveldb_write.h"
#include "storage/internal/prefix_scan.h"
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

namespace {

// The metadata records Load reads, before it installs them under the lock.
// The defaults are a store's before its first commit.
struct Metadata {
  std::string node_name;
  Epoch epoch = 0;
  Sequence last_sequence = 0;
  uint32_t next_keyspace_id = 1;
  Sequence leaves_sequence = 0;
  uint32_t next_origin_id = kLocalOriginId + 1;
  Sequence trimmed_through = 0;
  bool tombstones_indexed = false;
  bool tombstones_by_arrival = false;
};

// One metadata record: its name, what a corruption message calls it, and
// how its value is parsed into Metadata (false: malformed). The format and
// origin_rows records are read before, by the format check and the
// migration; a name not listed is ignored.
struct MetadataField {
  absl::string_view name;
  absl::string_view what;
  bool (*parse)(absl::string_view value, Metadata* m);
};

constexpr MetadataField kMetadataFields[] = {
    {kMetaNodeName, "node name",
     [](absl::string_view v, Metadata* m) {
       m->node_name = std::string(v);
       return true;
     }},
    {kMetaEpoch, "epoch",
     [](absl::string_view v, Metadata* m) {
       return ParseFixed64Value(v, &m->epoch);
     }},
    {kMetaLastSequence, "last sequence",
     [](absl::string_view v, Metadata* m) {
       return ParseFixed64Value(v, &m->last_sequence);
     }},
    {kMetaNextKeyspaceId, "keyspace counter",
     [](absl::string_view v, Metadata* m) {
       return ParseFixed32Value(v, &m->next_keyspace_id);
     }},
    {kMetaLeavesSequence, "leaves sequence",
     [](absl::string_view v, Metadata* m) {
       return ParseFixed64Value(v, &m->leaves_sequence);
     }},
    {kMetaNextOriginId, "origin counter",
     [](absl::string_view v, Metadata* m) {
       return ParseFixed32Value(v, &m->next_origin_id);
     }},
    {kMetaTrimmedThrough, "trimmed sequence",
     [](absl::string_view v, Metadata* m) {
       return ParseFixed64Value(v, &m->trimmed_through);
     }},
    // Markers: their presence is the fact.
    {kMetaTombstoneIndex, "tombstone index marker",
     [](absl::string_view, Metadata* m) {
       m->tombstones_indexed = true;
       return true;
     }},
    {kMetaTombstoneArrival, "tombstone arrival marker",
     [](absl::string_view, Metadata* m) {
       m->tombstones_by_arrival = true;
       return true;
     }},
};

absl::StatusOr<Metadata> ReadMetadata(leveldb::DB& db) {
  Metadata metadata;
  TALLY_RETURN_IF_ERROR(ScanPrefix(
      db, leveldb::ReadOptions(), TagPrefix(kMetaTag), "reading metadata",
      [&](absl::string_view key, absl::string_view value) -> absl::Status {
        absl::string_view name;
        ParseMetaKey(key, &name);  // the tag: sought
        for (const MetadataField& field : kMetadataFields) {
          if (field.name != name) continue;
          if (!field.parse(value, &metadata)) return Corrupt(field.what, name);
          break;
        }
        return absl::OkStatus();
      }));
  return metadata;
}

// A new store (no format record) gets its identity in one batch; an
// existing one must have this build's format.
absl::Status CreateOrCheckFormat(leveldb::DB& db,
                                 const std::string& node_name) {
  std::string value;
  const leveldb::Status format_status =
      db.Get(leveldb::ReadOptions(), MetaKey(kMetaFormat), &value);
  if (!format_status.IsNotFound()) {
    TALLY_RETURN_IF_ERROR(FromLevelDb(format_status, "reading the format"));
    uint32_t format;
    if (!ParseFixed32Value(value, &format)) {
      return Corrupt("format", kMetaFormat);
    }
    if (format != kFormatVersion) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "the store has format version %d; this build reads version %d "
          "only",
          format, kFormatVersion));
    }
    return absl::OkStatus();
  }
  TALLY_RETURN_IF_ERROR(ValidateNodeName(node_name));
  const Epoch epoch = internal::NewEpoch();
  leveldb::WriteBatch batch;
  batch.Put(MetaKey(kMetaFormat), Fixed32String(kFormatVersion));
  batch.Put(MetaKey(kMetaNodeName), node_name);
  batch.Put(MetaKey(kMetaEpoch), Fixed64String(epoch));
  batch.Put(OriginByIdKey(kLocalOriginId), node_name);
  batch.Put(OriginByNameKey(node_name), Fixed32String(kLocalOriginId));
  batch.Put(MetaKey(kMetaNextOriginId), Fixed32String(kLocalOriginId + 1));
  batch.Put(MetaKey(kMetaOriginRows), Fixed32String(1));
  batch.Put(MetaKey(kMetaTombstoneIndex), "");
  batch.Put(MetaKey(kMetaTombstoneArrival), "");
  return WriteBatchTo(db, &batch, /*sync=*/true, "writing a new store");
}

absl::StatusOr<absl::flat_hash_map<uint32_t, std::string>> ReadOrigins(
    leveldb::DB& db) {
  absl::flat_hash_map<uint32_t, std::string> origins;
  TALLY_RETURN_IF_ERROR(ScanPrefix(
      db, leveldb::ReadOptions(), TagPrefix(kOriginByIdTag), "reading origins",
      [&](absl::string_view key, absl::string_view value) -> absl::Status {
        uint32_t id;
        if (!ParseOriginByIdKey(key, &id)) return Corrupt("origin", key);
        origins[id] = std::string(value);
        return absl::OkStatus();
      }));
  return origins;
}

// The keyspaces (their trees are built from the leaves).
absl::StatusOr<std::vector<Keyspace>> ReadKeyspaces(leveldb::DB& db) {
  std::vector<Keyspace> keyspaces;
  TALLY_RETURN_IF_ERROR(ScanPrefix(
      db, leveldb::ReadOptions(), TagPrefix(kKeyspaceTag), "reading keyspaces",
      [&](absl::string_view key, absl::string_view value) -> absl::Status {
        absl::string_view name;
        ParseKeyspaceKey(key, &name);  // the tag: sought
        KeyspaceRecord record;
        if (!ParseKeyspaceRecord(value, &record)) {
          return Corrupt("keyspace", name);
        }
        if (record.depth < tree::kMinDepth || record.depth > tree::kMaxDepth) {
          return Corrupt("keyspace depth", name);
        }
        keyspaces.push_back(
            Keyspace{std::string(name), KeyspaceId(record.id), record.depth});
        return absl::OkStatus();
      }));
  return keyspaces;
}

// The dropped keyspaces, with the id each had.
absl::StatusOr<std::vector<std::pair<std::string, DroppedKeyspaceRecord>>>
ReadDroppedKeyspaces(leveldb::DB& db) {
  std::vector<std::pair<std::string, DroppedKeyspaceRecord>> dropped;
  TALLY_RETURN_IF_ERROR(ScanPrefix(
      db, leveldb::ReadOptions(), TagPrefix(kDroppedKeyspaceTag),
      "reading dropped keyspaces",
      [&](absl::string_view key, absl::string_view value) -> absl::Status {
        absl::string_view name;
        ParseTaggedKey(kDroppedKeyspaceTag, key, &name);  // the tag: sought
        DroppedKeyspaceRecord record;
        if (!ParseDroppedKeyspaceRecord(value, &record)) {
          return Corrupt("dropped keyspace", key);
        }
        dropped.emplace_back(std::string(name), record);
        return absl::OkStatus();
      }));
  return dropped;
}

// The ids dropped keyspaces had, with their names.
absl::StatusOr<std::vector<std::pair<uint32_t, std::string>>>
ReadRetiredKeyspaceIds(leveldb::DB& db) {
  std::vector<std::pair<uint32_t, std::string>> retired;
  TALLY_RETURN_IF_ERROR(ScanPrefix(
      db, leveldb::ReadOptions(), TagPrefix(kRetiredKeyspaceIdTag),
      "reading dropped keyspaces' ids",
      [&](absl::string_view key, absl::string_view value) -> absl::Status {
        uint32_t id;
        if (!ParseRetiredKeyspaceIdKey(key, &id)) {
          return Corrupt("dropped keyspace's id", key);
        }
        retired.emplace_back(id, std::string(value));
        return absl::OkStatus();
      }));
  return retired;
}

absl::StatusOr<absl::flat_hash_set<std::string>> ReadDamageMarks(
    leveldb::DB& db) {
  absl::flat_hash_set<std::string> damaged;
  TALLY_RETURN_IF_ERROR(
      ScanPrefix(db, leveldb::ReadOptions(), TagPrefix(kDamagedTag),
                 "reading damaged rows",
                 [&](absl::string_view key, absl::string_view) -> absl::Status {
                   absl::string_view row_key;
                   ParseDamagedKey(key, &row_key);  // the tag: sought
                   damaged.insert(std::string(row_key));
                   return absl::OkStatus();
                 }));
  return damaged;
}

}  // namespace

absl::Status StoreImpl::Load() {
  TALLY_RETURN_IF_ERROR(CreateOrCheckFormat(*db_, options_.node_name));
  TALLY_RETURN_IF_ERROR(BuildOriginRows());
  TALLY_ASSIGN_OR_RETURN(auto origin_rows, ReadOriginRows(nullptr));
  TALLY_ASSIGN_OR_RETURN(Metadata metadata, ReadMetadata(*db_));
  if (metadata.node_name.empty() || metadata.epoch == 0) {
    return absl::DataLossError("the store's node name or epoch is missing");
  }
  if (!options_.node_name.empty() && options_.node_name != metadata.node_name) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the store belongs to node '%s', not '%s'; a node keeps its name "
        "for the life of its data directory",
        metadata.node_name, options_.node_name));
  }
  TALLY_ASSIGN_OR_RETURN(auto origins, ReadOrigins(*db_));
  TALLY_ASSIGN_OR_RETURN(std::vector<Keyspace> keyspaces, ReadKeyspaces(*db_));
  TALLY_ASSIGN_OR_RETURN(auto damaged, ReadDamageMarks(*db_));
  TALLY_ASSIGN_OR_RETURN(auto dropped, ReadDroppedKeyspaces(*db_));
  TALLY_ASSIGN_OR_RETURN(auto retired, ReadRetiredKeyspaceIds(*db_));

  node_name_ = std::move(metadata.node_name);
  epoch_ = metadata.epoch;
  change_log_.Recover(metadata.last_sequence, metadata.trimmed_through);
  leaf_checkpoints_.Recover(metadata.leaves_sequence);
  catalogue_.RecoverNextIds(KeyspaceId(metadata.next_keyspace_id),
                            OriginId(metadata.next_origin_id));
  {
    absl::flat_hash_map<OriginId, uint64_t> rows;
    for (const auto& [id, count] : origin_rows) rows[OriginId(id)] = count;
    catalogue_.RecoverOriginRows(std::move(rows));
  }
  for (auto& [id, name] : origins) {
    catalogue_.RecoverOrigin(OriginId(id), std::move(name));
  }
  // Leaves: O(leaves) plus the changes since the last checkpoint, never
  // the rows. Leaves the replay changed differ from their checkpoint: the
  // next checkpoint must write them.
  for (Keyspace& ks : keyspaces) {
    std::vector<uint32_t> replayed;
    TALLY_ASSIGN_OR_RETURN(
        std::vector<tree::NodeState> leaves,
        leaf_checkpoints_.RecoverLeaves(nullptr, ks.id, ks.depth,
                                        metadata.leaves_sequence, &replayed));
    for (uint32_t leaf : replayed) {
      leaf_checkpoints_.MarkDirty(LeafRef{ks.id, leaf});
    }
    TALLY_ASSIGN_OR_RETURN(
        tree::MerkleTree tree,
        tree::MerkleTree::FromLeaves(ks.depth, std::move(leaves)));
    // Every token may exist until the builder has read the rows.
    row_presence_.AddExisting(ks.id, tree.root().count);
    catalogue_.RecoverKeyspace(std::move(ks), std::move(tree));
  }
  for (auto& [id, name] : retired) {
    catalogue_.RecoverRetiredId(KeyspaceId(id), std::move(name));
  }
  for (auto& [name, record] : dropped) {
    catalogue_.RecoverDropped(std::move(name), KeyspaceId(record.id),
                              static_cast<int64_t>(record.dropped_unix_ms));
  }
  {
    absl::MutexLock lock(&damaged_mu_);
    damaged_ = std::move(damaged);
    damaged_count_.store(damaged_.size());
  }
  // Outside the lock: the migrations read the damage marks through it.
  if (!metadata.tombstones_indexed) return IndexTombstones();
  if (!metadata.tombstones_by_arrival) return MigrateTombstoneIndex();
  return absl::OkStatus();
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
      dir, std::move(options), std::unique_ptr<leveldb::DB>(raw),
      std::move(config));
  // The log was checked by the paranoid open: what Load cannot read is in
  // the tables, for a salvage to mend.
  TALLY_RETURN_IF_ERROR(store->NoteTableDamage(store->Load()));
  store->StartRowPresenceBuild();
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace storage
}  // namespace tally
