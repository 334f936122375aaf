#include "pg/sidecar/lifecycle.h"

#include <algorithm>

namespace tally {
namespace pg {

absl::string_view SidecarPhaseName(SidecarPhase phase) {
  switch (phase) {
    case SidecarPhase::kPreparing:
      return "preparing";
    case SidecarPhase::kBuilding:
      return "building";
    case SidecarPhase::kFollowing:
      return "following";
    case SidecarPhase::kReconnecting:
      return "reconnecting";
    case SidecarPhase::kFailed:
      return "failed";
    case SidecarPhase::kStopped:
      return "stopped";
  }
  return "unknown";
}

SidecarStep NextSidecarStep(const SidecarLoopState& state, SidecarEvent event) {
  SidecarStep step;
  step.next = state;
  SidecarLoopState& next = step.next;
  if (state.phase == SidecarPhase::kFailed ||
      state.phase == SidecarPhase::kStopped) {
    step.action = SidecarAction::kExit;
    return step;
  }
  // After the backoff, or when nothing failed: reach the database if it
  // never answered, else build or resume.
  const SidecarAction attempt = state.database_reached
                                    ? SidecarAction::kIndexAndFollow
                                    : SidecarAction::kReachDatabase;
  switch (event) {
    case SidecarEvent::kStarted:
    case SidecarEvent::kWaited:
      step.action = attempt;
      return step;
    case SidecarEvent::kReached:
      // The phase stays (reconnecting, with the reason) until the index is
      // built or resumed.
      next.database_reached = true;
      next.backoff = kSidecarFirstBackoff;
      next.made_progress = false;
      step.action = SidecarAction::kIndexAndFollow;
      return step;
    case SidecarEvent::kBuildStarted:
      next.phase = SidecarPhase::kBuilding;
      step.action = SidecarAction::kIndexAndFollow;
      step.last_error = SidecarLastError::kClear;
      return step;
    case SidecarEvent::kBuilt:
      // Building until the capture follows (kResumed).
      next.made_progress = true;
      step.action = SidecarAction::kIndexAndFollow;
      return step;
    case SidecarEvent::kResumed:
      next.phase = SidecarPhase::kFollowing;
      next.made_progress = true;
      step.action = SidecarAction::kIndexAndFollow;
      step.last_error = SidecarLastError::kClear;
      return step;
    case SidecarEvent::kSchemaChanged:
      // Rebuilt at once; the phase stays until the rebuild starts.
      next.backoff = kSidecarFirstBackoff;
      step.action = SidecarAction::kIndexAndFollow;
      return step;
    case SidecarEvent::kCatalogChanged:
      // Rebuilt at once too. The backoff stays as it was, unlike after
      // kSchemaChanged: a catalog change ends the follow cleanly, and a
      // clean end never reset it.
      step.action = SidecarAction::kIndexAndFollow;
      return step;
    case SidecarEvent::kConnectionLost:
    case SidecarEvent::kRetryableError:
      next.phase = SidecarPhase::kReconnecting;
      step.action = SidecarAction::kWait;
      step.wait = state.backoff;
      // An attempt that got somewhere (built, or followed) was not part of
      // a run of failures: the wait after it is the one already due, and
      // the next starts over.
      next.backoff = state.made_progress
                         ? kSidecarFirstBackoff
                         : std::min(state.backoff * 2, kSidecarMostBackoff);
      next.made_progress = false;
      step.last_error = SidecarLastError::kRecord;
      return step;
    case SidecarEvent::kPermanentError:
      next.phase = SidecarPhase::kFailed;
      step.action = SidecarAction::kExit;
      step.last_error = SidecarLastError::kRecord;
      return step;
    case SidecarEvent::kStopRequested:
      next.phase = SidecarPhase::kStopped;
      step.action = SidecarAction::kExit;
      step.last_error = SidecarLastError::kClear;
      return step;
  }
  step.action = SidecarAction::kExit;
  return step;
}

SidecarEvent ReachEvent(const absl::Status& status, bool stop_requested) {
  if (stop_requested) return SidecarEvent::kStopRequested;
  if (status.ok()) return SidecarEvent::kReached;
  if (absl::IsUnavailable(status)) return SidecarEvent::kConnectionLost;
  return SidecarEvent::kPermanentError;
}

SidecarEvent AttemptEndEvent(const absl::Status& status, bool stop_requested,
                             bool schema_change_pending) {
  if (stop_requested) return SidecarEvent::kStopRequested;
  if (status.ok()) return SidecarEvent::kCatalogChanged;
  if (absl::IsDataLoss(status) || absl::IsInvalidArgument(status) ||
      absl::IsOutOfRange(status)) {
    return SidecarEvent::kPermanentError;
  }
  if (schema_change_pending && absl::IsAborted(status)) {
    return SidecarEvent::kSchemaChanged;
  }
  if (absl::IsUnavailable(status)) return SidecarEvent::kConnectionLost;
  return SidecarEvent::kRetryableError;
}

}  // namespace pg
}  // namespace tally
