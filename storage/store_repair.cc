// Recovering a store: RepairStore (storage/store.h), which salvages the
// LevelDB files and rebuilds every record derived from the rows, and the
// inspection of a data directory that Store::Open does first.
#include <leveldb/db.h>
#include <leveldb/env.h>
#include <leveldb/write_batch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/numeric/bits.h"
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
#include "storage/internal/table_salvage.h"
#include "storage/leveldb_config.h"
#include "storage/names.h"
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

// Every read of the repaired store verifies checksums: a block that fails
// is an error, never garbage keys.
leveldb::ReadOptions CheckedRead() {
  leveldb::ReadOptions read;
  read.verify_checksums = true;
  return read;
}

// One line per damaged table, for the operator.
std::vector<std::string> Describe(const internal::TableCheck& check) {
  std::vector<std::string> lines;
  for (const internal::DamagedTable& table : check.damaged) {
    lines.push_back(
        table.unreadable
            ? absl::StrFormat("%s: unreadable (%s); none of its rows could "
                              "be kept",
                              table.file, table.reason)
            : absl::StrFormat("%s: damaged blocks (%s); its %d readable "
                              "entries were kept",
                              table.file, table.reason,
                              table.readable_entries));
  }
  return lines;
}

absl::StatusOr<RepairTables> ReadTables(leveldb::DB& db) {
  RepairTables tables;
  const leveldb::ReadOptions read = CheckedRead();
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
  // A dropped keyspace's id is never given out again.
  TALLY_RETURN_IF_ERROR(ScanPrefix(
      db, read, TagPrefix(internal::kRetiredKeyspaceIdTag),
      "reading dropped keyspaces' ids",
      [&](absl::string_view key, absl::string_view) -> absl::Status {
        uint32_t id;
        if (internal::ParseRetiredKeyspaceIdKey(key, &id)) {
          tables.next_keyspace_id = std::max(tables.next_keyspace_id, id + 1);
        }
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
  const leveldb::ReadOptions read = CheckedRead();
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

// The records that say whose store this is, when a damaged block took
// them: the node's name from its own origin record (the origin of its local
// writes), a new epoch (peers then treat the node as new and resend what it
// may have lost), the format, and each origin's name-to-id record from its
// id-to-name record.
// Returns whether the node's name came from `node_name`.
absl::StatusOr<bool> RestoreIdentity(leveldb::DB& db, RepairTables& tables,
                                     const std::string& node_name,
                                     leveldb::WriteBatch* batch) {
  const leveldb::ReadOptions read = CheckedRead();
  auto missing = [&](absl::string_view name) -> absl::StatusOr<bool> {
    std::string value;
    const leveldb::Status s = db.Get(read, internal::MetaKey(name), &value);
    if (s.IsNotFound()) return true;
    TALLY_RETURN_IF_ERROR(FromLevelDb(s, "reading the metadata"));
    return false;
  };
  TALLY_ASSIGN_OR_RETURN(const bool no_name, missing(internal::kMetaNodeName));
  auto own = tables.origins.find(kLocalOriginId);
  if (no_name && own == tables.origins.end() && node_name.empty()) {
    return absl::DataLossError(
        "the node's name was in the damaged blocks, and so was the record "
        "of its own origin that names it too: run recover again with "
        "--node-name NAME (the node's tallyd --name), or move the directory "
        "aside and start tallyd on an empty one, to be refilled from its "
        "peers");
  }
  if (!node_name.empty() && own != tables.origins.end() &&
      own->second != node_name) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "this store is node '%s', not '%s'", own->second, node_name));
  }
  const bool named_here = no_name && own == tables.origins.end();
  if (no_name) {
    const std::string& name =
        own != tables.origins.end() ? own->second : node_name;
    batch->Put(internal::MetaKey(internal::kMetaNodeName), name);
    if (own == tables.origins.end()) {
      batch->Put(internal::OriginByIdKey(kLocalOriginId), name);
      tables.origins[kLocalOriginId] = name;  // its rows are kept
    }
  }
  TALLY_ASSIGN_OR_RETURN(const bool no_epoch, missing(internal::kMetaEpoch));
  if (no_epoch) {
    batch->Put(internal::MetaKey(internal::kMetaEpoch),
               Fixed64String(internal::NewEpoch()));
  }
  TALLY_ASSIGN_OR_RETURN(const bool no_format, missing(internal::kMetaFormat));
  if (no_format) {
    batch->Put(internal::MetaKey(internal::kMetaFormat),
               Fixed32String(internal::kFormatVersion));
  }
  for (const auto& [id, name] : tables.origins) {
    batch->Put(internal::OriginByNameKey(name), Fixed32String(id));
  }
  return named_here;
}

// Why a PostgreSQL sidecar's store is not recovered here, and what to do.
// `after_salvage`: LevelDB's repair already rewrote the files (not the
// rows).
absl::Status SidecarStoreRefused(const std::string& dir, bool after_salvage) {
  return absl::FailedPreconditionError(absl::StrFormat(
      "%s %s: its rows' values live in the database, not in this store, so "
      "recover cannot check them against their digests (it would remove "
      "every row). %s To rebuild it: stop the node, move this directory "
      "aside and leave an empty one in its place, and start the node: its "
      "sidecar finds its index lost and builds it again from its tables",
      dir,
      after_salvage ? "holds no live row whose value matches its digest, as "
                      "a PostgreSQL sidecar's index does"
                    : "is a PostgreSQL sidecar's index",
      after_salvage ? "Its rows were left as they are (LevelDB's repair "
                      "rewrote its files; the originals are in its lost "
                      "directory); if it is no sidecar's, its rows are all "
                      "damaged: start the node on an empty directory."
                    : "Nothing was changed."));
}

// Rewrites, from the rows, every record derived from them: the leaves
// (the checkpoint then needs no replay), the rows per origin, the tombstone
// index, and the counters. After RepairDB these may be older than the rows
// (a dropped log record or table block), and a store whose leaves disagree
// with its rows would answer anti-entropy with wrong digests. Rows that do
// not match their own digest are removed (RepairDB reads logs without
// checksums, so a damaged record can come back with a wrong value): a
// peer's copy replaces them. Rows of a keyspace whose record was lost are
// named by `keyspaces` when they can be, and otherwise kept, unused. One
// batch. Fills `report`.
absl::Status RebuildDerivedRecords(const std::string& dir, leveldb::DB* db,
                                   RowBackend& backend,
                                   const StoreOptions& options,
                                   const std::vector<std::string>& keyspaces,
                                   RepairReport* report) {
  const leveldb::ReadOptions read = CheckedRead();
  leveldb::WriteBatch batch;
  TALLY_ASSIGN_OR_RETURN(RepairTables tables, ReadTables(*db));
  TALLY_ASSIGN_OR_RETURN(
      const bool named_here,
      RestoreIdentity(*db, tables, options.node_name, &batch));
  // The node's own rows under a name given here: none digesting means the
  // name is wrong (and every one of them would be removed). Rows whose
  // keyspace cannot be named cannot tell, and are set aside anyway.
  uint64_t own_sound = 0;
  uint64_t own_unsound = 0;
  uint64_t live_sound = 0;
  uint64_t live_unsound = 0;
  // Damage marks go too: a row that is still damaged is removed below, and
  // one that RepairDB found sound again needs no mark. The highest leaf of
  // each keyspace tells the depth of one whose record was lost.
  absl::flat_hash_map<uint32_t, uint32_t> highest_leaf;
  for (const char tag : {internal::kLeafTag, internal::kOriginRowsTag,
                         internal::kTombstoneTag, internal::kDamagedTag}) {
    TALLY_RETURN_IF_ERROR(ScanPrefix(
        *db, read, TagPrefix(tag), "reading derived records",
        [&](absl::string_view key, absl::string_view) -> absl::Status {
          internal::ParsedLeafKey leaf;
          if (tag == internal::kLeafTag && internal::ParseLeafKey(key, &leaf)) {
            uint32_t& highest = highest_leaf[leaf.keyspace_id];
            highest = std::max(highest, leaf.leaf);
          }
          batch.Delete(leveldb::Slice(key.data(), key.size()));
          return absl::OkStatus();
        }));
  }
  absl::flat_hash_map<uint64_t, tree::NodeState> leaves;
  absl::flat_hash_map<uint32_t, uint64_t> origin_rows;
  const HlcTimestamp repaired_at = HlcTimestamp::FromParts(
      static_cast<uint64_t>(absl::ToUnixMillis(absl::Now())), 0);
  // Whether a row of keyspace `name` digests as its header says.
  auto digests = [&](absl::string_view name,
                     const internal::ParsedRowKey& parsed,
                     const RowHeader& header, absl::string_view payload) {
    auto origin = tables.origins.find(header.origin_id);
    if (origin == tables.origins.end()) return false;
    absl::StatusOr<std::string> value = backend.ReadValue(
        RowLocation{std::string(name), parsed.token, parsed.key}, payload);
    return value.ok() && parsed.token == tree::TokenOf(parsed.key) &&
           tree::RowDigest(name, parsed.key,
                           Version{header.timestamp, origin->second},
                           header.deleted, *value) == header.digest;
  };
  // A row of a keyspace whose record was lost, kept to name it by.
  struct Sample {
    internal::ParsedRowKey parsed;
    std::string key;
    RowHeader header;
    std::string payload;
  };
  struct Unattributed {
    uint64_t rows = 0;
    std::vector<Sample> samples;
  };
  absl::btree_map<uint32_t, Unattributed> unattributed;
  auto visit = [&](absl::string_view row_key,
                   absl::string_view record) -> absl::Status {
    internal::ParsedRowKey parsed;
    RowHeader header;
    absl::string_view payload;
    bool sound = internal::ParseRowKey(row_key, &parsed) &&
                 !parsed.key.empty() &&
                 internal::DecodeRowRecord(record, &header, &payload);
    auto ks = tables.keyspaces.find(sound ? parsed.keyspace_id : 0);
    if (sound && ks == tables.keyspaces.end()) {
      // Not removed: its keyspace may yet be named (below), and if not,
      // the row stays in the store, unused, rather than lost.
      Unattributed& lost = unattributed[parsed.keyspace_id];
      if (++lost.rows <= 8) {
        Sample& sample = lost.samples.emplace_back();
        sample.key = std::string(parsed.key);
        sample.parsed = parsed;  // its key is set from `key` when used
        sample.header = header;
        sample.payload = std::string(payload);
      }
      return absl::OkStatus();
    }
    sound = sound && digests(ks->second.name, parsed, header, payload);
    if (header.origin_id == kLocalOriginId) ++(sound ? own_sound : own_unsound);
    if (!header.deleted) ++(sound ? live_sound : live_unsound);
    if (!sound) {
      batch.Delete(leveldb::Slice(row_key.data(), row_key.size()));
      ++report->rows_removed;
      return absl::OkStatus();
    }
    const uint64_t leaf = tree::NodeIndexOf(parsed.token, ks->second.depth);
    tree::NodeState& state =
        leaves[(uint64_t{parsed.keyspace_id} << 32) | leaf];
    state.digest ^= header.digest;
    state.count += 1;
    origin_rows[header.origin_id] += 1;
    if (header.deleted) {
      // Every tombstone counts as arriving now, as in the migration of an
      // index keyed by timestamp: purged later than its age says, never
      // earlier.
      batch.Put(internal::TombstoneKey(repaired_at, row_key),
                internal::EncodeTombstoneValue(header.timestamp));
    }
    return absl::OkStatus();
  };
  TALLY_RETURN_IF_ERROR(ScanPrefix(*db, read, TagPrefix(internal::kRowTag),
                                   "reading rows", visit));
  // Rows an earlier recover set aside. Of a keyspace named since (a peer's
  // rows made it again): back among the rows, unless the key is there
  // already (a peer's copy, newer). Else sampled with the rest.
  const std::string set_aside_prefix(1, internal::kSetAsideRowTag);
  auto restore = [&](absl::string_view key,
                     absl::string_view record) -> absl::Status {
    const absl::string_view row_key = key.substr(1);
    batch.Delete(leveldb::Slice(key.data(), key.size()));
    std::string present;
    const leveldb::Status s =
        db->Get(read, leveldb::Slice(row_key.data(), row_key.size()), &present);
    if (s.ok()) return absl::OkStatus();
    TALLY_RETURN_IF_ERROR(FromLevelDb(
        s.IsNotFound() ? leveldb::Status::OK() : s, "reading a row"));
    batch.Put(leveldb::Slice(row_key.data(), row_key.size()),
              leveldb::Slice(record.data(), record.size()));
    return visit(row_key, record);
  };
  TALLY_RETURN_IF_ERROR(ScanPrefix(
      *db, read, set_aside_prefix, "reading rows set aside",
      [&](absl::string_view key, absl::string_view record) -> absl::Status {
        internal::ParsedRowKey parsed;
        if (internal::ParseRowKey(key.substr(1), &parsed) &&
            tables.keyspaces.contains(parsed.keyspace_id)) {
          return restore(key, record);
        }
        return visit(key.substr(1), record);
      }));
  // A keyspace whose record was lost is named when every sampled row of it
  // digests under one of the names given (a row's digest covers its
  // keyspace's name); its depth comes from its highest leaf.
  for (auto& [id, lost] : unattributed) {
    tables.next_keyspace_id = std::max(tables.next_keyspace_id, id + 1);
    const std::string row_prefix = internal::RowKeyPrefix(id);
    const std::string set_aside = set_aside_prefix + row_prefix;
    for (const std::string& name : keyspaces) {
      bool taken = false;
      for (const auto& [known_id, known] : tables.keyspaces) {
        taken = taken || known.name == name;
      }
      if (taken || !std::all_of(lost.samples.begin(), lost.samples.end(),
                                [&](const Sample& s) {
                                  internal::ParsedRowKey parsed = s.parsed;
                                  parsed.key = s.key;
                                  return digests(name, parsed, s.header,
                                                 s.payload);
                                })) {
        continue;
      }
      int depth = options.default_depth;
      auto highest = highest_leaf.find(id);
      if (highest != highest_leaf.end()) {
        depth = std::clamp<int>(absl::bit_width(highest->second),
                                tree::kMinDepth, tree::kMaxDepth);
      }
      tables.keyspaces[id] = {name, depth};
      batch.Put(internal::KeyspaceKey(name),
                internal::EncodeKeyspaceRecord({id, depth}));
      report->renamed_keyspaces.push_back(absl::StrFormat(
          "keyspace '%s' (id %d, depth %d): its record was lost; its rows "
          "digest under this name",
          name, id, depth));
      TALLY_RETURN_IF_ERROR(
          ScanPrefix(*db, read, row_prefix, "reading rows", visit));
      TALLY_RETURN_IF_ERROR(
          ScanPrefix(*db, read, set_aside, "reading rows set aside", restore));
      lost.rows = 0;
      break;
    }
    if (lost.rows == 0) continue;
    // Out of the rows' key space, where every scan of the store would
    // meet them, into one no scan reads; a later recover looks again.
    report->rows_unattributed += lost.rows;
    report->unattributed_keyspaces.push_back(id);
    TALLY_RETURN_IF_ERROR(ScanPrefix(
        *db, read, row_prefix, "setting rows aside",
        [&](absl::string_view row_key, absl::string_view record) {
          const std::string key = set_aside_prefix + std::string(row_key);
          batch.Delete(leveldb::Slice(row_key.data(), row_key.size()));
          batch.Put(key, leveldb::Slice(record.data(), record.size()));
          return absl::OkStatus();
        }));
  }
  if (named_here && own_unsound > 0 && own_sound == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "none of the %d rows this node wrote digests under the name '%s': it "
        "is not this node's name (nothing was changed by this step; give "
        "the node's tallyd --name)",
        own_unsound, options.node_name));
  }
  // Not one live row digests as its value: not damage, but a store whose
  // values live elsewhere (a sidecar's, whose position record was in its
  // log only).
  if (options.backend == nullptr && live_unsound > 0 && live_sound == 0) {
    return SidecarStoreRefused(dir, /*after_salvage=*/true);
  }
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
  return WriteBatchTo(*db, &batch, /*sync=*/true,
                      "rewriting the derived records");
}

