// What every `tally` command gets, and the pieces most of them share.
//
// tools/tally.cc parses the command line into a Context and calls one
// command (tools/cli/commands/commands.h); a command talks to nodes through
// node/client/client.h and prints. A command returns its exit code (0, or 1 for
// "different" / "absent"); an error status means exit 2 with its message
// as the one line on stderr.
//
//   Context ctx;                       // filled from the flags by tally.cc
//   ctx.args = {"127.0.0.1:7400", "127.0.0.1:7401"};
//   CommandResult r = Diff(ctx);
//
// Thread-compatible; a command runs on the main thread.
#ifndef TALLY_TOOLS_CLI_COMMANDS_COMMAND_H_
#define TALLY_TOOLS_CLI_COMMANDS_COMMAND_H_

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "node/client/client.h"
#include "node/client/tls.h"
#include "tools/cli/args.h"
#include "tools/cli/format.h"
#include "tree/diff/diff_scope.h"
#include "tree/version.h"

namespace tally {
namespace cli {

// The command line, as the commands read it: positional arguments and the
// value of every flag (their meaning is in tools/tally.cc's flag help).
struct Context {
  std::vector<std::string> args;  // positional arguments after the command
  FlagSet given;                  // flags given on the command line
  std::string keyspace;
  bool json = false;
  node::ClientOptions client_options;
  node::TlsFiles tls;  // what client_options.credentials were made of

  std::string node;  // --node: the node of put, get, del, load, status
  bool escaped = false;
  std::string file;    // load --file
  uint64_t count = 0;  // load --count
  uint64_t seed = 1;
  uint64_t value_size = 100;
  std::string peer;    // sync --peer
  std::string source;  // repair --source
  bool dry_run = false;
  // repair --bandwidth: MB/s, 0 unlimited.
  double bandwidth_mb = 0;
  bool all_keyspaces = false;    // diff, repair --all-keyspaces
  bool create_keyspace = false;  // put, del, load --create-keyspace
  bool yes = false;              // keyspaces drop --yes
  bool everywhere = false;       // keyspaces drop|undrop --everywhere
  bool values = false;           // diff of two nodes --values
  bool insert_only = false;      // repair --insert-only
  bool upsert_only = false;      // repair --upsert-only
  uint64_t max_rows = 0;         // repair --max-rows (0: no limit)
  std::string report;            // repair --report FILE
  // diff, repair --range / --keys-from (tools/cli/commands/diff_scope_flags.h).
  tree::DiffScope scope;
  bool third_party = false;
  std::vector<std::string> tables;  // --table
  // diff, repair of two PostgreSQL URLs: --columns, --exclude-columns,
  // --where.
  std::vector<std::string> columns;
  std::vector<std::string> exclude_columns;
  std::string where;
  std::string transfer;  // diff, repair of URLs: --transfer=rows|hashes
  std::string format;    // report --format
  std::string data_dir;
  std::string node_name;  // recover: when the store lost every record of it
  // argv as given (the URL commands run `tally-pg` with it: pg_diff.h).
  std::vector<std::string> command_line;
};

// Commands return their exit code (0 or 1); an error status means exit 2
// with its message as the one line on stderr.
using CommandResult = absl::StatusOr<int>;

inline constexpr int kTrouble = 2;

// One JSON object per line on stdout.
void PrintJson(const Json& value);

// Rewrites one line on stderr — only when stderr is a terminal, so that
// logs and pipes never see carriage returns.
class ProgressLine {
 public:
  ProgressLine() : enabled_(isatty(STDERR_FILENO) == 1) {}
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;
  ~ProgressLine() { Clear(); }

  bool enabled() const { return enabled_; }

  // At most ten updates a second: a terminal is slower than a fast repair.
  void Update(const std::string& text);
  void Clear();

 private:
  const bool enabled_;
  bool shown_ = false;
  absl::Time last_ = absl::InfinitePast();
};

// Positional argument `i` as bytes: as typed, or unescaped with --escaped
// (a shell cannot pass a NUL byte any other way); kInvalidArgument naming
// `what` for a bad escape.
absl::StatusOr<std::string> ArgBytes(const Context& ctx, size_t i,
                                     absl::string_view what);

// kInvalidArgument naming --keyspace when ctx.keyspace is not a valid name.
absl::Status CheckKeyspace(const Context& ctx);

// A client of the node at `address` (checked first: kInvalidArgument).
absl::StatusOr<std::unique_ptr<node::NodeClient>> Connect(
    const Context& ctx, const std::string& address);

// The client's errors already name the node and the call; a deadline
// additionally says which knob sets it, and a refused TLS handshake which
// --tls-* setting is the likely cause.
absl::Status CallFailed(const Context& ctx, const absl::Status& s);

tree::Version VersionOf(const v1::Version& proto);

// OK when the node (`client`) has ctx.keyspace, when it is "default", or
// with --create-keyspace; else kFailedPrecondition naming the node's
// keyspaces and the flag: a write would create the keyspace, and sessions
// would carry it to every node of the mesh.
absl::Status RequireKeyspace(const Context& ctx, node::NodeClient& client);

// The summary of `keyspace` on a node, or nullopt when the node lacks it.
absl::StatusOr<std::optional<v1::KeyspaceSummary>> FindKeyspace(
    const Context& ctx, node::NodeClient& client, const std::string& keyspace);

// `absent` (kNotFound: the keyspace is on neither node, ctx.args[0] nor
// [1]) with the keyspaces each node has appended, so that a user who left
// --keyspace at `default` sees what to give. Another status is returned as
// it is; a node that cannot be asked is left out of the list.
absl::Status ListKeyspacesInError(const Context& ctx,
                                  const absl::Status& absent);

// `tally diff|repair A B --all-keyspaces`: runs `command` once per keyspace
// either node has, in name order, with ctx.keyspace set to it; each prints
// its own lines (a summary line per keyspace). Returns the largest exit code,
// or an error naming the keyspaces that failed (after running the others).
// kInvalidArgument with --keyspace or PostgreSQL URLs; kNotFound when
// neither node has a keyspace.
CommandResult ForEachKeyspace(const Context& ctx,
                              CommandResult (*command)(const Context&));

// FAILED_PRECONDITION when the backends of nodes `a` and `b` give
// ctx.keyspace different schema fingerprints (node/sync/schema_check.h): its
// rows are then neither compared nor copied. OK when either lacks it.
absl::Status CheckSchemas(const Context& ctx, node::NodeClient& a,
                          node::NodeClient& b);

}  // namespace cli
}  // namespace tally

#endif  // TALLY_TOOLS_CLI_COMMANDS_COMMAND_H_
