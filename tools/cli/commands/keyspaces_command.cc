// keyspaces: the keyspaces a node holds, with their rows, depth and root.
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tools/cli/commands/command.h"
#include "tools/cli/commands/commands.h"
#include "tools/cli/format.h"
#include "tree/status_macros.h"

namespace tally {
namespace cli {

CommandResult Keyspaces(const Context& ctx) {
  TALLY_ASSIGN_OR_RETURN(auto client, Connect(ctx, ctx.node));
  absl::StatusOr<v1::HandshakeResponse> r = client->Handshake({}, 0);
  if (!r.ok()) return CallFailed(ctx, r.status());
  if (ctx.json) {
    for (const v1::KeyspaceSummary& ks : r->keyspaces()) {
      PrintJson({{"node", client->address()},
                 {"keyspace", ks.name()},
                 {"rows", ks.row_count()},
                 {"depth", ks.depth()},
                 {"root", RootHex(ks.root())}});
    }
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {
      {"KEYSPACE", "ROWS", "DEPTH", "ROOT"}};
  for (const v1::KeyspaceSummary& ks : r->keyspaces()) {
    rows.push_back({ks.name(), absl::StrCat(ks.row_count()),
                    absl::StrCat(ks.depth()), RootHex(ks.root())});
  }
  if (r->keyspaces_size() == 0) {
    std::cout << "node " << client->address() << " (" << r->node_name()
              << ") has no keyspaces\n";
    return 0;
  }
  std::cout << Table(rows);
  return 0;
}

}  // namespace cli
}  // namespace tally
