// ProgressMeter: how fast long work goes and how long it has left, from
// readings of how much of it is done — for `tally load`, repairs, sessions
// and the PostgreSQL index build alike (it sits in tree/, the lowest layer,
// so that every layer can use it; it is pure arithmetic, no I/O).
//
// The rate is measured over a sliding window (the readings of the last
// `window`), so that it follows the work's current speed rather than its
// average since the start, and it falls when the work stalls: with no
// reading in the window the rate is 0. Until a window has passed it is the
// average since the start.
//
// The time left is (total - done) / rate, given only when the total is
// known, not yet passed, and the rate is above zero. A meter never guesses
// a total: work without one has a rate and an elapsed time, and no time
// left.
//
//   tree::ProgressMeter meter(absl::Now());
//   meter.set_total(file_bytes);
//   ...
//   meter.Record(absl::Now(), bytes_read);
//   const ProgressEstimate e = meter.Estimate(absl::Now());
//   if (e.remaining.has_value()) std::cout <<
//   tree::FormatRemaining(*e.remaining);
//
// Thread-compatible: a caller that shares one guards it with its own lock.
#ifndef TALLY_TREE_PROGRESS_METER_H_
#define TALLY_TREE_PROGRESS_METER_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "absl/time/time.h"

namespace tally {
namespace tree {

// Where long work is, as a meter sees it at one time.
struct ProgressEstimate {
  uint64_t done = 0;
  std::optional<uint64_t> total;  // nullopt: not known
  absl::Duration elapsed;         // since the meter's start
  // Units per second over the meter's window; 0 when nothing moved in it.
  double rate = 0;
  // done / total, at most 1; nullopt without a total (a total of 0 is 1).
  std::optional<double> fraction;
  // The time left at the current rate; nullopt without a total, with a
  // rate of 0, or once done has passed the total (an estimated total that
  // was too low: the time left is then not known). Zero when done equals
  // the total.
  std::optional<absl::Duration> remaining;
};

class ProgressMeter {
 public:
  static constexpr absl::Duration kDefaultWindow = absl::Seconds(10);

  // The work started at `start` with nothing done.
  // REQUIRES: window > 0.
  explicit ProgressMeter(absl::Time start,
                         absl::Duration window = kDefaultWindow);

  // The amount the work comes to, once known (nullopt: not known). It may
  // be set or changed at any time (an estimate made better).
  void set_total(std::optional<uint64_t> total) { total_ = total; }
  const std::optional<uint64_t>& total() const { return total_; }

  // `done` units are done as of `now`. Readings come in time order and
  // `done` does not fall; one that falls (the work started over) starts
  // the meter again from it. Memory stays bounded however often it is
  // called: readings closer than window/32 to the one before the last are
  // merged.
  void Record(absl::Time now, uint64_t done);

  // The estimate as of `now` (at or after the last reading).
  ProgressEstimate Estimate(absl::Time now) const;

 private:
  struct Reading {
    absl::Time time;
    uint64_t done;
  };

  absl::Time start_;
  absl::Duration window_;
  std::optional<uint64_t> total_;
  // In time order, never empty: the first is at or before the window's
  // start (or the meter's start), so the rate spans the whole window.
  std::deque<Reading> readings_;
};

// A time left for people: "45s", "3m05s", "2h10m", "3d04h".
std::string FormatRemaining(absl::Duration remaining);

}  // namespace tree
}  // namespace tally

#endif  // TALLY_TREE_PROGRESS_METER_H_
