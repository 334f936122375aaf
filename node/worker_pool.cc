#include "node/worker_pool.h"

#include <algorithm>

namespace tally {
namespace node {

WorkerPool::WorkerPool(int threads, size_t max_queued)
    : max_queued_(max_queued), max_bulk_running_(std::max(1, threads - 1)) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

WorkerPool::~WorkerPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

bool WorkerPool::Schedule(std::function<void()> task, Lane lane) {
  absl::MutexLock lock(&mu_);
  if (stopping_ || control_.size() + bulk_.size() >= max_queued_) return false;
  (lane == Lane::kBulk ? bulk_ : control_).push_back(std::move(task));
  return true;
}

size_t WorkerPool::queued() const {
  absl::MutexLock lock(&mu_);
  return control_.size() + bulk_.size();
}

bool WorkerPool::HasRunnable() const {
  return !control_.empty() ||
         (!bulk_.empty() && bulk_running_ < max_bulk_running_);
}

void WorkerPool::Run() {
  while (true) {
    std::function<void()> task;
    bool bulk = false;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](WorkerPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            return p->HasRunnable() ||
                   (p->stopping_ && p->control_.empty() && p->bulk_.empty());
          },
          this));
      if (!HasRunnable()) return;  // stopping, and nothing left to run
      if (!control_.empty()) {
        task = std::move(control_.front());
        control_.pop_front();
      } else {
        task = std::move(bulk_.front());
        bulk_.pop_front();
        bulk = true;
        ++bulk_running_;
      }
    }
    task();
    if (bulk) {
      absl::MutexLock lock(&mu_);
      --bulk_running_;
    }
  }
}

}  // namespace node
}  // namespace tally
