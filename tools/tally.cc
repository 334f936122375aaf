// tally: the command-line tool for tally nodes.
//
//   tally put user:1 '{"name":"Ada"}'
//   tally --json get user:1
//   tally load --file=rows.jsonl
//   tally status
//   tally diff 127.0.0.1:7400 127.0.0.1:7401
//   tally repair --source=A 127.0.0.1:7400 127.0.0.1:7401
//   tally diff --third-party 127.0.0.1:7400 127.0.0.1:7401
//   tally diff 'postgresql://a/app?table=public.t' 'postgresql://b/app'
//   tally diff 'postgresql://a/app?table=public.t' 'mariadb://u@b/s?table=s.t'
//   tally verify --data-dir=/var/lib/tally
//   tally recover --data-dir=/var/lib/tally
//   tally --node=127.0.0.1:7400 peer pause 127.0.0.1:7401
//   tally sync 127.0.0.1:7400 --peer=127.0.0.1:7401
//
// A thin front end: the node's client library (node/client/client.h) does the
// talking, tree/diff/diff.h the diffing and node/sync/sync.h the repairing (on
// node A, through Admin.RunDiff, or here with --third-party); this file parses
// the command line into a cli::Context and runs one command, each in a file of
// its own (tools/cli/commands/commands.h), which prints. Exit codes follow
// diff(1): 0 equal / success, 1 different (or `get` of an absent key, as grep's
// "no match"; or a repair that leaves the nodes different), 2 trouble — always
// with exactly one "tally: ..." line on stderr.
//
// The flags live in this file because absl's --help lists the flags of the
// file named after the program.
#include <grpc/support/log.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "node/client/tls.h"
#include "node/exit.h"
#include "node/observe/version.h"
#include "tools/cli/args.h"
#include "tools/cli/commands/command.h"
#include "tools/cli/commands/commands.h"
#include "tools/cli/commands/diff_scope_flags.h"

ABSL_FLAG(std::string, node, "127.0.0.1:7400",
          "HOST:PORT of the node that put, get, del, load, status and peer "
          "talk to.");
ABSL_FLAG(std::string, keyspace, "default",
          "Keyspace for put, get, del, load, diff and repair; sync: the only "
          "keyspace to sync (without it, every keyspace).");
ABSL_FLAG(bool, json, false,
          "Machine-readable output: one JSON object per line.");
ABSL_FLAG(double, timeout, 30,
          "Deadline of each call to a node, in seconds. Streams (load, "
          "scans) get at least 30 minutes in total.");
ABSL_FLAG(bool, escaped, false,
          "put, get, del: KEY and VALUE are C-escaped, as diff prints keys "
          "(\\x00\\xff, \\n), so that any bytes can be given; diff, "
          "repair: so is each line of --keys-from.");
ABSL_FLAG(std::string, file, "",
          "load: JSON Lines file, one {\"key\": ..., \"value\": ...} per "
          "line; - reads standard input. Read once, as the rows are sent: a "
          "bad line stops the load there, and the error says how many rows "
          "were loaded.");
ABSL_FLAG(uint64_t, count, 0,
          "load: number of synthetic rows key-0..key-<N-1> to load.");
ABSL_FLAG(uint64_t, seed, 1,
          "load --count: seed of the synthetic values; the same seed loads "
          "the same rows.");
ABSL_FLAG(uint64_t, value_size, 100,
          "load --count: bytes per synthetic value.");
ABSL_FLAG(std::string, source, "",
          "repair: A or B (or its address): the authoritative node. The "
          "other becomes an exact copy of it, extra rows erased. Without "
          "it, repair is two-way, last writer wins.");
ABSL_FLAG(std::string, peer, "",
          "sync: the peer of node A to sync with, by its address or node "
          "name; without it, every peer that is not paused.");
ABSL_FLAG(bool, all_keyspaces, false,
          "diff, repair of two nodes: every keyspace either node has, one "
          "after the other in name order (a summary line each; exit code the "
          "worst of them), instead of --keyspace.");
ABSL_FLAG(bool, dry_run, false,
          "repair: print what would change, per key, and change nothing.");
ABSL_FLAG(double, bandwidth, 0,
          "repair: at most this many MB/s of rows (0: no limit of its own; "
          "the node's --node-bandwidth applies as well).");
ABSL_FLAG(std::string, range, "",
          "diff, repair of two nodes: only the keys whose tokens lie in "
          "FROM:TO (both included; hex, as the status page's heat map and "
          "`tally token` print them; an end left out is the first or last "
          "token).");
ABSL_FLAG(std::string, keys_from, "",
          "diff, repair of two nodes: only the keys listed in this file, one "
          "a line (- is standard input; with --escaped, C-escaped).");
