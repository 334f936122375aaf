// StoreImpl's change log: reading, trimming and change listeners
// (storage/store.h).
#include <leveldb/db.h>
#include <leveldb/env.h>
#include <leveldb/write_batch.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "storage/internal/coding.h"
#include "storage/internal/leveldb_status.h"
#include "storage/internal/prefix_scan.h"
#include "storage/internal/records.h"
#include "storage/internal/repair.h"
#include "storage/internal/slice.h"
#include "storage/internal/store_impl.h"
#include "storage/leveldb_config.h"
#include "storage/store.h"
#include "storage/store_tree_view.h"
#include "tree/status_macros.h"

namespace tally {
namespace storage {
namespace {

using internal::Corrupt;
using internal::DirectoryState;
using internal::Fixed32String;
using internal::Fixed64String;
using internal::FromLevelDb;
using internal::InspectDirectory;
using internal::kLocalOriginId;
using internal::RecoveryAdvice;
using internal::RowHeader;
using tree::Digest128;
using tree::HlcTimestamp;
using tree::NodeRef;
using tree::Token;
using tree::Version;

}  // namespace

namespace internal {

absl::StatusOr<std::vector<ChangeEntry>> StoreImpl::ReadChanges(Sequence after,
                                                                size_t limit) {
  auto check_retained = [&]() -> absl::Status {
    absl::MutexLock lock(&mu_);
    if (after < trimmed_through_) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "position %d is older than the retained change log, which starts "
          "at %d",
          after, trimmed_through_ + 1));
    }
    return absl::OkStatus();
  };
  TALLY_RETURN_IF_ERROR(check_retained());
  std::vector<ChangeEntry> out;
  TALLY_RETURN_IF_ERROR(
      ScanPrefix(*db_, leveldb::ReadOptions(), TagPrefix(kChangeTag),
                 ChangeKey(after + 1), "reading the change log",
                 [&](absl::string_view key,
                     absl::string_view value) -> absl::StatusOr<bool> {
                   if (out.size() >= limit) return false;
                   ChangeRecord change;
                   ChangeEntry entry;
                   if (!ParseChangeKey(key, &entry.sequence) ||
                       !DecodeChangeRecord(value, &change)) {
                     return Corrupt("change", key);
                   }
                   entry.version.timestamp = change.timestamp;
                   entry.version.origin = OriginName(change.origin_id);
                   entry.deleted = change.deleted;
                   entry.erased = change.erased;
                   entry.key = std::string(change.key);
                   {
                     absl::MutexLock lock(&mu_);
                     auto ks = keyspaces_by_id_.find(change.keyspace_id);
                     if (ks == keyspaces_by_id_.end()) {
                       return Corrupt("change (unknown keyspace)", key);
                     }
                     entry.keyspace = ks->second->name;
                   }
                   if (entry.version.origin.empty()) {
                     return Corrupt("change (unknown origin)", key);
                   }
                   out.push_back(std::move(entry));
                   return true;
                 }));
  // A trim that started meanwhile may have removed entries under the
  // iterator.
  TALLY_RETURN_IF_ERROR(check_retained());
  return out;
}

absl::StatusOr<uint64_t> StoreImpl::TrimChangeLog(Sequence through) {
  absl::MutexLock trim_lock(&trim_mu_);
  Sequence start;
  bool checkpoint_needed;
  {
    absl::MutexLock lock(&mu_);
    through = std::min(through, last_sequence_);
    start = trimmed_through_;
    checkpoint_needed = through > leaves_sequence_;
  }
  if (through <= start) return 0;
  if (checkpoint_needed) {
    // An open replays the entries after the leaf checkpoint: they must
    // stay until a checkpoint covers them.
    absl::MutexLock commit_lock(&commit_mu_);
    TALLY_RETURN_IF_ERROR(CheckpointLeaves());
  }
  constexpr Sequence kEntriesPerBatch = 10'000;
  for (Sequence first = start + 1; first <= through;) {
    const Sequence last = std::min(through, first + kEntriesPerBatch - 1);
    leveldb::WriteBatch batch;
    for (Sequence s = first; s <= last; ++s) {
      batch.Delete(internal::ChangeKey(s));
    }
    batch.Put(
        internal::TaggedKey(internal::kMetaTag, internal::kMetaTrimmedThrough),
        Fixed64String(last));
    {
      absl::MutexLock lock(&mu_);
      trimmed_through_ = last;
    }
    TALLY_RETURN_IF_ERROR(
        WriteToLevelDb(&batch, options_.sync, "trimming the change log"));
    first = last + 1;
  }
  return through - start;
}

int StoreImpl::AddChangeListener(ChangeListener listener) {
  absl::MutexLock lock(&listeners_mu_);
  const int id = next_listener_id_++;
  listeners_[id] = std::move(listener);
  return id;
}

void StoreImpl::RemoveChangeListener(int id) {
  absl::MutexLock lock(&listeners_mu_);
  listeners_.erase(id);
}

}  // namespace internal
}  // namespace storage
}  // namespace tally
