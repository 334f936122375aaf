#include "storage/store.h"

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
#include "storage/internal/store_impl.h"
#include "storage/leveldb_config.h"
#include "tree/status_macros.h"

namespace tally {
namespace storage {
namespace {

using internal::Corrupt;
using internal::RowHeader;
using tree::HlcTimestamp;

}  // namespace

namespace internal {

absl::Status StoreImpl::ForEachStoredRow(
    const leveldb::Snapshot* snapshot, absl::string_view what,
    const std::function<void(absl::string_view row_key,
                             const RowHeader& header)>& fn) {
  leveldb::ReadOptions read;
  read.snapshot = snapshot;
  read.fill_cache = false;  // one pass over everything: keep the cache
  return ScanPrefix(
      *db_, read, TagPrefix(kRowTag), what,
      [&](absl::string_view row_key, absl::string_view value) -> absl::Status {
        RowHeader header;
        absl::string_view payload;
        if (!DecodeRowRecord(value, &header, &payload)) {
          // A damaged row that cannot be decoded is counted nowhere.
          if (IsDamaged(row_key)) return absl::OkStatus();
          return Corrupt("row", row_key);
        }
        fn(row_key, header);
        return absl::OkStatus();
      });
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
  absl::flat_hash_map<uint32_t, uint64_t> counts;
  TALLY_RETURN_IF_ERROR(ScanPrefix(
      *db_, read, TagPrefix(kOriginRowsTag), "reading rows per origin",
      [&](absl::string_view key, absl::string_view value) -> absl::Status {
        uint32_t origin_id;
        uint64_t rows;
        if (!ParseOriginRowsKey(key, &origin_id) ||
            !ParseFixed64Value(value, &rows)) {
          return Corrupt("rows per origin", key);
        }
        counts[origin_id] = rows;
        return absl::OkStatus();
      }));
  return counts;
}

HlcTimestamp StoreImpl::PhysicalNow() const {
  return HlcTimestamp::FromParts(clock_.PhysicalMillis(), 0);
}

}  // namespace internal

}  // namespace storage
}  // namespace tally
