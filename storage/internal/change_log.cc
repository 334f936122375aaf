#include "storage/internal/change_log.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "storage/internal/coding.h"
#include "storage/internal/leveldb_status.h"
#include "storage/internal/prefix_scan.h"
#include "storage/internal/store_impl.h"
#include "tree/status_macros.h"

namespace tally {
namespace storage {
namespace internal {

void ChangeLog::Recover(Sequence last_sequence, Sequence trimmed_through) {
  absl::MutexLock lock(&mu_);
  last_sequence_ = last_sequence;
  trimmed_through_ = trimmed_through;
}

Sequence ChangeLog::last_sequence() const {
  absl::MutexLock lock(&mu_);
  return last_sequence_;
}

Sequence ChangeLog::first_sequence() const {
  absl::MutexLock lock(&mu_);
  return trimmed_through_ + 1;
}

void ChangeLog::Committed(Sequence last) {
  {
    absl::MutexLock lock(&mu_);
    if (last == last_sequence_) return;
    last_sequence_ = last;
  }
  absl::MutexLock lock(&listeners_mu_);
  for (const auto& [id, listener] : listeners_) listener(last);
}

absl::Status ChangeLog::CheckRetained(Sequence after) const {
  absl::MutexLock lock(&mu_);
  if (after < trimmed_through_) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "position %d is older than the retained change log, which starts "
        "at %d",
        after, trimmed_through_ + 1));
  }
  return absl::OkStatus();
}

absl::Status ChangeLog::Read(
    Sequence after, size_t limit,
    absl::FunctionRef<absl::Status(Sequence, const ChangeRecord&)> fn) const {
  TALLY_RETURN_IF_ERROR(CheckRetained(after));
  size_t read = 0;
  TALLY_RETURN_IF_ERROR(
      ScanPrefix(*db_, leveldb::ReadOptions(), TagPrefix(kChangeTag),
                 ChangeKey(after + 1), "reading the change log",
                 [&](absl::string_view key,
                     absl::string_view value) -> absl::StatusOr<bool> {
                   if (read >= limit) return false;
                   ChangeRecord change;
                   Sequence sequence;
                   if (!ParseChangeKey(key, &sequence) ||
                       !DecodeChangeRecord(value, &change)) {
                     return Corrupt("change", key);
                   }
                   TALLY_RETURN_IF_ERROR(fn(sequence, change));
                   ++read;
                   return true;
                 }));
  // A trim that started meanwhile may have removed entries under the
  // iterator.
  return CheckRetained(after);
}

absl::StatusOr<uint64_t> ChangeLog::Trim(Sequence through,
                                         const TrimHooks& hooks) {
  absl::MutexLock trim_lock(&trim_mu_);
  Sequence start;
  {
    absl::MutexLock lock(&mu_);
    through = std::min(through, last_sequence_);
    start = trimmed_through_;
  }
  if (through <= start) return 0;
  TALLY_RETURN_IF_ERROR(hooks.before_trim(through));
  constexpr Sequence kEntriesPerBatch = 10'000;
  for (Sequence first = start + 1; first <= through;) {
    const Sequence last = std::min(through, first + kEntriesPerBatch - 1);
    leveldb::WriteBatch batch;
    for (Sequence s = first; s <= last; ++s) batch.Delete(ChangeKey(s));
    batch.Put(TaggedKey(kMetaTag, kMetaTrimmedThrough), Fixed64String(last));
    {
      absl::MutexLock lock(&mu_);
      trimmed_through_ = last;
    }
    TALLY_RETURN_IF_ERROR(hooks.write(&batch));
    first = last + 1;
  }
  return through - start;
}

int ChangeLog::AddListener(ChangeListener listener) {
  absl::MutexLock lock(&listeners_mu_);
  const int id = next_listener_id_++;
  listeners_[id] = std::move(listener);
  return id;
}

void ChangeLog::RemoveListener(int id) {
  absl::MutexLock lock(&listeners_mu_);
  listeners_.erase(id);
}

}  // namespace internal
}  // namespace storage
}  // namespace tally
