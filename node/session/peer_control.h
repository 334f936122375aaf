// PeerControl: what an operator may steer of a node's sessions with its
// peers through Admin (`tally peer pause|resume`). SessionScheduler is the
// one implementation; AdminService reaches it through this interface so
// that the service does not depend on the scheduler.
//
// Thread-safe.
#ifndef TALLY_NODE_SESSION_PEER_CONTROL_H_
#define TALLY_NODE_SESSION_PEER_CONTROL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "node/session/session_request.h"
#include "tally/v1/tally.pb.h"

namespace tally {
namespace node {

class PeerControl {
 public:
  virtual ~PeerControl() = default;

  // Pauses (`paused`) or resumes the sessions with `peer`, its address as
  // configured or its node name. Returns kInvalidArgument for an empty
  // name and kNotFound (listing the peers) for one that is not a peer.
  virtual absl::StatusOr<::tally::v1::PeerControlResponse> SetPaused(
      const std::string& peer, bool paused) = 0;

  // A session asked for with one peer.
  struct Asked {
    std::string address;  // as configured
    std::string name;     // "" before the peer's first handshake
    // Null when the peer was skipped: paused, with every peer asked for.
    std::shared_ptr<SessionRequest> request;
  };

  // Asks for a session now with `peer` (address or node name; empty: every
  // peer that is not paused), of `keyspace` only (empty: every keyspace),
  // comparing the roots after it. A peer whose session runs gets the new
  // one right after. Returns kInvalidArgument for a bad keyspace name,
  // kNotFound for an unknown peer, kFailedPrecondition for a paused peer or
  // when no peer is left, kUnavailable while the node shuts down.
  virtual absl::StatusOr<std::vector<Asked>> RequestSessions(
      const std::string& peer, const std::string& keyspace) = 0;

  // The tool that asked for `request` went away: a waiting request is
  // dropped (finished as cancelled), a running session told to stop.
  virtual void CancelRequest(
      const std::shared_ptr<SessionRequest>& request) = 0;
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_SESSION_PEER_CONTROL_H_
