// Recovering a store: RepairStore (storage/store.h), which salvages the
// LevelDB files and rebuilds every record derived from the rows, and the
// inspection of a data directory that Store::Open does first.
#include <leveldb/db.h>
#include <leveldb/env.h>
#include <leveldb/write_batch.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
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
namespace {

using internal::Fixed32String;
using internal::Fixed64String;
using internal::FromLevelDb;
using internal::kLocalOriginId;
using internal::RowHeader;
using internal::ScanPrefix;
using internal::TagPrefix;
using internal::ToStringView;
using internal::WriteBatchTo;
using tree::Digest128;
using tree::HlcTimestamp;
using tree::NodeRef;
using tree::Token;
using tree::Version;

bool IsLevelDbLog(const std::string& name) {
  return name.size() > 4 && name.compare(name.size() - 4, 4, ".log") == 0 &&
         std::all_of(name.begin(), name.end() - 4,
                     [](char c) { return c >= '0' && c <= '9'; });
}

// What the rows are checked against: the keyspace and origin tables.
struct RepairTables {
  struct Keyspace {
    std::string name;
    int depth;
  };
  absl::flat_hash_map<uint32_t, Keyspace> keyspaces;
  uint32_t next_keyspace_id = 1;
  absl::flat_hash_map<uint32_t, std::string> origins;
  uint32_t next_origin_id = kLocalOriginId + 1;
};

absl::StatusOr<RepairTables> ReadTables(leveldb::DB& db) {
  RepairTables tables;
  const leveldb::ReadOptions read;
  TALLY_RETURN_IF_ERROR(ScanPrefix(
      db, read, TagPrefix(internal::kKeyspaceTag), "reading keyspaces",
      [&](absl::string_view key, absl::string_view value) -> absl::Status {
        absl::string_view name;
        internal::KeyspaceRecord record;
        internal::ParseKeyspaceKey(key, &name);  // sought
        if (!internal::ParseKeyspaceRecord(value, &record)) {
          return absl::OkStatus();  // Open reports it
        }
        tables.keyspaces[record.id] = {std::string(name), record.depth};
        tables.next_keyspace_id =
            std::max(tables.next_keyspace_id, record.id + 1);
        return absl::OkStatus();
      }));
  TALLY_RETURN_IF_ERROR(ScanPrefix(
      db, read, TagPrefix(internal::kOriginByIdTag), "reading origins",
      [&](absl::string_view key, absl::string_view value) -> absl::Status {
        uint32_t id;
        if (!internal::ParseOriginByIdKey(key, &id)) return absl::OkStatus();
        tables.origins[id] = std::string(value);
        tables.next_origin_id = std::max(tables.next_origin_id, id + 1);
        return absl::OkStatus();
      }));
  return tables;
}

// The last sequence: the newest change entry may be newer than the
// counter that survived.
absl::StatusOr<Sequence> LastSequence(leveldb::DB& db) {
  const leveldb::ReadOptions read;
  Sequence last_sequence = 0;
  std::string value;
  Sequence stored_last;
  if (db.Get(read, internal::MetaKey(internal::kMetaLastSequence), &value)
          .ok() &&
      internal::ParseFixed64Value(value, &stored_last)) {
    last_sequence = stored_last;
  }
  std::unique_ptr<leveldb::Iterator> it(db.NewIterator(read));
  it->Seek(internal::TagPrefix(static_cast<char>(internal::kChangeTag + 1)));
  it->Valid() ? it->Prev() : it->SeekToLast();
  Sequence newest_change;
  if (it->Valid() &&
      internal::ParseChangeKey(ToStringView(it->key()), &newest_change)) {
    last_sequence = std::max(last_sequence, newest_change);
  }
  TALLY_RETURN_IF_ERROR(
      FromLevelDb(it->status(), "reading the repaired store"));
  return last_sequence;
}

// Rewrites, from the rows, every record derived from them: the leaves
// (the checkpoint then needs no replay), the rows per origin, the tombstone
// index, and the counters. After RepairDB these may be older than the rows
// (a dropped log record or table block), and a store whose leaves disagree
// with its rows would answer anti-entropy with wrong digests. Rows that do
// not match their own digest are removed (RepairDB reads logs without
// checksums, so a damaged record can come back with a wrong value): a
// peer's copy replaces them. One batch. Returns how many rows it removed.
absl::StatusOr<uint64_t> RebuildDerivedRecords(leveldb::DB* db,
                                               RowBackend& backend) {
  leveldb::ReadOptions read;
  leveldb::WriteBatch batch;
  TALLY_ASSIGN_OR_RETURN(const RepairTables tables, ReadTables(*db));
  // Damage marks go too: a row that is still damaged is removed below, and
  // one that RepairDB found sound again needs no mark.
  for (const char tag : {internal::kLeafTag, internal::kOriginRowsTag,
                         internal::kTombstoneTag, internal::kDamagedTag}) {
    TALLY_RETURN_IF_ERROR(ScanPrefix(
        *db, read, TagPrefix(tag), "reading derived records",
        [&](absl::string_view key, absl::string_view) -> absl::Status {
          batch.Delete(leveldb::Slice(key.data(), key.size()));
          return absl::OkStatus();
        }));
  }
  absl::flat_hash_map<uint64_t, tree::NodeState> leaves;
  absl::flat_hash_map<uint32_t, uint64_t> origin_rows;
  uint64_t removed = 0;
  const HlcTimestamp repaired_at = HlcTimestamp::FromParts(
      static_cast<uint64_t>(absl::ToUnixMillis(absl::Now())), 0);
  TALLY_RETURN_IF_ERROR(ScanPrefix(
      *db, read, TagPrefix(internal::kRowTag), "reading rows",
      [&](absl::string_view row_key, absl::string_view record) -> absl::Status {
        internal::ParsedRowKey parsed;
        RowHeader header;
        absl::string_view payload;
        bool sound = internal::ParseRowKey(row_key, &parsed) &&
                     !parsed.key.empty() &&
                     internal::DecodeRowRecord(record, &header, &payload);
        auto ks = tables.keyspaces.find(sound ? parsed.keyspace_id : 0);
        auto origin = tables.origins.find(header.origin_id);
        sound = sound && ks != tables.keyspaces.end() &&
                origin != tables.origins.end();
        if (sound) {
          absl::StatusOr<std::string> value = backend.ReadValue(
              RowLocation{ks->second.name, parsed.token, parsed.key}, payload);
          sound = value.ok() && parsed.token == tree::TokenOf(parsed.key) &&
                  tree::RowDigest(ks->second.name, parsed.key,
                                  Version{header.timestamp, origin->second},
                                  header.deleted, *value) == header.digest;
        }
        if (!sound) {
          batch.Delete(leveldb::Slice(row_key.data(), row_key.size()));
          ++removed;
          return absl::OkStatus();
        }
        const uint64_t leaf = tree::NodeIndexOf(parsed.token, ks->second.depth);
        tree::NodeState& state =
            leaves[(uint64_t{parsed.keyspace_id} << 32) | leaf];
        state.digest ^= header.digest;
        state.count += 1;
        origin_rows[header.origin_id] += 1;
        if (header.deleted) {
          // Every tombstone counts as arriving now, as in the migration of
          // an index keyed by timestamp: purged later than its age says,
          // never earlier.
          batch.Put(internal::TombstoneKey(repaired_at, row_key),
                    internal::EncodeTombstoneValue(header.timestamp));
        }
        return absl::OkStatus();
      }));
  for (const auto& [where, state] : leaves) {
    batch.Put(internal::LeafKey(static_cast<uint32_t>(where >> 32),
                                static_cast<uint32_t>(where)),
              internal::EncodeLeaf(state.digest, state.count));
  }
  for (const auto& [id, rows] : origin_rows) {
    batch.Put(internal::OriginRowsKey(id), Fixed64String(rows));
  }
  TALLY_ASSIGN_OR_RETURN(const Sequence last_sequence, LastSequence(*db));
  batch.Put(internal::MetaKey(internal::kMetaLastSequence),
            Fixed64String(last_sequence));
  batch.Put(internal::MetaKey(internal::kMetaLeavesSequence),
            Fixed64String(last_sequence));
  batch.Put(internal::MetaKey(internal::kMetaNextKeyspaceId),
            Fixed32String(tables.next_keyspace_id));
  batch.Put(internal::MetaKey(internal::kMetaNextOriginId),
            Fixed32String(tables.next_origin_id));
  batch.Put(internal::MetaKey(internal::kMetaOriginRows), Fixed32String(1));
  batch.Put(internal::MetaKey(internal::kMetaTombstoneIndex), "");
  batch.Put(internal::MetaKey(internal::kMetaTombstoneArrival), "");
  TALLY_RETURN_IF_ERROR(WriteBatchTo(*db, &batch, /*sync=*/true,
                                     "rewriting the derived records"));
  return removed;
}

}  // namespace

