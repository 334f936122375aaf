// Inspecting a data directory before Store::Open, and the advice every
// "the store is damaged" error ends with. Implemented in
// storage/store_repair.cc beside RepairStore (storage/store.h).
#ifndef TALLY_STORAGE_INTERNAL_REPAIR_H_
#define TALLY_STORAGE_INTERNAL_REPAIR_H_

#include <string>

#include "absl/status/statusor.h"
#include "storage/store_types.h"

namespace tally {
namespace storage {
namespace internal {

// What a data directory holds, as far as Open is concerned.
enum class DirectoryState { kEmpty, kStore };

// A new random epoch, never 0: a new store's, or a recovered one's whose
// epoch record was lost.
Epoch NewEpoch();

// How an operator recovers the store in `dir`: one sentence to end an error.
std::string RecoveryAdvice(const std::string& dir);

// Refuses what LevelDB would silently make worse: creating a store over the
// files of another (CURRENT missing), and opening a store whose every log is
// gone (LevelDB always keeps one; without it, the last writes are lost and
// the store would look sound).
absl::StatusOr<DirectoryState> InspectDirectory(const std::string& dir);

}  // namespace internal
}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_INTERNAL_REPAIR_H_
