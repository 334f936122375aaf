// WriteQueue: LevelDB's writer queue with group commit, for any kind of
// write (RocksDB's WriteThread is the same idea).
//
// Writers join the queue in arrival order. The writer at the front is the
// leader: it takes the writers queued behind it, as many as fit the
// limits, commits them as one group by calling its commit function, and
// hands the front of the queue to the next writer. Every writer of the
// group returns the status of that one commit. The queue knows nothing
// about what a writer carries: callers derive from WriteQueue::Writer and
// the commit function casts back.
//
//   struct PendingWrite : WriteQueue::Writer {
//     using Writer::Writer;
//     Request* request;
//     Result result;  // set by the leader's commit
//   };
//   PendingWrite w(n, bytes);
//   w.request = &request;
//   absl::Status s = queue.Write(&w, [&](absl::Span<Writer* const> group) {
//     // Called on the leader's thread, one group at a time.
//     for (Writer* each : group) static_cast<PendingWrite*>(each)->...;
//     return CommitAll(group);
//   });
//
// Thread-safe. Groups commit one at a time and in queue order: a group's
// commit function returns before the next group's is called.
#ifndef TALLY_STORAGE_INTERNAL_WRITE_QUEUE_H_
#define TALLY_STORAGE_INTERNAL_WRITE_QUEUE_H_

#include <cstddef>
#include <deque>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace tally {
namespace storage {
namespace internal {

class WriteQueue {
 public:
  // How much one group may hold. A writer larger than the limits on its
  // own still commits, alone; so does a writer made `alone`.
  struct Limits {
    size_t max_items = 0;
    size_t max_bytes = 0;
  };

  // One writer's place in the queue. Owned by the caller (usually on its
  // stack); it must stay alive until Write returns.
  class Writer {
   public:
    // `items` and `bytes` are what the writer counts against the limits.
    // An `alone` writer is committed in a group of its own, whatever the
    // limits (a commit whose checks assume no other write beside it).
    Writer(size_t items, size_t bytes, bool alone = false)
        : items_(items), bytes_(bytes), alone_(alone) {}
    Writer(const Writer&) = delete;
    Writer& operator=(const Writer&) = delete;

    size_t items() const { return items_; }
    size_t bytes() const { return bytes_; }
    bool alone() const { return alone_; }

   private:
    friend class WriteQueue;
    const size_t items_;
    const size_t bytes_;
    const bool alone_;
    // Guarded by the queue's mu_ (not annotated: a field cannot name the
    // mutex of another object).
    bool done_ = false;
    absl::Status status_;
    absl::CondVar cv_;
  };

  // Commits a group: the leader first, then its followers in queue order.
  // Called without the queue's lock.
  using CommitFn = absl::FunctionRef<absl::Status(absl::Span<Writer* const>)>;

  explicit WriteQueue(Limits limits) : limits_(limits) {}
  WriteQueue(const WriteQueue&) = delete;
  WriteQueue& operator=(const WriteQueue&) = delete;

  // Queues `writer` and returns once the group holding it has committed:
  // the status `commit` returned for that group. If `writer` becomes a
  // leader, its own `commit` runs on this thread for the whole group;
  // otherwise another writer's commit function commits it and `commit` is
  // not called.
  // REQUIRES: `writer` is not queued already.
  absl::Status Write(Writer* writer, CommitFn commit) ABSL_LOCKS_EXCLUDED(mu_);

  // Writers queued, the group being committed included.
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // The leader's group: itself and the writers behind it, within limits_.
  void TakeGroup(std::vector<Writer*>* group) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const Limits limits_;

  mutable absl::Mutex mu_;
  std::deque<Writer*> writers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace internal
}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_INTERNAL_WRITE_QUEUE_H_
