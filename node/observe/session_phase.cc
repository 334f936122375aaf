#include "node/observe/session_phase.h"

namespace tally {
namespace node {

absl::string_view SessionPhaseName(SessionPhase phase) {
  switch (phase) {
    case SessionPhase::kIdle:
      return "idle";
    case SessionPhase::kHandshake:
      return "handshake";
    case SessionPhase::kDiff:
      return "diff";
    case SessionPhase::kRepair:
      return "repair";
    case SessionPhase::kDone:
      return "done";
    case SessionPhase::kFailed:
      return "failed";
  }
  return "unknown";
}

}  // namespace node
}  // namespace tally