namespace internal {

std::string RecoveryAdvice(const std::string& dir) {
  return absl::StrFormat(
      "To recover: stop tallyd, run `tally recover --data-dir %s` (it "
      "salvages what is readable and verifies the store), then start tallyd: "
      "its anti-entropy sessions bring back from peers what was lost",
      dir);
}

absl::StatusOr<DirectoryState> InspectDirectory(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> names;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  if (ec) {
    return absl::UnavailableError(absl::StrFormat(
        "cannot list data directory %s: %s", dir, ec.message()));
  }
  const bool has_current =
      std::find(names.begin(), names.end(), "CURRENT") != names.end();
  if (has_current) {
    if (std::none_of(names.begin(), names.end(), IsLevelDbLog)) {
      return absl::DataLossError(absl::StrFormat(
          "the store in %s has no LevelDB log file (*.log): it was deleted, "
          "and with it the writes made since the last table was written. %s",
          dir, RecoveryAdvice(dir)));
    }
    return DirectoryState::kStore;
  }
  // LevelDB's lock and info log hold no data (a first open that failed
  // leaves them), and neither does the lost+found directory of a file
  // system's root: a fresh disk mounted as the data directory is empty.
  std::vector<std::string> others;
  for (const std::string& name : names) {
    if (name == "LOCK" || name == "LOG" || name == "LOG.old") continue;
    if (name == "lost+found" &&
        std::filesystem::is_directory(std::filesystem::path(dir) / name, ec)) {
      continue;
    }
    others.push_back(name);
  }
  if (others.empty()) return DirectoryState::kEmpty;
  std::sort(others.begin(), others.end());
  const size_t shown = std::min<size_t>(others.size(), 4);
  return absl::FailedPreconditionError(absl::StrFormat(
      "%s holds %d files (%s%s) but no store: LevelDB's CURRENT file is "
      "missing. A new store is created only in an empty or new directory, "
      "since creating one here would delete the tables of the store that was. "
      "If this was a tally store: %s. If it is not, point --data-dir at an "
      "empty or new directory",
      dir, others.size(),
      absl::StrJoin(others.begin(), others.begin() + shown, ", "),
      others.size() > shown ? ", ..." : "", RecoveryAdvice(dir)));
}

}  // namespace internal

