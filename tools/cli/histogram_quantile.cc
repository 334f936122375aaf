#include "tools/cli/histogram_quantile.h"

#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace tally {
namespace cli {

absl::StatusOr<Quantile> HistogramQuantile(
    double q, const v1::DurationHistogram& histogram) {
  if (!(q >= 0 && q <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("quantile %g is not in [0, 1]", q));
  }
  const auto& bounds = histogram.upper_bounds();
  const auto& counts = histogram.counts();
  if (counts.empty() && bounds.empty()) {
    // No histogram at all (a node that sends none): nothing counted.
    return absl::FailedPreconditionError("the histogram counted nothing");
  }
  if (counts.size() != bounds.size() + 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the histogram has %d counts for %d bounds; expected one more "
        "(+Inf)",
        counts.size(), bounds.size()));
  }
  for (int i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i]) || bounds[i] < 0 ||
        (i > 0 && bounds[i] <= bounds[i - 1])) {
      return absl::InvalidArgumentError(
          "the histogram's bounds are not finite, ascending and >= 0");
    }
  }
  uint64_t total = 0;
  for (uint64_t c : counts) total += c;
  if (total == 0) {
    return absl::FailedPreconditionError("the histogram counted nothing");
  }
  const double rank = q * static_cast<double>(total);
  uint64_t before = 0;  // counted in the buckets below bucket i
  for (int i = 0; i < counts.size(); ++i) {
    const uint64_t in_bucket = counts[i];
    if (in_bucket == 0 || static_cast<double>(before + in_bucket) < rank) {
      before += in_bucket;
      continue;
    }
    if (i == bounds.size()) {
      // The +Inf bucket: only the last bound is known (none: 0).
      return Quantile{bounds.empty() ? 0.0 : bounds[bounds.size() - 1],
                      /*above_last_bound=*/true};
    }
    const double lower = i == 0 ? 0.0 : bounds[i - 1];
    const double share =
        (rank - static_cast<double>(before)) / static_cast<double>(in_bucket);
    return Quantile{lower + (bounds[i] - lower) * share, false};
  }
  // Unreachable: the last non-empty bucket reaches q * total <= total.
  return absl::InternalError("no bucket holds the quantile");
}

}  // namespace cli
}  // namespace tally
