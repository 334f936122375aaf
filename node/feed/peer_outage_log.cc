#include "node/feed/peer_outage_log.h"

#include <utility>

#include "node/observe/log.h"

namespace tally {
namespace node {

PeerOutageLog::PeerOutageLog(std::string peer, std::string link,
                             absl::Duration summary_interval)
    : peer_(std::move(peer)),
      link_(std::move(link)),
      summary_interval_(summary_interval) {}

PeerOutageLog::Decision PeerOutageLog::OnFailure(absl::Time now,
                                                 const absl::Status& error) {
  absl::MutexLock lock(&mu_);
  Decision decision;
  decision.error = error;
  if (!down_) {
    down_ = true;
    down_since_ = now;
    last_logged_ = now;
    failures_ = 1;
    last_code_ = error.code();
    decision.event = Event::kDown;
    decision.failures = 1;
    return decision;
  }
  ++failures_;
  decision.failures = failures_;
  decision.down_for = now - down_since_;
  if (error.code() != last_code_ || now - last_logged_ >= summary_interval_) {
    last_code_ = error.code();
    last_logged_ = now;
    decision.event = Event::kStillDown;
  }
  return decision;
}

PeerOutageLog::Decision PeerOutageLog::OnSuccess(absl::Time now) {
  absl::MutexLock lock(&mu_);
  Decision decision;
  if (!down_) return decision;
  decision.event = Event::kBackUp;
  decision.down_for = now - down_since_;
  decision.failures = failures_;
  down_ = false;
  failures_ = 0;
  last_code_ = absl::StatusCode::kOk;
  return decision;
}

void PeerOutageLog::Failure(absl::Time now, const absl::Status& error) {
  LogDecision(OnFailure(now, error));
}

void PeerOutageLog::Success(absl::Time now) { LogDecision(OnSuccess(now)); }

void PeerOutageLog::LogDecision(const Decision& decision) const {
  switch (decision.event) {
    case Event::kNone:
      return;
    case Event::kDown:
      LogWarning("peer down",
                 {{"peer", peer_}, {"link", link_}, {"error", decision.error}});
      return;
    case Event::kStillDown:
      LogWarning("peer still down", {{"peer", peer_},
                                     {"link", link_},
                                     {"down_for", decision.down_for},
                                     {"failures", decision.failures},
                                     {"error", decision.error}});
      return;
    case Event::kBackUp:
      LogInfo("peer back up", {{"peer", peer_},
                               {"link", link_},
                               {"down_for", decision.down_for},
                               {"failures", decision.failures}});
      return;
  }
}

}  // namespace node
}  // namespace tally
