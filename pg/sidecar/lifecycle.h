// The lifecycle of the sidecar's thread (pg/sidecar/sidecar.h) as a state
// machine: the phases it goes through, the events that move it, and what it
// does next — one pure function (NextSidecarStep), so that every transition,
// every backoff and every terminal state is tested without a server
// (pg/sidecar/lifecycle_test.cc). The thread (pg/sidecar/sidecar.cc) does
// the work each step names, turns how it ended into an event (ReachEvent,
// AttemptEndEvent), and asks for the next step.
//
//   preparing --(database down at start)--> reconnecting: reach it again
//       after the backoff, until it answers (then as below) or refuses
//       (the preflight's refusal: failed)
//   preparing, reconnecting --build started--> building --built-->
//       building --resumed--> following
//   preparing, reconnecting --resumed--> following
//   following --schema changed, catalog changed--> (same) build at once
//   any --connection lost, retryable error--> reconnecting: after the
//       backoff, build or resume again
//   any --permanent error--> failed      (the thread ends)
//   any --stop requested--> stopped      (the thread ends)
//
// The backoff is 1 s, doubling with each error in a row up to 30 s; it
// starts over at 1 s once the database is reached, after an attempt that
// built or resumed, and after a schema change the capture decoded.
//
// The phases' names (SidecarPhaseName) are what status, metrics and `tally
// status --json` show; the enum stays inside the sidecar.

#ifndef TALLY_PG_SIDECAR_LIFECYCLE_H_
#define TALLY_PG_SIDECAR_LIFECYCLE_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tally {
namespace pg {

// The wait after the first error retrying may mend, and the most it grows
// to (doubling with each error in a row).
inline constexpr absl::Duration kSidecarFirstBackoff = absl::Seconds(1);
inline constexpr absl::Duration kSidecarMostBackoff = absl::Seconds(30);

enum class SidecarPhase {
  // Prepared; the thread has neither built nor resumed yet.
  kPreparing,
  // The index is being built (or rebuilt) from the slot's snapshot.
  kBuilding,
  // The capture follows the slot into the index.
  kFollowing,
  // Waiting out the backoff after an error a later attempt may not meet
  // (the database down, a lost connection, a dropped table, a refused
  // store write), or trying again after it.
  kReconnecting,
  // An error retrying cannot mend; the thread ended. Terminal.
  kFailed,
  // Stop was called; the thread ended. Terminal.
  kStopped,
};

// "preparing", "building", "following", "reconnecting", "failed",
// "stopped": the names every surface shows (SidecarStatus::phase).
absl::string_view SidecarPhaseName(SidecarPhase phase);

// What happened, as the thread reports it.
enum class SidecarEvent {
  // Start: the thread begins.
  kStarted,
  // A database that was down at start answered, and its preflight checks
  // passed.
  kReached,
  // The decision (pg/sidecar/index_decision.h) is to build or rebuild.
  kBuildStarted,
  // The build stored the index and its position.
  kBuilt,
  // The capture follows the slot from the stored position (after a build:
  // the build's).
  kResumed,
  // The capture decoded a Relation message unlike the table's schema: the
  // schemas are read again and the index rebuilt at once.
  kSchemaChanged,
  // The catalog check found a table changed, dropped or back: the follow
  // ended cleanly, and the index is rebuilt at once.
  kCatalogChanged,
  // The connection failed (kUnavailable).
  kConnectionLost,
  // Another error a later attempt may not meet (a dropped table, a refused
  // store write, a failed rebuild).
  kRetryableError,
  // An error retrying cannot mend: a malformed stream or stored position
  // (kDataLoss), kInvalidArgument, kOutOfRange; or, while reaching a
  // database that was down at start, the preflight's refusal.
  kPermanentError,
  // Stop was called.
  kStopRequested,
  // The backoff passed.
  kWaited,
};

// What the thread does next.
enum class SidecarAction {
  // Connect, run the preflight checks, open the backend (a database that
  // was down at start).
  kReachDatabase,
  // One attempt: connect, build or resume the index, then follow the slot
  // until that ends. kBuildStarted, kBuilt and kResumed arrive while it
  // runs, and it goes on.
  kIndexAndFollow,
  // Wait SidecarStep::wait (less if Stop is called), then kWaited.
  kWait,
  // The thread ends.
  kExit,
};

// What the status's last error becomes.
enum class SidecarLastError {
  kKeep,
  // The event's error (the reason for reconnecting or failed).
  kRecord,
  // Cleared: the thread got somewhere, or stopped.
  kClear,
};

// The machine's state between two events.
struct SidecarLoopState {
  SidecarPhase phase = SidecarPhase::kPreparing;
  // The database answered (at Prepare, or later: kReached). Until then a
  // retry reaches it again rather than building or resuming.
  bool database_reached = false;
  // The wait after the next error that retrying may mend.
  absl::Duration backoff = kSidecarFirstBackoff;
  // The current attempt built or resumed: the backoff after its error
  // starts over.
  bool made_progress = false;
};

struct SidecarStep {
  SidecarLoopState next;
  SidecarAction action = SidecarAction::kExit;
  // For kWait: how long.
  absl::Duration wait = absl::ZeroDuration();
  SidecarLastError last_error = SidecarLastError::kKeep;
};

// The transition: the state after `event` in `state`, and what the thread
// does next. Total: an event a phase does not expect still gives a step
// (failed and stopped give kExit whatever comes).
SidecarStep NextSidecarStep(const SidecarLoopState& state, SidecarEvent event);

// How reaching a database that was down at start ended: kStopRequested if
// `stop_requested` (whatever `status` says), kReached for OK,
// kConnectionLost for kUnavailable (down, or not listening yet), and
// kPermanentError for anything else (the preflight's refusal names a fix
// retrying cannot make).
SidecarEvent ReachEvent(const absl::Status& status, bool stop_requested);

// How an attempt (SidecarAction::kIndexAndFollow) ended: kStopRequested if
// `stop_requested` (whatever `status` says); kCatalogChanged for OK (the
// follow ends cleanly only for Stop or a catalog change); kPermanentError
// for kDataLoss, kInvalidArgument and kOutOfRange; kSchemaChanged for
// kAborted while `schema_change_pending` (the capture saw one, or the
// rebuild of one was interrupted); kConnectionLost for kUnavailable;
// kRetryableError for anything else.
SidecarEvent AttemptEndEvent(const absl::Status& status, bool stop_requested,
                             bool schema_change_pending);

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_SIDECAR_LIFECYCLE_H_
