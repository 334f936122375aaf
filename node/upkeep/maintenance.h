// Maintenance: the node's background upkeep of its store — change-log
// retention, tombstone purge and, after a damaged row of unknown origin
// was replaced, the recount of rows per origin — on a timer.
//
// Retention keeps at most `log_retention_entries` entries and drops entries
// older than `log_retention_age`. Entries carry no write time, so the age is
// judged from marks (time, last sequence) this class takes on every pass:
// entries up to a mark taken at least `log_retention_age` ago are old. Marks
// live in memory; after a restart the entries written before it count as
// written at the restart, so they are kept longer, never shorter. A
// subscriber whose position was trimmed is told so (FAILED_PRECONDITION)
// and falls back to anti-entropy.
//
// Tombstone purge removes a tombstone once (1) it arrived at this node
// more than `tombstone_min_age` ago and (2) every peer has completed an
// anti-entropy session that started after it arrived (less
// `max_clock_skew`): the delete has then reached every peer, and a node
// that missed it and comes back cannot resurrect the row, because its peers
// keep the tombstone until it has synced with them. Both are judged by this
// node's own clock, never by the tombstone's timestamp, which a node whose
// clock runs behind makes look old (storage/store.h PurgeTombstones).
//
//   Maintenance maintenance(store, options, [&] {
//     return scheduler.PeersSyncedSince();
//   });
//   maintenance.Start();
//   ...
//   maintenance.Shutdown();
//
// Thread-safe.
#ifndef TALLY_NODE_UPKEEP_MAINTENANCE_H_
#define TALLY_NODE_UPKEEP_MAINTENANCE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "node/observe/status_source.h"
#include "storage/store.h"

namespace tally {
namespace node {

struct MaintenanceOptions {
  uint64_t log_retention_entries = 10'000'000;             // 0: no limit
  absl::Duration log_retention_age = absl::Hours(24 * 7);  // zero: no limit
  absl::Duration tombstone_min_age = absl::Hours(24);
  absl::Duration max_clock_skew = absl::Seconds(60);
  absl::Duration interval = absl::Seconds(10);
  // Tombstones purged per pass at most (one pass must stay short).
  size_t max_purge_per_pass = 100'000;
};

struct MaintenanceStats {
  uint64_t passes = 0;
  uint64_t log_entries_trimmed = 0;
  uint64_t tombstones_purged = 0;
  uint64_t failures = 0;
};

class Maintenance : public StatusSource {
 public:
  // `peers_synced_since` returns SessionScheduler::PeersSyncedSince().
  Maintenance(storage::Store* store, MaintenanceOptions options,
              std::function<absl::Time()> peers_synced_since);
  ~Maintenance() override;
  Maintenance(const Maintenance&) = delete;
  Maintenance& operator=(const Maintenance&) = delete;

  // Starts the timer thread; the first pass runs after one interval.
  void Start();
  // Stops the thread (a pass in progress finishes its current batch).
  void Shutdown();

  // One pass at time `now`: trim, purge, then recount the rows per origin
  // if the store asks for it. Returns the first error.
  absl::Status RunOnce(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

  // The timestamp before which tombstones may be purged at `now`.
  absl::Time PurgeHorizon(absl::Time now) const;

  MaintenanceStats stats() const ABSL_LOCKS_EXCLUDED(mu_);

  // StatusSource: the log's first sequence, entries trimmed and tombstones
  // purged.
  void FillStatus(::tally::v1::StatusResponse* response) override
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop();
  // This node's clock (the store's physical clock).
  absl::Time LocalNow() const;
  // The last sequence retention may trim through at `now`.
  storage::Sequence TrimPoint(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

  storage::Store* const store_;
  const MaintenanceOptions options_;
  const std::function<absl::Time()> peers_synced_since_;

  std::thread thread_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // (time, last sequence then), oldest first; at most one per pass.
  std::deque<std::pair<absl::Time, storage::Sequence>> marks_
      ABSL_GUARDED_BY(mu_);
  MaintenanceStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_UPKEEP_MAINTENANCE_H_
