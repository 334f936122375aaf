// SessionPhase: where an anti-entropy session is, by the names status,
// /metrics and the status page show. Here, below the sessions, because what
// a node tells operators (node/observe/status_fields.h, and the CLI that
// reads the status) names the phases without linking the sessions.
#ifndef TALLY_NODE_OBSERVE_SESSION_PHASE_H_
#define TALLY_NODE_OBSERVE_SESSION_PHASE_H_

#include <array>

#include "absl/strings/string_view.h"

namespace tally {
namespace node {

// Where a session is. kIdle is a peer's phase before its first session;
// kDone and kFailed stay a peer's phase after a session ended, until the
// next one starts.
enum class SessionPhase {
  kIdle,
  kHandshake,
  kDiff,
  kRepair,
  kDone,
  kFailed,
};

// Every phase, in the order above: the series of the tally_session_phase
// metric.
inline constexpr std::array<SessionPhase, 6> kSessionPhases = {
    SessionPhase::kIdle,   SessionPhase::kHandshake, SessionPhase::kDiff,
    SessionPhase::kRepair, SessionPhase::kDone,      SessionPhase::kFailed};

// "idle", "handshake", "diff", "repair", "done", "failed": the names status
// and metrics use.
absl::string_view SessionPhaseName(SessionPhase phase);

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_OBSERVE_SESSION_PHASE_H_
