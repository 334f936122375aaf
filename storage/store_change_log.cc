// StoreImpl's change log: reading, trimming and change listeners
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
#include "storage/internal/store_impl.h"
#include "storage/leveldb_config.h"
#include "storage/store.h"
#include "tree/status_macros.h"

namespace tally {
namespace storage {
namespace {

using internal::Corrupt;

}  // namespace

namespace internal {

absl::StatusOr<std::vector<ChangeEntry>> StoreImpl::ReadChanges(Sequence after,
                                                                size_t limit) {
  std::vector<ChangeEntry> out;
  TALLY_RETURN_IF_ERROR(change_log_.Read(
      after, limit,
      [&](Sequence sequence, const ChangeRecord& change) -> absl::Status {
        ChangeEntry entry;
        entry.sequence = sequence;
        const uint32_t ks_id = change.keyspace_id;
        entry.version.timestamp = change.timestamp;
        entry.version.origin = OriginName(change.origin_id);
        entry.deleted = change.deleted;
        entry.erased = change.erased;
        entry.key = std::string(change.key);
        if (const Keyspace* ks = catalogue_.Find(KeyspaceId(ks_id));
            ks != nullptr) {
          entry.keyspace = ks->name;
        } else {
          // A keyspace dropped since: its rows were erased, and so is
          // every change to them.
          entry.keyspace = catalogue_.DroppedName(KeyspaceId(ks_id));
          if (entry.keyspace.empty()) {
            return Corrupt("change (unknown keyspace)", ChangeKey(sequence));
          }
          entry.erased = true;
        }
        if (entry.version.origin.empty()) {
          return Corrupt("change (unknown origin)", ChangeKey(sequence));
        }
        out.push_back(std::move(entry));
        return absl::OkStatus();
      }));
  return out;
}

absl::StatusOr<uint64_t> StoreImpl::TrimChangeLog(Sequence through) {
  // An open replays the entries after the leaf checkpoint: they must stay
  // until a checkpoint covers them.
  auto checkpoint_through = [this](Sequence through) -> absl::Status {
    if (through <= leaf_checkpoints_.sequence()) return absl::OkStatus();
    absl::MutexLock commit_lock(&commit_mu_);
    return CheckpointLeaves();
  };
  auto write = [this](leveldb::WriteBatch* batch) {
    return WriteToLevelDb(batch, options_.sync, "trimming the change log");
  };
  return change_log_.Trim(through,
                          ChangeLog::TrimHooks{checkpoint_through, write});
}

int StoreImpl::AddChangeListener(ChangeListener listener) {
  return change_log_.AddListener(std::move(listener));
}

void StoreImpl::RemoveChangeListener(int id) { change_log_.RemoveListener(id); }

}  // namespace internal
}  // namespace storage
}  // namespace tally
