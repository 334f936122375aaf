// HistogramQuantile: a quantile of a DurationHistogram (bucket counts, as
// PeerStatus.session_seconds carries them), estimated as Prometheus's
// histogram_quantile() does, so that `tally status` and a dashboard agree.
//
// The q-th quantile lies in the first bucket whose cumulative count reaches
// q * count; within it the durations are taken as spread evenly between the
// bucket's bounds (the first bucket starts at 0). A quantile in the +Inf
// bucket is only known to exceed the last bound: it is that bound, with
// `above_last_bound` set.
//
//   absl::StatusOr<Quantile> p90 = HistogramQuantile(0.9,
//   peer.session_seconds()); if (p90.ok()) std::cout << p90->seconds;
//
// Thread-safe: pure functions.
#ifndef TALLY_TOOLS_CLI_HISTOGRAM_QUANTILE_H_
#define TALLY_TOOLS_CLI_HISTOGRAM_QUANTILE_H_

#include "absl/status/statusor.h"
#include "tally/v1/tally.pb.h"

namespace tally {
namespace cli {

struct Quantile {
  double seconds = 0;
  // The quantile is beyond the last finite bound; `seconds` is that bound.
  bool above_last_bound = false;
};

// Returns kFailedPrecondition for a histogram with nothing counted (an
// empty message included), and
// kInvalidArgument for `q` outside [0, 1] or a malformed histogram (counts
// not one more than the bounds, bounds not ascending).
absl::StatusOr<Quantile> HistogramQuantile(
    double q, const ::tally::v1::DurationHistogram& histogram);

}  // namespace cli
}  // namespace tally

#endif  // TALLY_TOOLS_CLI_HISTOGRAM_QUANTILE_H_
