// Scrubber: the node's background check of its own rows against their
// digests, as Riak's periodic tree rebuilds do.
//
// A byte flipped on disk inside a row that nobody reads is invisible to
// anti-entropy: the leaves hold the digest the row had when it was
// written, so the tree still matches the peers'. The scrubber walks every
// keyspace a few leaves at a time (Store::ScrubLeaves), recomputes each
// leaf from its rows, marks the damaged rows and corrects the leaf; the
// tree then differs from the peers' and the next anti-entropy session
// brings their copies. It is throttled (a budget of rows per second) so
// that a pass never competes with the node's real work, and its passes
// start at jittered intervals so that the nodes of a cluster do not scrub
// in lockstep.
//
//   Scrubber scrubber(store, ScrubberOptions{});
//   scrubber.Start();
//   ...
//   scrubber.Shutdown();
//
// Thread-safe.
#ifndef TALLY_NODE_UPKEEP_SCRUBBER_H_
#define TALLY_NODE_UPKEEP_SCRUBBER_H_

#include <cstdint>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "node/observe/status_source.h"
#include "storage/store.h"

namespace tally {
namespace node {

struct ScrubberOptions {
  // Time between the starts of two passes, each jittered by up to a
  // quarter either way. Zero: no scrubbing.
  absl::Duration interval = absl::Hours(6);
  // Rows checked per second at most (0: unthrottled).
  uint64_t rows_per_second = 20'000;
  // Leaves recomputed per step; the commit path waits for one step.
  uint64_t leaves_per_step = 64;
};

struct ScrubberStats {
  uint64_t passes = 0;  // complete passes over every keyspace
  uint64_t rows_checked = 0;
  uint64_t damaged_rows = 0;     // found damaged (and marked for repair)
  uint64_t leaves_repaired = 0;  // leaves that disagreed with their rows
  uint64_t unreadable = 0;       // blocks LevelDB could not read at all
  uint64_t failures = 0;
};

class Scrubber : public StatusSource {
 public:
  Scrubber(storage::Store* store, ScrubberOptions options);
  ~Scrubber() override;
  Scrubber(const Scrubber&) = delete;
  Scrubber& operator=(const Scrubber&) = delete;

  // Starts the thread (no-op when the interval is zero); the first pass
  // starts after one jittered interval.
  void Start();
  // Stops the thread; a step in progress finishes.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  // One whole pass over every keyspace, throttled. Returns the first
  // error (the pass goes on past it) or kCancelled if shut down meanwhile.
  absl::Status RunPass() ABSL_LOCKS_EXCLUDED(mu_);

  ScrubberStats stats() const ABSL_LOCKS_EXCLUDED(mu_);

  // StatusSource: the scrub counters and the rows marked damaged now.
  void FillStatus(::tally::v1::StatusResponse* response) override
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop();
  // Sleeps `d` unless shut down first; false when shut down.
  bool Pause(absl::Duration d) ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  storage::Store* const store_;
  const ScrubberOptions options_;

  std::thread thread_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  ScrubberStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_UPKEEP_SCRUBBER_H_
