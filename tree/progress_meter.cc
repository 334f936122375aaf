#include "tree/progress_meter.h"

#include <algorithm>
#include <cassert>

#include "absl/strings/str_format.h"

namespace tally {
namespace tree {

ProgressMeter::ProgressMeter(absl::Time start, absl::Duration window)
    : start_(start), window_(window) {
  assert(window > absl::ZeroDuration());
  readings_.push_back({start, 0});
}

void ProgressMeter::Record(absl::Time now, uint64_t done) {
  if (done < readings_.back().done) {
    // The work started over: the old readings say nothing about it.
    start_ = now;
    readings_.clear();
    readings_.push_back({now, done});
    return;
  }
  if (readings_.size() >= 2 &&
      now - readings_[readings_.size() - 2].time < window_ / 32) {
    readings_.back() = {now, done};
  } else {
    readings_.push_back({now, done});
  }
  // Keep one reading at or before the window's start.
  const absl::Time cutoff = now - window_;
  while (readings_.size() >= 2 && readings_[1].time <= cutoff) {
    readings_.pop_front();
  }
}

ProgressEstimate ProgressMeter::Estimate(absl::Time now) const {
  ProgressEstimate e;
  e.done = readings_.back().done;
  e.total = total_;
  e.elapsed = std::max(absl::ZeroDuration(), now - start_);
  // The rate from the last reading at or before the window's start (the
  // first one while the window is younger than the work) up to now.
  const absl::Time cutoff = now - window_;
  const Reading* base = &readings_.front();
  for (const Reading& r : readings_) {
    if (r.time > cutoff) break;
    base = &r;
  }
  const double span = absl::ToDoubleSeconds(now - base->time);
  if (span > 0) e.rate = static_cast<double>(e.done - base->done) / span;
  if (!total_.has_value()) return e;
  const uint64_t total = *total_;
  e.fraction = total == 0 ? 1.0
                          : std::min(1.0, static_cast<double>(e.done) /
                                              static_cast<double>(total));
  if (e.done == total) {
    e.remaining = absl::ZeroDuration();
  } else if (e.done < total && e.rate > 0) {
    e.remaining = absl::Seconds(static_cast<double>(total - e.done) / e.rate);
  }
  return e;
}

std::string FormatRemaining(absl::Duration remaining) {
  const int64_t seconds = std::max<int64_t>(
      0, absl::ToInt64Seconds(absl::Ceil(remaining, absl::Seconds(1))));
  if (seconds < 60) return absl::StrFormat("%ds", seconds);
  if (seconds < 3600) {
    return absl::StrFormat("%dm%02ds", seconds / 60, seconds % 60);
  }
  if (seconds < 86400) {
    return absl::StrFormat("%dh%02dm", seconds / 3600, seconds % 3600 / 60);
  }
  return absl::StrFormat("%dd%02dh", seconds / 86400, seconds % 86400 / 3600);
}

}  // namespace tree
}  // namespace tally
