#include "node/upkeep/maintenance.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "node/observe/log.h"
#include "tree/hlc.h"
#include "tree/status_macros.h"

namespace tally {
namespace node {

Maintenance::Maintenance(storage::Store* store, MaintenanceOptions options,
                         std::function<absl::Time()> peers_synced_since)
    : store_(store),
      options_(options),
      peers_synced_since_(std::move(peers_synced_since)) {
  // What the log holds now counts as written now.
  absl::MutexLock lock(&mu_);
  marks_.emplace_back(LocalNow(), store_->last_sequence());
}

Maintenance::~Maintenance() { Shutdown(); }

absl::Time Maintenance::LocalNow() const {
  // The store's physical clock: the one its tombstones' arrival times and
  // the sessions' start times are read from.
  return absl::FromUnixMillis(
      static_cast<int64_t>(store_->clock().PhysicalMillis()));
}

void Maintenance::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void Maintenance::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void Maintenance::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.interval);
      if (stopping_) return;
    }
    const absl::Status status = RunOnce(LocalNow());
    if (!status.ok()) {
      LogWarning("maintenance failed", {{"error", status}});
    }
  }
}

storage::Sequence Maintenance::TrimPoint(absl::Time now) {
  const storage::Sequence last = store_->last_sequence();
  storage::Sequence through = 0;
  if (options_.log_retention_entries > 0 &&
      last > options_.log_retention_entries) {
    through = last - options_.log_retention_entries;
  }
  absl::MutexLock lock(&mu_);
  marks_.emplace_back(now, last);
  if (options_.log_retention_age > absl::ZeroDuration()) {
    // The newest mark old enough: everything up to it was written before
    // the age limit. Older marks are no longer needed.
    const absl::Time cutoff = now - options_.log_retention_age;
    while (marks_.size() > 1 && marks_[1].first <= cutoff) marks_.pop_front();
    if (marks_.front().first <= cutoff) {
      through = std::max(through, marks_.front().second);
    }
  } else {
    // No age limit: one mark (the newest) is all that is kept.
    while (marks_.size() > 1) marks_.pop_front();
  }
  return through;
}

absl::Time Maintenance::PurgeHorizon(absl::Time now) const {
  const absl::Time synced = peers_synced_since_();
  absl::Time horizon = now - options_.tombstone_min_age;
  if (synced != absl::InfiniteFuture()) {
    horizon = std::min(horizon, synced - options_.max_clock_skew);
  }
  return horizon;
}

absl::Status Maintenance::RunOnce(absl::Time now) {
  absl::Status first_error;
  uint64_t trimmed = 0;
  uint64_t purged = 0;

  const storage::Sequence through = TrimPoint(now);
  if (through >= store_->first_sequence()) {
    absl::StatusOr<uint64_t> n = store_->TrimChangeLog(through);
    if (n.ok()) {
      trimmed = *n;
    } else {
      first_error.Update(n.status());
    }
  }

  const absl::Time horizon = PurgeHorizon(now);
  if (horizon != absl::InfinitePast() && horizon > absl::UnixEpoch()) {
    absl::StatusOr<uint64_t> n = store_->PurgeTombstones(
        tree::HlcTimestamp::FromParts(absl::ToUnixMillis(horizon), 0),
        options_.max_purge_per_pass);
    if (n.ok()) {
      purged = *n;
    } else {
      first_error.Update(n.status());
    }
  }
  // After a damaged row of unknown origin was replaced (rare): a scan.
  if (absl::StatusOr<uint64_t> recounted = store_->RecountOriginRows();
      !recounted.ok()) {
    first_error.Update(recounted.status());
  } else if (*recounted > 0) {
    LogInfo(
        "maintenance: rows per origin recounted after a damaged row of "
        "unknown origin was replaced",
        {{"origins_corrected", *recounted}});
  }
  if (trimmed > 0 || purged > 0) {
    LogInfo("maintenance", {{"log_entries_trimmed", trimmed},
                            {"log_starts_at", store_->first_sequence()},
                            {"tombstones_purged", purged}});
  }
  absl::MutexLock lock(&mu_);
  ++stats_.passes;
  stats_.log_entries_trimmed += trimmed;
  stats_.tombstones_purged += purged;
  if (!first_error.ok()) ++stats_.failures;
  return first_error;
}

MaintenanceStats Maintenance::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void Maintenance::FillStatus(::tally::v1::StatusResponse* response) {
  const MaintenanceStats s = stats();
  response->set_first_sequence(store_->first_sequence());
  response->set_log_entries_trimmed(s.log_entries_trimmed);
  response->set_tombstones_purged(s.tombstones_purged);
}

}  // namespace node
}  // namespace tally
