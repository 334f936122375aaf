// ChangeLog: the bounds of the store's change log, reading it, trimming it,
// and the listeners told when it grows.
//
// The entries themselves ('C' records, internal/records.h) are written by
// the group commit, in the commit's own batch; the log learns of them once
// that batch is durable (Committed), and only then tells its listeners and
// lets readers see them. Trimming removes entries from the front, in
// batches, advancing the retained start before each batch so that a reader
// never misses an entry without being told.
//
//   ChangeLog log(db);
//   log.Recover(last_sequence, trimmed_through);        // at open
//   int id = log.AddListener([](Sequence last) { Wake(last); });
//   ... commit writes 'C' records through 7 ...
//   log.Committed(7);                                   // calls the listener
//   TALLY_RETURN_IF_ERROR(log.Read(0, 100, [](Sequence s, const ChangeRecord&
//   c) {
//     return Send(s, c);
//   }));
//
// Thread-safe. Listeners are called under their own lock (listeners_mu_),
// so that once RemoveListener returns a listener is never called again; a
// listener must therefore not add or remove listeners.
#ifndef TALLY_STORAGE_INTERNAL_CHANGE_LOG_H_
#define TALLY_STORAGE_INTERNAL_CHANGE_LOG_H_

#include <leveldb/db.h>
#include <leveldb/write_batch.h>

#include <cstddef>
#include <cstdint>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "storage/internal/records.h"
#include "storage/internal/slice.h"
#include "storage/store_types.h"

namespace tally {
namespace storage {
namespace internal {

class ChangeLog {
 public:
  // `db` holds the log and must outlive this object.
  explicit ChangeLog(leveldb::DB* db) : db_(db) {}
  ChangeLog(const ChangeLog&) = delete;
  ChangeLog& operator=(const ChangeLog&) = delete;

  // Sets the bounds read from the store's metadata. Called once, at open,
  // before any other method.
  void Recover(Sequence last_sequence, Sequence trimmed_through)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The last committed entry (0: none yet).
  Sequence last_sequence() const ABSL_LOCKS_EXCLUDED(mu_);
  // The first retained entry: trimmed_through() + 1.
  Sequence first_sequence() const ABSL_LOCKS_EXCLUDED(mu_);

  // After a commit whose batch wrote the entries up to `last` is durable:
  // they become readable, and every listener is called with `last` if the
  // log grew.
  // REQUIRES: `last` >= last_sequence(); commits call this in order.
  void Committed(Sequence last) ABSL_LOCKS_EXCLUDED(mu_, listeners_mu_);

  // Calls `fn(sequence, change)` for the entries after `after`, in order,
  // at most `limit` of them, until `fn` fails; returns its error. `change`
  // points into a buffer valid only during the call. kFailedPrecondition
  // when `after` is older than the retained log (checked before and after
  // reading: a trim running meanwhile may remove entries under the read);
  // kDataLoss for an entry that does not parse.
  absl::Status Read(
      Sequence after, size_t limit,
      absl::FunctionRef<absl::Status(Sequence, const ChangeRecord&)> fn) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Hooks a trim calls, which the log cannot do itself.
  struct TrimHooks {
    // Called before anything is removed, with the last entry the trim will
    // remove: makes the store's state independent of those entries (the
    // leaf checkpoint must cover them, since an open replays the entries
    // after it).
    absl::FunctionRef<absl::Status(Sequence through)> before_trim;
    // Writes one batch of the trim durably (the store's one write path).
    absl::FunctionRef<absl::Status(leveldb::WriteBatch*)> write;
  };
  // Removes the entries up to `through` (at most up to last_sequence()),
  // one trim at a time, in batches of a bounded size; returns how many
  // were removed. On an error the entries of the batches written so far
  // stay removed.
  absl::StatusOr<uint64_t> Trim(Sequence through, const TrimHooks& hooks)
      ABSL_LOCKS_EXCLUDED(trim_mu_, mu_);

  // Registers a listener; returns its id, for RemoveListener.
  int AddListener(ChangeListener listener) ABSL_LOCKS_EXCLUDED(listeners_mu_);
  // Once this returns, the listener is never called again.
  void RemoveListener(int id) ABSL_LOCKS_EXCLUDED(listeners_mu_);

 private:
  // kFailedPrecondition if entries after `after` were trimmed.
  absl::Status CheckRetained(Sequence after) const ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  leveldb::DB* const db_;

  // One trim at a time.
  absl::Mutex trim_mu_ ABSL_ACQUIRED_BEFORE(mu_);

  mutable absl::Mutex mu_;
  Sequence last_sequence_ ABSL_GUARDED_BY(mu_) = 0;
  // Entries up to here are gone (or being removed: it is set before the
  // batch that removes them, so readers never miss one).
  Sequence trimmed_through_ ABSL_GUARDED_BY(mu_) = 0;

  absl::Mutex listeners_mu_;
  std::map<int, ChangeListener> listeners_ ABSL_GUARDED_BY(listeners_mu_);
  int next_listener_id_ ABSL_GUARDED_BY(listeners_mu_) = 1;
};

}  // namespace internal
}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_INTERNAL_CHANGE_LOG_H_
