// WorkerPool: a fixed number of threads running queued tasks.
//
// tallyd has one pool for all blocking work — store scans behind RPCs and
// anti-entropy sessions — so concurrency stays bounded however many peers
// and keyspaces there are (one pool, not a thread per table: a thread per
// table stops scaling long before the tables do). The queue is bounded too: a
// full queue refuses work, and the caller answers RESOURCE_EXHAUSTED instead of
// piling up.
//
// Tasks come in two lanes. Control tasks (Status, Put, Get, Handshake,
// ...: short, and what an operator or a peer waits for) run first. Bulk
// tasks (a chunk of a Scan or FetchRows, a message of a Load or PushRows)
// run on at most threads - 1 threads at once, so a control task never
// waits for more than the control tasks ahead of it, whatever the bulk
// streams do. (With one thread, bulk tasks may use it.)
//
//   WorkerPool pool(/*threads=*/4, /*max_queued=*/256);
//   if (!pool.Schedule([] { ... })) { /* overloaded */ }
//   pool.Schedule([] { ... }, WorkerPool::Lane::kBulk);
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

  enum class Lane { kControl, kBulk };

  // Queues `task`. Returns false, without queueing, when the queue (both
  // lanes together) is full or the pool is shutting down.
  bool Schedule(std::function<void()> task, Lane lane = Lane::kControl)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Tasks queued and not yet started.
  size_t queued() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  bool HasRunnable() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_queued_;
  const int max_bulk_running_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> control_ ABSL_GUARDED_BY(mu_);
  std::deque<std::function<void()>> bulk_ ABSL_GUARDED_BY(mu_);
  int bulk_running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_WORKER_POOL_H_