absl::StatusOr<uint64_t> RepairStore(const std::string& dir,
                                     const StoreOptions& options) {
  std::error_code ec;
  bool has_leveldb_files = false;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name == "CURRENT" || absl::StartsWith(name, "MANIFEST-") ||
        absl::EndsWith(name, ".ldb") || absl::EndsWith(name, ".sst") ||
        IsLevelDbLog(name)) {
      has_leveldb_files = true;
    }
  }
  if (ec) {
    return absl::NotFoundError(
        absl::StrFormat("cannot list %s: %s", dir, ec.message()));
  }
  if (!has_leveldb_files) {
    return absl::NotFoundError(absl::StrFormat(
        "%s holds no LevelDB files (no CURRENT, MANIFEST-*, *.ldb or *.log): "
        "nothing to recover",
        dir));
  }
  std::unique_ptr<LevelDbConfig> config = MakeLevelDbConfig(options);
  leveldb::Env* env = config->options.env;
  // RepairDB does not take LevelDB's lock itself: a running tallyd must not
  // have its files rewritten under it.
  leveldb::FileLock* lock = nullptr;
  leveldb::Status s = env->LockFile(dir + "/LOCK", &lock);
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrFormat(
        "%s is locked (%s), probably by a running tallyd; stop it first", dir,
        s.ToString()));
  }
  s = leveldb::RepairDB(dir, config->options);
  env->UnlockFile(lock);
  if (!s.ok()) {
    return FromLevelDb(s, absl::StrCat("repairing the store in ", dir));
  }
  // RepairDB turns the logs into tables and leaves none; an open makes the
  // new log that Store::Open expects of every store.
  config->options.create_if_missing = false;
  leveldb::DB* raw = nullptr;
  s = leveldb::DB::Open(config->options, dir, &raw);
  if (!s.ok()) {
    return FromLevelDb(s, absl::StrCat("opening the repaired store in ", dir));
  }
  std::unique_ptr<leveldb::DB> db(raw);
  const std::shared_ptr<RowBackend> backend =
      options.backend != nullptr ? options.backend : NewEmbeddedBackend();
  return RebuildDerivedRecords(db.get(), *backend);
}

}  // namespace storage
}  // namespace tally