ABSL_FLAG(bool, third_party, false,
          "diff, repair: run them from here, asking both nodes for their "
          "trees (and moving the rows through this tool), instead of asking "
          "node A to diff against B itself: for nodes that cannot reach "
          "each other. Used anyway when A cannot reach B or is an older "
          "tallyd.");
ABSL_FLAG(std::vector<std::string>, table, {},
          "diff, repair of two database URLs (PostgreSQL or MariaDB): the "
          "tables to compare; verify of a sidecar: the tables to verify; "
          "SCHEMA.TABLE (MariaDB: DATABASE.TABLE), comma separated or "
          "repeated (or table= in the URLs; default: every table with a "
          "primary key).");
ABSL_FLAG(std::vector<std::string>, columns, {},
          "diff, repair of two PostgreSQL URLs: compare only these columns "
          "(and the primary key, always); comma separated. A repair writes "
          "only them: a row it inserts takes the others' defaults.");
ABSL_FLAG(std::vector<std::string>, exclude_columns, {},
          "diff, repair of two PostgreSQL URLs: leave these columns out of "
          "the comparison (a `updated_at DEFAULT now()` column); comma "
          "separated; not a primary-key column.");
ABSL_FLAG(std::string, where, "",
          "diff, repair of two database URLs: compare only the rows for "
          "which this SQL condition holds, on each side (what follows "
          "WHERE, e.g. \"region = 'eu'\").");
ABSL_FLAG(std::string, transfer, "",
          "diff, repair of two PostgreSQL URLs: how rows are compared. "
          "auto (the default): chosen per table by measuring each link "
          "(round trip, throughput) and the table's size, and said in the "
          "summary; rows: every row of both tables is read here, the "
          "fastest over a fast link; hashes: each database sums its rows "
          "into 16,384 key buckets, and only the rows of the buckets that "
          "differ are read, for databases behind a slow or far link "
          "(PostgreSQL 14 or later).");
ABSL_FLAG(std::string, format, "html",
          "report: html (one self-contained page) or csv (a row per key).");
ABSL_FLAG(std::string, data_dir, "",
          "verify, recover: data directory of a stopped node (verify without "
          "it asks a running PostgreSQL sidecar, --node).");
ABSL_FLAG(std::string, report, "",
          "repair: write every differing key, its versions on A and B and "
          "what the repair did with it (a dry run: would do) to this file, "
          "as JSON lines, for review and for `tally recheck FILE`.");
ABSL_FLAG(bool, insert_only, false,
          "repair: copy only rows the other node lacks; overwrite, delete "
          "and erase nothing (those keys are listed as skipped).");
ABSL_FLAG(bool, upsert_only, false,
          "repair: copy and overwrite rows, but delete and erase nothing (no "
          "tombstone is copied; those keys are listed as skipped).");
ABSL_FLAG(uint64_t, max_rows, 0,
          "repair: stop before changing more than this many rows (the rows "
          "before the limit are changed; exit 2 saying so). 0: no limit.");
ABSL_FLAG(bool, values, false,
          "diff: under each difference, the row's value on A and on B as "
          "each holds it now (read by key after the difference was found; "
          "C-escaped, cut after 200 characters; in JSON whole, as a_now and "
          "b_now). Between two PostgreSQL URLs: the columns that differ, "
          "with both values (columns_differ and values in JSON), and a row "
          "on one side only whole. repair --report FILE --values: the "
          "report holds each key's values before and after the repair.");
ABSL_FLAG(bool, create_keyspace, false,
          "put, del, load: create --keyspace on the node when it lacks it "
          "(without it such a write is refused: a keyspace made by a typo "
          "would spread to every node of the mesh, for good). The keyspace "
          "'default' needs no flag.");
ABSL_FLAG(bool, yes, false,
          "keyspaces drop: confirm the drop (every row of the keyspace on "
          "the node goes; without it nothing is dropped).");
ABSL_FLAG(bool, everywhere, false,
          "keyspaces drop|undrop: also on every peer of --node (as its "
          "status lists them), so that the mesh drops the keyspace at once.");
ABSL_FLAG(std::string, node_name, "",
          "recover: the node's name (its tallyd --name), needed only when "
          "the damaged blocks held every record of it; recover says so.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate to present to nodes (with --tls-key); "
          "needed by nodes that run mutual TLS (--tls-ca).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA to check nodes' certificates against. Any --tls-* flag "
          "makes every connection TLS; without --tls-ca the system's roots "
          "check the node.");

