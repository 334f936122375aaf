// The migrations StoreImpl::Load runs on a store written by an older
// build, each once in the life of the store and each in one batch, so that
// a crash leaves it done or not begun (internal/records.h says what each
// marker record means):
//   BuildOriginRows        the per-origin row counts ('Q'), from the rows;
//   IndexTombstones        the tombstone index ('T'), from the rows;
//   MigrateTombstoneIndex  the index rekeyed from timestamp to arrival.
#include <leveldb/db.h>
#include <leveldb/write_batch.h>

#include <string>

#include "absl/strings/string_view.h"
#include "storage/internal/coding.h"
#include "storage/internal/leveldb_status.h"
#include "storage/internal/leveldb_write.h"
#include "storage/internal/prefix_scan.h"
#include "storage/internal/records.h"
#include "storage/internal/store_impl.h"
#include "tree/status_macros.h"

namespace tally {
namespace storage {
namespace internal {

using tree::HlcTimestamp;

absl::Status StoreImpl::BuildOriginRows() {
  std::string value;
  const leveldb::Status counted =
      db_->Get(leveldb::ReadOptions(), MetaKey(kMetaOriginRows), &value);
  if (!counted.IsNotFound()) {
    return FromLevelDb(counted, "reading the metadata");
  }
  TALLY_ASSIGN_OR_RETURN(auto counts, CountOriginRows(nullptr));
  leveldb::WriteBatch batch;
  for (const auto& [id, rows] : counts) {
    batch.Put(OriginRowsKey(id), Fixed64String(rows));
  }
  batch.Put(MetaKey(kMetaOriginRows), Fixed32String(1));
  return WriteBatchTo(*db_, &batch, /*sync=*/true,
                      "writing the rows per origin");
}

absl::Status StoreImpl::IndexTombstones() {
  // One pass over the rows; one batch, so that the index is complete or
  // absent. Their arrival is unknown: they count as arriving now, so they
  // are purged later than their age says, never earlier.
  const HlcTimestamp now = PhysicalNow();
  leveldb::WriteBatch batch;
  TALLY_RETURN_IF_ERROR(
      ForEachStoredRow(nullptr, "indexing tombstones",
                       [&](absl::string_view row_key, const RowHeader& header) {
                         if (header.deleted) {
                           batch.Put(TombstoneKey(now, row_key),
                                     EncodeTombstoneValue(header.timestamp));
                         }
                       }));
  batch.Put(MetaKey(kMetaTombstoneIndex), "");
  batch.Put(MetaKey(kMetaTombstoneArrival), "");
  return WriteBatchTo(*db_, &batch, /*sync=*/true, "indexing tombstones");
}

absl::Status StoreImpl::MigrateTombstoneIndex() {
  // One batch: the index is either all keyed by timestamp (empty values)
  // or all by arrival.
  const HlcTimestamp now = PhysicalNow();
  leveldb::WriteBatch batch;
  leveldb::ReadOptions read;
  read.fill_cache = false;
  TALLY_RETURN_IF_ERROR(ScanPrefix(
      *db_, read, TagPrefix(kTombstoneTag), "reading the tombstone index",
      [&](absl::string_view key, absl::string_view) -> absl::Status {
        // Keyed by the tombstone's timestamp: it becomes the value.
        ParsedTombstoneKey old;
        if (!ParseTombstoneKey(key, &old)) {
          return Corrupt("tombstone index", key);
        }
        batch.Delete(leveldb::Slice(key.data(), key.size()));
        batch.Put(TombstoneKey(now, old.row_key),
                  EncodeTombstoneValue(old.arrival));
        return absl::OkStatus();
      }));
  batch.Put(MetaKey(kMetaTombstoneArrival), "");
  return WriteBatchTo(*db_, &batch, /*sync=*/true,
                      "rewriting the tombstone index by arrival");
}

}  // namespace internal
}  // namespace storage
}  // namespace tally
