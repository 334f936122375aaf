// FaultInjectionEnv: a leveldb::Env for tests that makes the disk fill up
// and the machine lose power, on the real file system underneath.
//
// LevelDB's own db/fault_injection_test.cc is the model. Files written
// through this Env count their bytes against a shared budget of free space:
// the append that crosses it writes the prefix that fits and fails with
// "No space left on device", as write(2) does, and every append after it
// fails until space is freed. The Env also remembers, per file, how much was
// synced, so that after the database is closed DropUnsyncedData() can cut
// every file back to what a power loss would have kept.
//
//   FaultInjectionEnv env;
//   options.env = &env;                   // StoreOptions::env
//   ... open, write ...
//   env.SetFreeBytes(100);                // the disk is nearly full
//   ... writes fail ...
//   env.SetFreeBytes(FaultInjectionEnv::kUnlimited);
//   ... close ...
//   env.DropUnsyncedData();               // then reopen and check
//
// Thread-safe. Only files created by NewWritableFile / NewAppendableFile
// are tracked; the info LOG is written through NewLogger and is not.
#ifndef TALLY_STORAGE_INTERNAL_FAULT_INJECTION_ENV_H_
#define TALLY_STORAGE_INTERNAL_FAULT_INJECTION_ENV_H_

#include <leveldb/env.h>

#include <cstdint>
#include <limits>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tally {
namespace storage {
namespace internal {

class FaultInjectionEnv : public leveldb::EnvWrapper {
 public:
  static constexpr uint64_t kUnlimited = std::numeric_limits<uint64_t>::max();

  FaultInjectionEnv() : leveldb::EnvWrapper(leveldb::Env::Default()) {}
  FaultInjectionEnv(const FaultInjectionEnv&) = delete;
  FaultInjectionEnv& operator=(const FaultInjectionEnv&) = delete;

  // Free space from now on: appends may write this many more bytes.
  void SetFreeBytes(uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  // Appends refused (wholly or in part) since the Env was made.
  uint64_t failed_appends() const ABSL_LOCKS_EXCLUDED(mu_);

  // Truncates every tracked file to the bytes it had synced: what survives
  // a power loss. REQUIRES: no database using this Env is open.
  leveldb::Status DropUnsyncedData() ABSL_LOCKS_EXCLUDED(mu_);

  leveldb::Status NewWritableFile(const std::string& fname,
                                  leveldb::WritableFile** result) override;
  leveldb::Status NewAppendableFile(const std::string& fname,
                                    leveldb::WritableFile** result) override;
  leveldb::Status RemoveFile(const std::string& fname) override;
  leveldb::Status RenameFile(const std::string& src,
                             const std::string& target) override;

  // For the files: takes up to `wanted` bytes of the free space; returns how
  // many it may write. A short answer means the disk is full.
  uint64_t Reserve(uint64_t wanted) ABSL_LOCKS_EXCLUDED(mu_);
  void RecordSynced(const std::string& fname, uint64_t size)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  leveldb::Status Track(const std::string& fname, uint64_t size,
                        leveldb::WritableFile** result);

  mutable absl::Mutex mu_;
  uint64_t free_bytes_ ABSL_GUARDED_BY(mu_) = kUnlimited;
  uint64_t failed_appends_ ABSL_GUARDED_BY(mu_) = 0;
  // Bytes synced per tracked file, by name.
  std::map<std::string, uint64_t> synced_ ABSL_GUARDED_BY(mu_);
};

}  // namespace internal
}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_INTERNAL_FAULT_INJECTION_ENV_H_
