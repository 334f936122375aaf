#include "node/upkeep/scrubber.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "node/observe/log.h"

namespace tally {
namespace node {

Scrubber::Scrubber(storage::Store* store, ScrubberOptions options)
    : store_(store), options_(options) {}

Scrubber::~Scrubber() { Shutdown(); }

void Scrubber::Start() {
  if (options_.interval <= absl::ZeroDuration()) return;
  thread_ = std::thread([this] { Loop(); });
}

void Scrubber::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

bool Scrubber::Pause(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), d);
  return !stopping_;
}

void Scrubber::Loop() {
  std::random_device seed;
  std::mt19937_64 random(seed());
  std::uniform_real_distribution<double> jitter(0.75, 1.25);
  while (Pause(options_.interval * jitter(random))) {
    const absl::Status status = RunPass();
    if (absl::IsCancelled(status)) return;
    if (!status.ok()) {
      LogWarning("scrub failed", {{"error", status}});
    }
  }
}

absl::Status Scrubber::RunPass() {
  absl::Status first_error;
  const absl::Time start = absl::Now();
  uint64_t rows = 0;
  storage::ScrubReport pass;
  for (const storage::KeyspaceInfo& ks : store_->ListKeyspaces()) {
    const uint64_t leaves = uint64_t{1} << ks.depth;
    for (uint64_t leaf = 0; leaf < leaves; leaf += options_.leaves_per_step) {
      absl::StatusOr<storage::ScrubReport> step =
          store_->ScrubLeaves(ks.name, leaf, options_.leaves_per_step);
      if (!step.ok()) {
        first_error.Update(step.status());
        absl::MutexLock lock(&mu_);
        ++stats_.failures;
        break;  // the next keyspace; this one is retried next pass
      }
      rows += step->rows_checked;
      pass.damaged_rows += step->damaged_rows;
      pass.leaves_repaired += step->leaves_repaired;
      {
        absl::MutexLock lock(&mu_);
        stats_.rows_checked += step->rows_checked;
        stats_.damaged_rows += step->damaged_rows;
        stats_.leaves_repaired += step->leaves_repaired;
        stats_.unreadable += step->unreadable;
      }
      if (step->damaged_rows > 0) {
        LogWarning(
            "scrub: rows damaged on disk; marked, left out of the tree, and "
            "repaired from a peer by the next anti-entropy session",
            {{"keyspace", ks.name},
             {"leaves",
              absl::StrCat(leaf, "..", leaf + options_.leaves_per_step - 1)},
             {"damaged_rows", step->damaged_rows}});
      }
      // Throttle: stay within the row budget since the pass started.
      absl::Duration wait;
      if (options_.rows_per_second > 0) {
        const absl::Duration due =
            absl::Seconds(static_cast<double>(rows) / options_.rows_per_second);
        wait = std::max(absl::ZeroDuration(), due - (absl::Now() - start));
      }
      if (!Pause(wait)) return absl::CancelledError("shutting down");
    }
  }
  absl::MutexLock lock(&mu_);
  ++stats_.passes;
  return first_error;
}

ScrubberStats Scrubber::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void Scrubber::FillStatus(::tally::v1::StatusResponse* response) {
  const ScrubberStats s = stats();
  v1::ScrubStatus* scrub = response->mutable_scrub();
  scrub->set_passes(s.passes);
  scrub->set_rows_checked(s.rows_checked);
  scrub->set_damaged_rows_found(s.damaged_rows);
  scrub->set_leaves_repaired(s.leaves_repaired);
  scrub->set_unreadable_blocks(s.unreadable);
  scrub->set_damaged_rows(store_->damaged_rows());
}

}  // namespace node
}  // namespace tally
