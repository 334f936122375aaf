#include "node/observe/duration_histogram.h"

#include <algorithm>
#include <utility>

namespace tally {
namespace node {

std::vector<double> DurationHistogram::SessionBounds() {
  return {0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800};
}

DurationHistogram::DurationHistogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)),
      counts_(upper_bounds_.size() + 1, 0) {}

void DurationHistogram::Add(absl::Duration d) {
  const double seconds = std::max(0.0, absl::ToDoubleSeconds(d));
  const size_t bucket =
      std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), seconds) -
      upper_bounds_.begin();
  ++counts_[bucket];
  sum_seconds_ += seconds;
  ++count_;
}

void DurationHistogram::ToProto(::tally::v1::DurationHistogram* out) const {
  out->Clear();
  for (double bound : upper_bounds_) out->add_upper_bounds(bound);
  for (uint64_t count : counts_) out->add_counts(count);
  out->set_sum_seconds(sum_seconds_);
  out->set_count(count_);
}

}  // namespace node
}  // namespace tally
