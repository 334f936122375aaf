#include "node/bandwidth_limiter.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace tally {
namespace node {

BandwidthLimiter::BandwidthLimiter(double bytes_per_second)
    : bytes_per_second_(bytes_per_second) {}

absl::Duration BandwidthLimiter::Reserve(uint64_t bytes, absl::Time now) {
  absl::MutexLock lock(&mu_);
  // Time an idle node did not use is lost, but for one second's burst.
  const absl::Time start = std::max(next_free_, now - absl::Seconds(1));
  next_free_ =
      start + absl::Seconds(static_cast<double>(bytes) / bytes_per_second_);
  return std::max(absl::ZeroDuration(), next_free_ - now);
}

absl::Status BandwidthLimiter::Take(uint64_t bytes,
                                    const std::atomic<bool>* cancelled) {
  const absl::Time until = absl::Now() + Reserve(bytes, absl::Now());
  // In small steps, so that a cancelled repair stops promptly.
  while (absl::Now() < until) {
    if (cancelled != nullptr && cancelled->load()) {
      return absl::CancelledError("cancelled while waiting for bandwidth");
    }
    absl::SleepFor(std::min(absl::Milliseconds(50), until - absl::Now()));
  }
  return absl::OkStatus();
}

}  // namespace node
}  // namespace tally
