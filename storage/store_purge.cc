// StoreImpl::PurgeTombstones: removes tombstones that every peer has seen
// (storage/store.h).
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
#include "storage/internal/prefix_scan.h"
#include "storage/internal/records.h"
#include "storage/internal/slice.h"
#include "storage/internal/store_impl.h"
#include "storage/leveldb_config.h"
#include "storage/store.h"
#include "tree/status_macros.h"

namespace tally {
namespace storage {
namespace {

using internal::Corrupt;
using internal::FromLevelDb;
using internal::RowHeader;
using tree::HlcTimestamp;
using tree::Version;

}  // namespace

namespace internal {

absl::StatusOr<uint64_t> StoreImpl::PurgeTombstones(tree::HlcTimestamp before,
                                                    size_t limit) {
  // From here on, tombstones this old that arrive for absent keys are
  // dropped; the ones stored are erased below.
  uint64_t horizon = purged_before_.load();
  while (horizon < before.raw() &&
         !purged_before_.compare_exchange_weak(horizon, before.raw())) {
  }
  const std::string end = internal::TombstoneKey(before, "");
  std::vector<Mutation> erases;
  // Index records visited: removed once the erases are committed (a
  // record whose row is no longer that tombstone is stale).
  leveldb::WriteBatch visited;
  TALLY_RETURN_IF_ERROR(ScanPrefix(
      *db_, leveldb::ReadOptions(), TagPrefix(kTombstoneTag),
      "reading tombstones",
      [&](absl::string_view index_key,
          absl::string_view value) -> absl::StatusOr<bool> {
        if (index_key >= absl::string_view(end) || erases.size() >= limit) {
          return false;
        }
        ParsedTombstoneKey index;
        ParsedRowKey row;
        HlcTimestamp tombstone;
        if (!ParseTombstoneKey(index_key, &index) ||
            !ParseRowKey(index.row_key, &row) || row.key.empty() ||
            !DecodeTombstoneValue(value, &tombstone)) {
          return Corrupt("tombstone index", index_key);
        }
        const absl::string_view row_key = index.row_key;
        // A damaged row waits for a peer's copy, which brings its own
        // record.
        if (IsDamaged(row_key)) return true;
        visited.Delete(leveldb::Slice(index_key.data(), index_key.size()));
        std::string record;
        const leveldb::Status s =
            db_->Get(leveldb::ReadOptions(), std::string(row_key), &record);
        if (s.IsNotFound()) return true;  // erased since
        TALLY_RETURN_IF_ERROR(FromLevelDb(s, "reading a tombstone"));
        RowHeader header;
        absl::string_view payload;
        if (!DecodeRowRecord(record, &header, &payload)) {
          return Corrupt("row", row_key);
        }
        // Written again since (and maybe deleted again: that tombstone has
        // its own, later, record).
        if (!header.deleted || header.timestamp != tombstone) return true;
        Mutation m;
        const Keyspace* ks = catalogue_.Find(KeyspaceId(row.keyspace_id));
        if (ks == nullptr) return Corrupt("row", row_key);
        m.keyspace = ks->name;
        m.key = std::string(row.key);
        m.erase = true;
        m.version = Version{header.timestamp, OriginName(header.origin_id)};
        erases.push_back(std::move(m));
        return true;
      }));
  uint64_t purged = 0;
  for (size_t i = 0; i < erases.size(); i += options_.max_batch_mutations) {
    WriteRequest request;
    request.mode = ApplyMode::kPurgeTombstones;
    const size_t n = std::min(options_.max_batch_mutations, erases.size() - i);
    request.mutations.assign(std::make_move_iterator(erases.begin() + i),
                             std::make_move_iterator(erases.begin() + i + n));
    TALLY_ASSIGN_OR_RETURN(WriteResult result, Write(std::move(request)));
    for (bool applied : result.applied) purged += applied ? 1 : 0;
  }
  // After the erases: a crash before this leaves records the next purge
  // finds stale, never a tombstone without one. Through WriteToLevelDb like
  // every write while the store is open: after a failed append LevelDB's
  // log writer is out of step with its file, and anything it appends then
  // (this runs every maintenance interval, even with nothing to remove)
  // makes the next open refuse the log as damaged.
  TALLY_RETURN_IF_ERROR(WriteToLevelDb(&visited, options_.sync,
                                       "removing purged tombstones' index"));
  return purged;
}

}  // namespace internal
}  // namespace storage
}  // namespace tally
