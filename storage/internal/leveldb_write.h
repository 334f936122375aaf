// WriteBatchTo: one LevelDB write with the store's error conversion, for
// the writes made outside the commit path (a new store's identity, the
// migrations at open, repair). While a store is open, its writes go
// through StoreImpl::WriteToLevelDb, which also keeps the first failure.
#ifndef TALLY_STORAGE_INTERNAL_LEVELDB_WRITE_H_
#define TALLY_STORAGE_INTERNAL_LEVELDB_WRITE_H_

#include <leveldb/db.h>
#include <leveldb/write_batch.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "storage/internal/leveldb_status.h"

namespace tally {
namespace storage {
namespace internal {

// Writes `batch`, fsynced before it returns when `sync`. Returns LevelDB's
// error converted (FromLevelDb) with `what` as its context.
inline absl::Status WriteBatchTo(leveldb::DB& db, leveldb::WriteBatch* batch,
                                 bool sync, absl::string_view what) {
  leveldb::WriteOptions write;
  write.sync = sync;
  return FromLevelDb(db.Write(write, batch), what);
}

}  // namespace internal
}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_INTERNAL_LEVELDB_WRITE_H_
