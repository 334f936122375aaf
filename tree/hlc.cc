#include "tree/hlc.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tally {
namespace tree {
namespace {

uint64_t SystemMillis() {
  return static_cast<uint64_t>(absl::ToUnixMillis(absl::Now()));
}

}  // namespace

std::string HlcTimestamp::DebugString() const {
  const absl::Time t =
      absl::FromUnixMillis(static_cast<int64_t>(physical_millis()));
  return absl::StrCat(
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone()), "+",
      counter());
}

HybridClock::HybridClock(Options options)
    : max_forward_skew_(options.max_forward_skew),
      physical_clock_(options.physical_clock ? std::move(options.physical_clock)
                                             : PhysicalClock(SystemMillis)) {}

HlcTimestamp HybridClock::Now() {
  const uint64_t physical =
      std::min(physical_clock_(), HlcTimestamp::kMaxPhysicalMillis);
  absl::MutexLock lock(&mu_);
  if (physical > latest_.physical_millis()) {
    latest_ = HlcTimestamp::FromParts(physical, 0);
  } else if (latest_.counter() < HlcTimestamp::kMaxCounter) {
    latest_ = HlcTimestamp::FromRaw(latest_.raw() + 1);
  } else {
    // 65536 timestamps in one millisecond: borrow the next millisecond
    // rather than wrap, so monotonicity holds.
    latest_ = HlcTimestamp::FromParts(latest_.physical_millis() + 1, 0);
  }
  return latest_;
}

uint64_t HybridClock::PhysicalMillis() const {
  return std::min(physical_clock_(), HlcTimestamp::kMaxPhysicalMillis);
}

absl::Status HybridClock::Check(HlcTimestamp remote) const {
  const uint64_t physical = physical_clock_();
  const uint64_t limit_ms =
      static_cast<uint64_t>(absl::ToInt64Milliseconds(max_forward_skew_));
  if (remote.physical_millis() > physical &&
      remote.physical_millis() - physical > limit_ms) {
    return absl::OutOfRangeError(absl::StrFormat(
        "remote timestamp %s is %d ms ahead of the local clock (%s); the "
        "limit is %d ms",
        remote.DebugString(), remote.physical_millis() - physical,
        HlcTimestamp::FromParts(physical, 0).DebugString(), limit_ms));
  }
  return absl::OkStatus();
}

absl::Status HybridClock::Observe(HlcTimestamp remote) {
  absl::Status status = Check(remote);
  if (!status.ok()) return status;
  absl::MutexLock lock(&mu_);
  if (latest_ < remote) latest_ = remote;
  return absl::OkStatus();
}

HlcTimestamp HybridClock::Latest() const {
  absl::MutexLock lock(&mu_);
  return latest_;
}

}  // namespace tree
}  // namespace tally
