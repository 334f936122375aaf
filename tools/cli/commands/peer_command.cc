// peer: pause or resume a node's sessions with one of its peers.
#include <iostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/cli/commands/command.h"
#include "tools/cli/commands/commands.h"
#include "tools/cli/format.h"
#include "tree/status_macros.h"

namespace tally {
namespace cli {

CommandResult Peer(const Context& ctx) {
  const std::string& action = ctx.args[0];
  if (action != "pause" && action != "resume") {
    return absl::InvalidArgumentError(absl::StrFormat(
        "peer: '%s' is not an action; use 'tally peer pause PEER' or 'tally "
        "peer resume PEER' (PEER: its address or node name)",
        absl::CHexEscape(action)));
  }
  const bool pause = action == "pause";
  const std::string& peer = ctx.args[1];
  if (peer.empty()) {
    return absl::InvalidArgumentError(
        "peer: PEER is empty; give one of the node's peers by its address or "
        "node name");
  }
  TALLY_ASSIGN_OR_RETURN(auto client, Connect(ctx, ctx.node));
  absl::StatusOr<v1::PeerControlResponse> r =
      client->SetPeerPaused(peer, pause);
  if (!r.ok()) return CallFailed(ctx, r.status());
  if (ctx.json) {
    PrintJson({{"node", client->address()},
               {"peer", r->address()},
               {"name", r->name()},
               {"paused", r->paused()},
               {"changed", r->changed()},
               {"session_stopped", r->session_stopped()},
               {"saved", r->saved()},
               {"save_error", r->save_error()}});
    return 0;
  }
  // A change the node could not write down lasts until its restart only.
  const std::string kept =
      r->saved() ? (pause ? " (a restart keeps the pause)" : "")
                 : absl::StrFormat(
                       " WARNING: the node could not save the change (%s): "
                       "a restart %s.",
                       r->save_error(),
                       pause ? "ends the pause" : "pauses the peer again");
  const std::string who =
      absl::StrCat(r->address(),
                   r->name().empty() ? "" : absl::StrCat(" (", r->name(), ")"));
  std::string line;
  if (!r->changed()) {
    line = absl::StrFormat("peer %s was already %s on node %s", who,
                           pause ? "paused" : "resumed (not paused)",
                           client->address());
  } else if (pause) {
    line = absl::StrFormat(
        "paused sessions with peer %s on node %s%s; the change feed goes on. "
        "Until 'tally peer resume'%s",
        who, client->address(),
        r->session_stopped()
            ? "; its running session stops at its next step (rows it "
              "repaired stay repaired)"
            : "",
        r->saved() ? absl::StrCat(kept, ".") : absl::StrCat(".", kept));
  } else {
    line = absl::StrFormat(
        "resumed sessions with peer %s on node %s; the next starts within a "
        "second%s",
        who, client->address(), kept);
  }
  std::cout << line << "\n";
  return 0;
}

}  // namespace cli
}  // namespace tally