namespace tally {
namespace cli {
namespace {

CommandResult Help(const Context&) {
  std::cout << UsageText() << "\n" << FlagsText("tools/tally.cc");
  return 0;
}

CommandResult Run(const std::string& command, const Context& ctx) {
  if (command == "put") return Put(ctx);
  if (command == "get") return Get(ctx);
  if (command == "del") return Delete(ctx);
  if (command == "load") return Load(ctx);
  if (command == "status") return Status(ctx);
  if (command == "diff") return Diff(ctx);
  if (command == "repair") return Repair(ctx);
  if (command == "verify") return Verify(ctx);
  if (command == "recover") return Recover(ctx);
  if (command == "peer") return Peer(ctx);
  if (command == "token") return Token(ctx);
  if (command == "sync") return Sync(ctx);
  if (command == "keyspaces") return Keyspaces(ctx);
  if (command == "recheck") return Recheck(ctx);
  if (command == "report") return Report(ctx);
  return Help(ctx);
}

// One line, whatever the message holds (gRPC details can span lines).
int Trouble(const absl::Status& status) {
  std::string message(status.message());
  absl::StrReplaceAll({{"\r\n", " "}, {"\n", " "}, {"\r", " "}}, &message);
  std::fprintf(stderr, "tally: %s\n", message.c_str());
  return kTrouble;
}

// absl keeps only the last of a repeated list flag; `--table=a --table=b`
// means both, so the values are joined into one `--table=a,b` (where the
// first one stood). Runs on JoinFlagValues' output; stops at a bare "--".
void MergeRepeatedTables(std::vector<std::string>* args) {
  std::vector<std::string> out;
  std::optional<size_t> merged;
  for (size_t i = 0; i < args->size(); ++i) {
    const std::string& arg = (*args)[i];
    if (arg == "--") {
      out.insert(out.end(), args->begin() + i, args->end());
      break;
    }
    absl::string_view value(arg);
    if (!absl::ConsumePrefix(&value, "--table=") &&
        !absl::ConsumePrefix(&value, "-table=")) {
      out.push_back(arg);
      continue;
    }
    if (!merged.has_value()) {
      merged = out.size();
      out.push_back(arg);
    } else if (!value.empty()) {
      absl::StrAppend(&out[*merged], ",", value);
    }
  }
  *args = std::move(out);
}

void DiscardGrpcLog(gpr_log_func_args*) {}

int Main(int argc, char** argv) {
  // gRPC logs a refused TLS handshake on stderr itself; tally promises one
  // line there, and the error it returns says it all. GRPC_VERBOSITY set
  // brings gRPC's lines back for debugging.
  if (std::getenv("GRPC_VERBOSITY") == nullptr) {
    gpr_set_log_function(DiscardGrpcLog);
  }
  absl::SetProgramUsageMessage(UsageText());
  // absl's --version prints this; its default is a build-mode line
  // ("Debug build (NDEBUG not #defined)") that names no version.
  absl::FlagsUsageConfig usage_config;
  usage_config.version_string = [] {
    return node::VersionText("tally") + "\n";
  };
  absl::SetFlagsUsageConfig(usage_config);
  std::vector<std::string> args(argv + 1, argv + argc);
  // absl would read flag files itself, and report a bad one with exit 1.
  absl::Status expanded = ExpandFlagfiles(&args);
  if (!expanded.ok()) return Trouble(expanded);
  NormalizeFlagNames(&args);
  if (WantsHelp(args)) {
    Help(Context{}).IgnoreError();
    return 0;
  }
  // Checked before absl parses: absl reports a bad flag by printing its
  // whole usage and exiting 1, which reads as "different" to a script.
  absl::StatusOr<FlagSet> given = ScanFlags(args);
  if (!given.ok()) return Trouble(given.status());
  JoinFlagValues(&args);
  MergeRepeatedTables(&args);

  std::vector<char*> normalized = {argv[0]};
  for (std::string& arg : args) normalized.push_back(arg.data());
  std::vector<char*> positional = absl::ParseCommandLine(
      static_cast<int>(normalized.size()), normalized.data());
  if (positional.size() < 2) {
    return Trouble(absl::InvalidArgumentError(
        "no command given; 'tally help' lists the commands"));
  }
  const std::string command = positional[1];
  const CommandSpec* spec = FindCommand(command);
  if (spec == nullptr) {
    return Trouble(absl::InvalidArgumentError(
        absl::StrFormat("unknown command '%s'; 'tally help' lists the commands",
                        absl::CHexEscape(command))));
  }
  Context ctx;
  ctx.command_line.assign(argv, argv + argc);
  ctx.args.assign(positional.begin() + 2, positional.end());
  ctx.given = *std::move(given);
  absl::Status ok = CheckCommandLine(*spec, ctx.args.size(), ctx.given);
  if (!ok.ok()) return Trouble(ok);

  const double timeout = absl::GetFlag(FLAGS_timeout);
  if (!(timeout > 0) || timeout > 365 * 24 * 3600) {
    return Trouble(absl::InvalidArgumentError(absl::StrFormat(
        "--timeout=%g is out of range; it is seconds, more than 0", timeout)));
  }
  ctx.keyspace = absl::GetFlag(FLAGS_keyspace);
  ctx.json = absl::GetFlag(FLAGS_json);
  ctx.node = absl::GetFlag(FLAGS_node);
  ctx.escaped = absl::GetFlag(FLAGS_escaped);
  ctx.file = absl::GetFlag(FLAGS_file);
  ctx.count = absl::GetFlag(FLAGS_count);
  ctx.seed = absl::GetFlag(FLAGS_seed);
  ctx.value_size = absl::GetFlag(FLAGS_value_size);
  ctx.peer = absl::GetFlag(FLAGS_peer);
  ctx.source = absl::GetFlag(FLAGS_source);
  ctx.dry_run = absl::GetFlag(FLAGS_dry_run);
  ctx.bandwidth_mb = absl::GetFlag(FLAGS_bandwidth);
  ctx.all_keyspaces = absl::GetFlag(FLAGS_all_keyspaces);
  ctx.third_party = absl::GetFlag(FLAGS_third_party);
  ctx.create_keyspace = absl::GetFlag(FLAGS_create_keyspace);
  ctx.yes = absl::GetFlag(FLAGS_yes);
  ctx.everywhere = absl::GetFlag(FLAGS_everywhere);
  ctx.values = absl::GetFlag(FLAGS_values);
  ctx.insert_only = absl::GetFlag(FLAGS_insert_only);
  ctx.upsert_only = absl::GetFlag(FLAGS_upsert_only);
  ctx.max_rows = absl::GetFlag(FLAGS_max_rows);
  ctx.report = absl::GetFlag(FLAGS_report);
  if (ctx.given.count("report") > 0 && ctx.report.empty()) {
    return Trouble(absl::InvalidArgumentError(
        "--report is empty; give the file to write the report to"));
  }
  if (ctx.insert_only && ctx.upsert_only) {
    return Trouble(absl::InvalidArgumentError(
        "--insert-only and --upsert-only exclude each other"));
  }
  // nullopt: not given (an empty value given is refused, not "all").
  auto given_flag = [&](absl::string_view name, const std::string& value) {
    return ctx.given.count(std::string(name)) > 0
               ? std::optional<std::string>(value)
               : std::nullopt;
  };
  absl::StatusOr<tree::DiffScope> scope = ReadDiffScope(
      given_flag("range", absl::GetFlag(FLAGS_range)),
      given_flag("keys_from", absl::GetFlag(FLAGS_keys_from)), ctx.escaped);
  if (!scope.ok()) return Trouble(scope.status());
  ctx.scope = *std::move(scope);
  ctx.tables = absl::GetFlag(FLAGS_table);
  ctx.columns = absl::GetFlag(FLAGS_columns);
  ctx.exclude_columns = absl::GetFlag(FLAGS_exclude_columns);
  ctx.where = absl::GetFlag(FLAGS_where);
  ctx.transfer = absl::GetFlag(FLAGS_transfer);
  ctx.format = absl::GetFlag(FLAGS_format);
  // An unset shell variable must not widen a comparison to everything.
  for (const auto& [flag, empty] :
       {std::pair<const char*, bool>{"columns", ctx.columns.empty()},
        {"exclude-columns", ctx.exclude_columns.empty()},
        {"where", ctx.where.empty()}}) {
    if (ctx.given.count(absl::StrReplaceAll(flag, {{"-", "_"}})) > 0 && empty) {
      return Trouble(absl::InvalidArgumentError(absl::StrCat(
          "--", flag,
          " is empty; leave the flag out to compare every column and row")));
    }
  }
  ctx.data_dir = absl::GetFlag(FLAGS_data_dir);
  ctx.node_name = absl::GetFlag(FLAGS_node_name);
  ctx.client_options.rpc_timeout = absl::Seconds(timeout);
  ctx.client_options.stream_timeout =
      std::max(ctx.client_options.stream_timeout, absl::Seconds(timeout));
  ctx.tls =
      node::TlsFiles{absl::GetFlag(FLAGS_tls_cert),
                     absl::GetFlag(FLAGS_tls_key), absl::GetFlag(FLAGS_tls_ca)};
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      node::MakeChannelCredentials(ctx.tls);
  if (!credentials.ok()) return Trouble(credentials.status());
  ctx.client_options.credentials = *std::move(credentials);

  CommandResult result = Run(command, ctx);
  std::cout.flush();
  if (!result.ok()) return Trouble(result.status());
  return *result;
}

}  // namespace
}  // namespace cli
}  // namespace tally

int main(int argc, char** argv) {
  // Nothing below throws on purpose; this turns a surprise (bad_alloc, a
  // library's exception) into the promised one line and exit 2 instead of
  // an abort.
  int code = 2;
  try {
    code = tally::cli::Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tally: internal error: %s\n", e.what());
  }
  // Main's clients are gone; see node/exit.h for why no teardown runs.
  tally::node::ExitSkippingTeardown(code);
}
