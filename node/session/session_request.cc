#include "node/session/session_request.h"

#include <utility>

namespace tally {
namespace node {

void SessionRequest::Start(std::shared_ptr<const Session> session) {
  absl::MutexLock lock(&mu_);
  if (state_ != State::kWaiting) return;
  state_ = State::kRunning;
  session_ = std::move(session);
}

void SessionRequest::Finish(SessionRecord record,
                            std::vector<std::string> differing_after) {
  absl::MutexLock lock(&mu_);
  if (state_ == State::kDone) return;
  state_ = State::kDone;
  record_ = std::move(record);
  differing_after_ = std::move(differing_after);
}

SessionRequest::Snapshot SessionRequest::snapshot() const {
  absl::MutexLock lock(&mu_);
  Snapshot out;
  out.state = state_;
  // Lock order: this request's, then the session's (progress() calls out
  // to nothing).
  if (session_ != nullptr) out.progress = session_->progress();
  if (state_ == State::kDone) {
    out.record = record_;
    out.differing_after = differing_after_;
  }
  return out;
}

bool SessionRequest::WaitUntilDone(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(
      absl::Condition(this, &SessionRequest::DoneLocked), timeout);
}

bool SessionRequest::DoneLocked() const { return state_ == State::kDone; }

}  // namespace node
}  // namespace tally
