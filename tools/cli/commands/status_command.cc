// status: what a node says of itself.
#include <iostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "tools/cli/commands/command.h"
#include "tools/cli/commands/commands.h"
#include "tools/cli/format.h"
#include "tools/cli/status.h"
#include "tree/status_macros.h"

namespace tally {
namespace cli {

CommandResult Status(const Context& ctx) {
  TALLY_ASSIGN_OR_RETURN(auto client, Connect(ctx, ctx.node));
  absl::StatusOr<v1::StatusResponse> r = client->Status();
  if (!r.ok()) return CallFailed(ctx, r.status());
  if (ctx.json) {
    PrintJson(StatusJson(*r, client->address()));
  } else {
    std::cout << StatusText(*r, client->address(), absl::Now());
  }
  return 0;
}

}  // namespace cli
}  // namespace tally
