// WorkerPool: a fixed number of threads running queued tasks.
//
// tallyd has one pool for all blocking work — store scans behind RPCs and
// anti-entropy sessions — so concurrency stays bounded however many peers
// and keyspaces there are (seed 000's lesson: one pool, not a thread per
// table). The queue is bounded too: a full queue refuses work, and the
// caller answers RESOURCE_EXHAUSTED instead of piling up.
//
//   WorkerPool pool(/*threads=*/4, /*max_queued=*/256);
//   if (!pool.Schedule([] { ... })) { /* overloaded */ }
//
// Thread-safe. The destructor runs every queued task, then joins.
#ifndef TALLY_NODE_WORKER_POOL_H_
#define TALLY_NODE_WORKER_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tally {
namespace node {

class WorkerPool {
 public:
  // REQUIRES: threads >= 1, max_queued >= 1.
  WorkerPool(int threads, size_t max_queued);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `task`. Returns false, without queueing, when the queue is full
  // or the pool is shutting down.
  bool Schedule(std::function<void()> task) ABSL_LOCKS_EXCLUDED(mu_);

  // Tasks queued and not yet started.
  size_t queued() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);

  const size_t max_queued_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_WORKER_POOL_H_
