// Converts LevelDB statuses at the storage boundary: NotFound -> kNotFound,
// Corruption -> kDataLoss, IOError -> kUnavailable, the rest -> kInternal.
#ifndef TALLY_STORAGE_INTERNAL_LEVELDB_STATUS_H_
#define TALLY_STORAGE_INTERNAL_LEVELDB_STATUS_H_

#include <leveldb/status.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace tally {
namespace storage {
namespace internal {

inline absl::Status FromLevelDb(const leveldb::Status& s,
                                absl::string_view context) {
  if (s.ok()) return absl::OkStatus();
  const std::string message = absl::StrCat(context, ": ", s.ToString());
  if (s.IsNotFound()) return absl::NotFoundError(message);
  if (s.IsCorruption()) return absl::DataLossError(message);
  if (s.IsIOError()) return absl::UnavailableError(message);
  if (s.IsInvalidArgument()) return absl::InvalidArgumentError(message);
  return absl::InternalError(message);
}

}  // namespace internal
}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_INTERNAL_LEVELDB_STATUS_H_
