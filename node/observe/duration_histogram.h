// DurationHistogram: how long things took, in fixed buckets, as a
// Prometheus histogram keeps it — for the sessions with each peer
// (tally_session_duration_seconds).
//
//   DurationHistogram h(DurationHistogram::SessionBounds());
//   h.Add(absl::Seconds(3));
//   h.ToProto(status.mutable_session_seconds());
//
// Thread-compatible: the owner locks.
#ifndef TALLY_NODE_OBSERVE_DURATION_HISTOGRAM_H_
#define TALLY_NODE_OBSERVE_DURATION_HISTOGRAM_H_

#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "tally/v1/tally.pb.h"

namespace tally {
namespace node {

class DurationHistogram {
 public:
  // Upper bounds in seconds for anti-entropy sessions: from an idle
  // session's ~10 ms to a bootstrap's half hour.
  static std::vector<double> SessionBounds();

  // `upper_bounds` ascending, in seconds.
  explicit DurationHistogram(std::vector<double> upper_bounds);

  // Counts `d` in the first bucket whose bound is >= d (a negative duration
  // counts as zero).
  void Add(absl::Duration d);

  void ToProto(::tally::v1::DurationHistogram* out) const;

 private:
  std::vector<double> upper_bounds_;
  std::vector<uint64_t> counts_;  // one more than the bounds: +Inf
  double sum_seconds_ = 0;
  uint64_t count_ = 0;
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_OBSERVE_DURATION_HISTOGRAM_H_
