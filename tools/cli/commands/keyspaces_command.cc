// keyspaces: the keyspaces a node holds, with their rows, depth and root,
// and the ones dropped there; `keyspaces drop|undrop NAME` on the node, and
// with --everywhere on each of its peers too.
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "storage/names.h"
#include "tools/cli/commands/command.h"
#include "tools/cli/commands/commands.h"
#include "tools/cli/format.h"
#include "tree/status_macros.h"

namespace tally {
namespace cli {
namespace {

CommandResult List(const Context& ctx) {
  TALLY_ASSIGN_OR_RETURN(auto client, Connect(ctx, ctx.node));
  absl::StatusOr<v1::StatusResponse> r = client->Status();
  if (!r.ok()) return CallFailed(ctx, r.status());
  if (ctx.json) {
    for (const v1::KeyspaceSummary& ks : r->keyspaces()) {
      PrintJson({{"node", client->address()},
                 {"keyspace", ks.name()},
                 {"rows", ks.row_count()},
                 {"depth", ks.depth()},
                 {"root", RootHex(ks.root())}});
    }
    for (const v1::DroppedKeyspace& ks : r->dropped_keyspaces()) {
      PrintJson({{"node", client->address()},
                 {"keyspace", ks.name()},
                 {"dropped", true},
                 {"dropped_unix_ms", ks.dropped_unix_ms()}});
    }
    return 0;
  }
  if (r->keyspaces_size() == 0) {
    std::cout << "node " << client->address() << " (" << r->node_name()
              << ") has no keyspaces\n";
  } else {
    std::vector<std::vector<std::string>> rows = {
        {"KEYSPACE", "ROWS", "DEPTH", "ROOT"}};
    for (const v1::KeyspaceSummary& ks : r->keyspaces()) {
      rows.push_back({ks.name(), absl::StrCat(ks.row_count()),
                      absl::StrCat(ks.depth()), RootHex(ks.root())});
    }
    std::cout << Table(rows);
  }
  for (const v1::DroppedKeyspace& ks : r->dropped_keyspaces()) {
    std::cout << "dropped: " << ks.name() << " (since "
              << absl::FormatTime("%Y-%m-%dT%H:%M:%SZ",
                                  absl::FromUnixMillis(static_cast<int64_t>(
                                      ks.dropped_unix_ms())),
                                  absl::UTCTimeZone())
              << "; its name is refused until 'tally keyspaces undrop')\n";
  }
  return 0;
}

// Drops (or undrops) `name` on the node at `address`: one line (or JSON
// object) saying what happened there; false when it failed.
bool DropOn(const Context& ctx, const std::string& address,
            const std::string& name, bool drop) {
  absl::StatusOr<std::unique_ptr<node::NodeClient>> client =
      Connect(ctx, address);
  absl::StatusOr<uint64_t> removed =
      client.ok() ? (*client)->DropKeyspace(name, drop) : client.status();
  // Done before (by an earlier run, or another node's --everywhere).
  const bool already = drop ? absl::IsAlreadyExists(removed.status())
                            : absl::IsNotFound(removed.status());
  const bool ok = removed.ok() || already;
  if (ctx.json) {
    PrintJson({{"node", address},
               {"keyspace", name},
               {"action", drop ? "drop" : "undrop"},
               {"ok", ok},
               {"already", already},
               {"rows_removed", removed.ok() ? *removed : 0},
               {"error",
                ok ? std::string() : std::string(removed.status().message())}});
    return ok;
  }
  if (removed.ok()) {
    std::cout << (drop ? absl::StrFormat(
                             "dropped keyspace '%s' on node %s: %d rows "
                             "removed; the node refuses the name from now on",
                             name, address, *removed)
                       : absl::StrFormat("undid the drop of keyspace '%s' on "
                                         "node %s: the name may be written "
                                         "again, and sessions bring its rows "
                                         "back from peers that hold it",
                                         name, address))
              << "\n";
  } else if (already) {
    std::cout << absl::StrFormat("keyspace '%s' was %s on node %s\n", name,
                                 drop ? "already dropped" : "not dropped",
                                 address);
  } else {
    // On stdout, one line per node: the command's own trouble line (one,
    // on stderr) comes at the end.
    std::cout << absl::StrFormat("%s of keyspace '%s' failed on node %s: %s\n",
                                 drop ? "drop" : "undrop", name, address,
                                 CallFailed(ctx, removed.status()).message());
  }
  return ok;
}

CommandResult Drop(const Context& ctx, bool drop) {
  if (ctx.args.size() != 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "keyspaces %s: give the keyspace's name: 'tally keyspaces %s NAME%s'",
        ctx.args[0], ctx.args[0], drop ? " --yes" : ""));
  }
  const std::string& name = ctx.args[1];
  if (absl::Status valid = storage::ValidateKeyspaceName(name); !valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("keyspaces ", ctx.args[0], ": ", valid.message()));
  }
  if (drop && !ctx.yes) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "keyspaces drop: nothing dropped. Dropping '%s' removes every row of "
        "it on node %s%s, and the node then refuses the name to every "
        "writer and session until 'tally keyspaces undrop'; give --yes to "
        "drop it",
        name, ctx.node, ctx.everywhere ? " and on each of its peers" : ""));
  }
  std::vector<std::string> nodes = {ctx.node};
  if (ctx.everywhere) {
    TALLY_ASSIGN_OR_RETURN(auto client, Connect(ctx, ctx.node));
    absl::StatusOr<v1::StatusResponse> status = client->Status();
    if (!status.ok()) return CallFailed(ctx, status.status());
    for (const v1::PeerStatus& peer : status->peers()) {
      nodes.push_back(peer.address());
    }
  }
  int failed = 0;
  for (const std::string& address : nodes) {
    if (!DropOn(ctx, address, name, drop)) ++failed;
  }
  if (failed > 0) {
    return absl::UnavailableError(absl::StrFormat(
        "keyspaces %s: failed on %d of %d nodes (above); run it again once "
        "they are reachable (a node where it was done says so)",
        ctx.args[0], failed, nodes.size()));
  }
  return 0;
}

}  // namespace

CommandResult Keyspaces(const Context& ctx) {
  if (ctx.args.empty()) {
    if (ctx.everywhere || ctx.yes) {
      return absl::InvalidArgumentError(
          "keyspaces: --yes and --everywhere go with 'drop NAME' or 'undrop "
          "NAME'");
    }
    return List(ctx);
  }
  if (ctx.args[0] == "drop") return Drop(ctx, /*drop=*/true);
  if (ctx.args[0] == "undrop") {
    if (ctx.yes) {
      return absl::InvalidArgumentError(
          "keyspaces undrop: --yes is for drop; an undrop removes nothing");
    }
    return Drop(ctx, /*drop=*/false);
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "keyspaces: '%s' is not an action; use 'tally keyspaces' to list, "
      "'tally keyspaces drop NAME --yes' or 'tally keyspaces undrop NAME'",
      absl::CHexEscape(ctx.args[0])));
}

}  // namespace cli
}  // namespace tally
