// Hybrid logical clock (HLC).
//
// A timestamp is 64 bits: 48 bits of physical milliseconds since the Unix
// epoch and a 16-bit logical counter. Timestamps order versions; they stay
// close to wall time, yet every node's clock is strictly monotonic and moves
// past every remote timestamp it accepts, so a change made after seeing
// another change always has a higher timestamp.
//
//   HybridClock clock(HybridClock::Options{});
//   HlcTimestamp t = clock.Now();
//   absl::Status s = clock.Observe(remote);  // kOutOfRange if too far ahead
//
// Thread-safe: HybridClock may be shared by any number of threads.
#ifndef TALLY_TREE_HLC_H_
#define TALLY_TREE_HLC_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tally {
namespace tree {

class HlcTimestamp {
 public:
  static constexpr int kCounterBits = 16;
  static constexpr uint64_t kMaxCounter = (uint64_t{1} << kCounterBits) - 1;
  static constexpr uint64_t kMaxPhysicalMillis = (uint64_t{1} << 48) - 1;

  constexpr HlcTimestamp() = default;
  static constexpr HlcTimestamp FromRaw(uint64_t raw) {
    return HlcTimestamp(raw);
  }
  // REQUIRES: physical_millis <= kMaxPhysicalMillis, counter <= kMaxCounter.
  static constexpr HlcTimestamp FromParts(uint64_t physical_millis,
                                          uint64_t counter) {
    return HlcTimestamp((physical_millis << kCounterBits) | counter);
  }

  constexpr uint64_t raw() const { return raw_; }
  constexpr uint64_t physical_millis() const { return raw_ >> kCounterBits; }
  constexpr uint64_t counter() const { return raw_ & kMaxCounter; }
  bool IsZero() const { return raw_ == 0; }

  friend constexpr bool operator<(HlcTimestamp a, HlcTimestamp b) {
    return a.raw_ < b.raw_;
  }
  friend constexpr bool operator==(HlcTimestamp a, HlcTimestamp b) {
    return a.raw_ == b.raw_;
  }
  friend constexpr bool operator!=(HlcTimestamp a, HlcTimestamp b) {
    return a.raw_ != b.raw_;
  }

  // "2026-11-30T08:00:00.123Z+5" (physical time in UTC, then the counter).
  std::string DebugString() const;

 private:
  constexpr explicit HlcTimestamp(uint64_t raw) : raw_(raw) {}
  uint64_t raw_ = 0;
};

class HybridClock {
 public:
  // Milliseconds since the Unix epoch; injectable so tests control time.
  using PhysicalClock = std::function<uint64_t()>;

  struct Options {
    // A remote timestamp whose physical part is further ahead of the local
    // physical clock than this is refused: accepting it would drag every
    // later local write into the future.
    absl::Duration max_forward_skew = absl::Seconds(60);
    // Defaults to the system clock.
    PhysicalClock physical_clock;
  };

  explicit HybridClock(Options options);
  HybridClock(const HybridClock&) = delete;
  HybridClock& operator=(const HybridClock&) = delete;

  // Returns a timestamp strictly greater than every timestamp this clock has
  // returned or observed before.
  HlcTimestamp Now() ABSL_LOCKS_EXCLUDED(mu_);

  // Checks `remote` against the skew limit without advancing the clock.
  // Returns kOutOfRange, naming both times and the limit, when too far ahead.
  absl::Status Check(HlcTimestamp remote) const;

  // Accepts a remote timestamp: after it, Now() returns timestamps above
  // `remote`. Returns kOutOfRange (and changes nothing) when `remote` is
  // further ahead of the local physical clock than max_forward_skew.
  absl::Status Observe(HlcTimestamp remote) ABSL_LOCKS_EXCLUDED(mu_);

  // The latest timestamp issued or observed.
  HlcTimestamp Latest() const ABSL_LOCKS_EXCLUDED(mu_);

  // This node's own physical clock, in milliseconds since the epoch, which
  // remote timestamps never move (Now() may run ahead of it after
  // Observe()). What "when did this happen here" is judged by.
  uint64_t PhysicalMillis() const;

 private:
  // Constant after construction.
  const absl::Duration max_forward_skew_;
  const PhysicalClock physical_clock_;

  mutable absl::Mutex mu_;
  HlcTimestamp latest_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tree
}  // namespace tally

#endif  // TALLY_TREE_HLC_H_