// Whether `dir` holds any record only tally writes: its metadata, or a row
// filed under the token of its key. Reads only. Checked before a recover
// changes anything, so that another program's LevelDB database is never
// rewritten into a tally store.
absl::StatusOr<bool> HoldsTallyRecords(const std::string& dir,
                                       leveldb::Env* env) {
  const std::string format = internal::MetaKey(internal::kMetaFormat);
  const std::string node = internal::MetaKey(internal::kMetaNodeName);
  TALLY_ASSIGN_OR_RETURN(
      const bool in_tables,
      internal::AnyTableKey(dir, env, [&](absl::string_view key) {
        internal::ParsedRowKey row;
        return key == format || key == node ||
               (internal::ParseRowKey(key, &row) && !row.key.empty() &&
                row.token == tree::TokenOf(row.key));
      }));
  if (in_tables) return true;
  // A store that was never compacted has its records in its log only; a
  // log's records hold their keys as they are.
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    if (!IsLevelDbLog(it->path().filename().string())) continue;
    std::ifstream in(it->path(), std::ios::binary);
    const std::string log((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
    if (log.find(format) != std::string::npos ||
        log.find(node) != std::string::npos) {
      return true;
    }
  }
  return false;
}

}  // namespace

namespace internal {

Epoch NewEpoch() {
  std::random_device random;
  Epoch epoch;
  do {
    epoch = (uint64_t{random()} << 32) | random();
  } while (epoch == 0);
  return epoch;
}

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

absl::StatusOr<std::vector<std::string>> CheckTableFiles(
    const std::string& dir, const StoreOptions& options) {
  std::unique_ptr<LevelDbConfig> config = MakeLevelDbConfig(options);
  TALLY_ASSIGN_OR_RETURN(const internal::TableCheck check,
                         internal::CheckTables(dir, config->options.env));
  return Describe(check);
}

absl::StatusOr<RepairReport> RepairStore(
    const std::string& dir, const StoreOptions& options,
    const std::vector<std::string>& keyspaces) {
  if (!options.node_name.empty()) {
    TALLY_RETURN_IF_ERROR(ValidateNodeName(options.node_name));
  }
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
  absl::StatusOr<bool> holds_tally = HoldsTallyRecords(dir, env);
  if (!holds_tally.ok() || !*holds_tally) {
    env->UnlockFile(lock);
    if (!holds_tally.ok()) return holds_tally.status();
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s holds LevelDB files but not one record of a tally store (no "
        "store metadata, no row in its tables or logs): it is another "
        "program's database, or a store whose every record was lost. "
        "Nothing was changed. For a node whose store this was: move the "
        "directory aside and start tallyd on an empty one, to be refilled "
        "from its peers",
        dir));
  }
  // A sidecar's store holds its capture position (a 'B' record): its rows'
  // values are not here, and the embedded backend would call them all
  // damaged.
  if (options.backend == nullptr) {
    absl::StatusOr<bool> sidecar =
        internal::AnyTableKey(dir, env, [](absl::string_view key) {
          return key == internal::BackendPositionKey();
        });
    if (!sidecar.ok() || *sidecar) {
      env->UnlockFile(lock);
      if (!sidecar.ok()) return sidecar.status();
      return SidecarStoreRefused(dir, /*after_salvage=*/false);
    }
  }
  // RepairDB moves what it replaces into the same directory.
  absl::StatusOr<internal::TableCheck> salvaged = internal::SalvageTables(
      dir, (std::filesystem::path(dir) / "lost").string(), config->options);
  if (!salvaged.ok()) {
    env->UnlockFile(lock);
    return salvaged.status();
  }
  RepairReport report;
  report.damaged_tables = Describe(*salvaged);
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
  TALLY_RETURN_IF_ERROR(RebuildDerivedRecords(dir, db.get(), *backend, options,
                                              keyspaces, &report));
  // The damage a running store reported is what the salvage mended.
  std::filesystem::remove(std::filesystem::path(dir) / kTablesDamagedFile, ec);
  return report;
}

bool TablesReportedDamaged(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::exists(
      std::filesystem::path(dir) / kTablesDamagedFile, ec);
}

}  // namespace storage
}  // namespace tally
