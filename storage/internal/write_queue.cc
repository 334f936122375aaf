#include "storage/internal/write_queue.h"

namespace tally {
namespace storage {
namespace internal {

void WriteQueue::TakeGroup(std::vector<Writer*>* group) const {
  mu_.AssertHeld();
  size_t items = 0;
  size_t bytes = 0;
  for (Writer* w : writers_) {
    if (!group->empty() && (group->front()->alone_ || w->alone_ ||
                            items + w->items_ > limits_.max_items ||
                            bytes + w->bytes_ > limits_.max_bytes)) {
      break;
    }
    items += w->items_;
    bytes += w->bytes_;
    group->push_back(w);
  }
}

absl::Status WriteQueue::Write(Writer* writer, CommitFn commit) {
  std::vector<Writer*> group;
  {
    absl::MutexLock lock(&mu_);
    writers_.push_back(writer);
    while (!writer->done_ && writer != writers_.front()) {
      writer->cv_.Wait(&mu_);
    }
    if (writer->done_) return writer->status_;
    TakeGroup(&group);
  }

  // The group stays at the front of the queue while it commits, so no
  // other writer leads meanwhile; writers arriving now queue behind it.
  const absl::Status status = commit(group);

  absl::MutexLock lock(&mu_);
  for (Writer* w : group) {
    writers_.pop_front();
    w->status_ = status;
    w->done_ = true;
    if (w != writer) w->cv_.Signal();
  }
  if (!writers_.empty()) writers_.front()->cv_.Signal();
  return status;
}

size_t WriteQueue::size() const {
  absl::MutexLock lock(&mu_);
  return writers_.size();
}

}  // namespace internal
}  // namespace storage
}  // namespace tally
