// StoreImpl::ScanIndex: the index records of a keyspace, without the
// backend's values (storage/store.h).
#include <leveldb/db.h>

#include "absl/strings/str_cat.h"
#include "storage/internal/snapshot_row_reader.h"
#include "storage/internal/store_impl.h"
#include "tree/status_macros.h"

namespace tally {
namespace storage {
namespace internal {

absl::Status StoreImpl::ScanIndex(
    absl::string_view keyspace,
    absl::FunctionRef<absl::Status(const IndexRecord&)> visit) {
  const Keyspace* ks = FindKeyspace(keyspace);
  if (ks == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("keyspace ", keyspace, " does not exist"));
  }
  const leveldb::Snapshot* snapshot = GetSnapshot();
  const absl::Status status = ScanRows(
      snapshot, ks->id.value(), tree::NodeRef{0, 0}, CacheFill::kNo,
      DamagedRows::kInclude, [&](const StoredRow& row) -> absl::StatusOr<bool> {
        IndexRecord record;
        record.key = row.key;
        record.version.timestamp = row.header.timestamp;
        record.version.origin = OriginName(row.header.origin_id);
        if (record.version.origin.empty()) {
          return absl::DataLossError(absl::StrCat(
              "a row of keyspace ", keyspace, " names origin id ",
              row.header.origin_id, ", which the origin table lacks"));
        }
        record.deleted = row.header.deleted;
        record.digest = row.header.digest;
        record.payload = row.payload;
        record.damaged = row.damaged;
        TALLY_RETURN_IF_ERROR(visit(record));
        return true;
      });
  ReleaseSnapshot(snapshot);
  return status;
}

}  // namespace internal
}  // namespace storage
}  // namespace tally
