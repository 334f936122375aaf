#include "node/sync/bandwidth_limiter.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace tally {
namespace node {
namespace {

// What is left of a wait of `remaining` at `old_rate` once the rate is
// `new_rate`: the same bytes at the new pace (none when unlimited).
absl::Duration Rescale(absl::Duration remaining, double old_rate,
                       double new_rate) {
  if (remaining <= absl::ZeroDuration() || new_rate == 0 || old_rate == 0) {
    return absl::ZeroDuration();
  }
  return remaining * (old_rate / new_rate);
}

}  // namespace

BandwidthLimiter::BandwidthLimiter(double bytes_per_second)
    : bytes_per_second_(bytes_per_second) {}

absl::Duration BandwidthLimiter::Reserve(uint64_t bytes, absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (bytes_per_second_ == 0) return absl::ZeroDuration();  // unlimited
  // Time an idle node did not use is lost, but for one second's burst.
  const absl::Time start = std::max(next_free_, now - absl::Seconds(1));
  next_free_ =
      start + absl::Seconds(static_cast<double>(bytes) / bytes_per_second_);
  return std::max(absl::ZeroDuration(), next_free_ - now);
}

absl::Status BandwidthLimiter::Take(uint64_t bytes,
                                    const std::atomic<bool>* cancelled) {
  double rate = bytes_per_second();
  if (rate == 0) return absl::OkStatus();
  absl::Time until = absl::Now() + Reserve(bytes, absl::Now());
  // In small steps, so that a cancelled repair stops promptly and a new
  // rate applies to the rest of the wait.
  while (true) {
    const absl::Time now = absl::Now();
    const double current = bytes_per_second();
    if (current != rate) {
      until = now + Rescale(until - now, rate, current);
      rate = current;
    }
    if (now >= until) return absl::OkStatus();
    if (cancelled != nullptr && cancelled->load()) {
      return absl::CancelledError("cancelled while waiting for bandwidth");
    }
    absl::SleepFor(std::min(absl::Milliseconds(50), until - now));
  }
}

absl::Status BandwidthLimiter::SetBytesPerSecond(double bytes_per_second) {
  return SetBytesPerSecondAt(bytes_per_second, absl::Now());
}

absl::Status BandwidthLimiter::SetBytesPerSecondAt(double bytes_per_second,
                                                   absl::Time now) {
  if (!std::isfinite(bytes_per_second) || bytes_per_second < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "node bandwidth is %g bytes per second; it must be a finite number "
        ">= 0 (0: unlimited)",
        bytes_per_second));
  }
  absl::MutexLock lock(&mu_);
  if (bytes_per_second == 0) {
    next_free_ = absl::InfinitePast();
  } else if (next_free_ > now) {
    next_free_ =
        now + Rescale(next_free_ - now, bytes_per_second_, bytes_per_second);
  }
  bytes_per_second_ = bytes_per_second;
  return absl::OkStatus();
}

double BandwidthLimiter::bytes_per_second() const {
  absl::MutexLock lock(&mu_);
  return bytes_per_second_;
}

void BandwidthLimiter::FillStatus(v1::StatusResponse* response) {
  response->set_node_bandwidth_bytes_per_second(bytes_per_second());
}

}  // namespace node
}  // namespace tally
