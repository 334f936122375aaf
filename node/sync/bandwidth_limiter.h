// BandwidthLimiter: one repair-traffic budget shared by every session and
// tool-driven repair of a node (tallyd --node-bandwidth), so that a node
// syncing with many peers at once stays under one limit instead of one
// limit per session.
//
// Callers take bytes as they move them; Take blocks until the node's
// schedule allows them: each take reserves `bytes / rate` seconds of the
// shared timeline after the reservations before it, so the node's repairs
// together average the rate. An idle node does not bank time (at most one
// second of burst). A rate of 0 means unlimited: Take returns at once.
//
// The rate can change while repairs run (SIGHUP reloads node-bandwidth):
// the bytes already reserved and not yet due are then paced at the new
// rate — waiters rescale what is left of their wait within 50 ms — so
// raising the limit (or lifting it, rate 0) frees them promptly and
// lowering it slows them down at once, not after the backlog.
//
//   BandwidthLimiter limit(50e6);  // bytes per second, over all repairs
//   TALLY_RETURN_IF_ERROR(limit.Take(bytes, &cancelled));
//   limit.SetBytesPerSecond(20e6);  // from another thread, any time
//
// Thread-safe.
#ifndef TALLY_NODE_SYNC_BANDWIDTH_LIMITER_H_
#define TALLY_NODE_SYNC_BANDWIDTH_LIMITER_H_

#include <atomic>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "node/observe/status_source.h"

namespace tally {
namespace node {

class BandwidthLimiter : public StatusSource {
 public:
  // REQUIRES: bytes_per_second >= 0 and finite (0: unlimited).
  explicit BandwidthLimiter(double bytes_per_second);

  // Waits until `bytes` more fit in the schedule. Returns kCancelled as soon
  // as `cancelled` (optional) turns true while it waits; the bytes stay
  // counted (they were moved).
  absl::Status Take(uint64_t bytes, const std::atomic<bool>* cancelled)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The reservation alone: how long a caller taking `bytes` at `now`
  // waits. For tests.
  absl::Duration Reserve(uint64_t bytes, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Changes the rate from now on (0: unlimited). What is reserved and not
  // yet due is rescaled to the new rate. Rejects a negative or non-finite
  // rate with kInvalidArgument, changing nothing.
  absl::Status SetBytesPerSecond(double bytes_per_second)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The same at `now`. For tests.
  absl::Status SetBytesPerSecondAt(double bytes_per_second, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The rate in force; 0 when unlimited.
  double bytes_per_second() const ABSL_LOCKS_EXCLUDED(mu_);

  // StatusSource: StatusResponse.node_bandwidth_bytes_per_second.
  void FillStatus(::tally::v1::StatusResponse* response) override
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  double bytes_per_second_ ABSL_GUARDED_BY(mu_);
  // The end of the last reservation on the shared timeline.
  absl::Time next_free_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_SYNC_BANDWIDTH_LIMITER_H_
