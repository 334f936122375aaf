// token: where keys lie in the token space — what `--range` takes and the
// status page's heat map draws. Computed here; no node is asked.
#include <iostream>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "node/sync/repair_heat.h"
#include "tools/cli/commands/command.h"
#include "tools/cli/commands/commands.h"
#include "tools/cli/format.h"
#include "tree/status_macros.h"
#include "tree/token.h"

namespace tally {
namespace cli {

CommandResult Token(const Context& ctx) {
  for (size_t i = 0; i < ctx.args.size(); ++i) {
    TALLY_ASSIGN_OR_RETURN(const std::string key, ArgBytes(ctx, i, "KEY"));
    const tree::Token token = tree::TokenOf(key);
    const uint64_t segment = tree::NodeIndexOf(token, node::kHeatLevel);
    if (ctx.json) {
      Json line = Json::object();
      SetBytesField(line, "key", key);
      line["token"] = absl::StrFormat("%016x", token);
      line["segment"] = segment;
      PrintJson(line);
    } else {
      std::cout << absl::StrFormat("%016x  segment %2d  %s\n", token, segment,
                                   absl::CHexEscape(key));
    }
  }
  return 0;
}

}  // namespace cli
}  // namespace tally
