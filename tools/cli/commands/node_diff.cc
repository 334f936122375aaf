#include "tools/cli/commands/node_diff.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "mariadb/url.h"
#include "node/client/replica.h"
#include "tools/cli/commands/command.h"
#include "tools/cli/commands/commands.h"
#include "tools/cli/format.h"
#include "tools/cli/pg/pg_diff.h"
#include "tools/cli/pg_url.h"
#include "tree/status_macros.h"

namespace tally {
namespace cli {

// Why a RunDiff on A is run from here instead, or nullopt when it is not:
// only before A streamed anything, and only when A could not reach B or
// does not know the call.
std::optional<std::string> FallbackReason(const absl::Status& status,
                                          bool streamed, const std::string& a) {
  if (status.ok() || streamed) return std::nullopt;
  if (absl::IsUnimplemented(status)) {
    return absl::StrFormat("node %s has no RunDiff (an older tallyd)", a);
  }
  // A refuses to diff against itself (B names A, by its address or under
  // its name); from here the two are compared as before: equal.
  if (node::PeerIsSelf(status)) {
    return absl::StrFormat("node %s and B are the same node", a);
  }
  if (absl::IsUnavailable(status) && node::UnreachablePeer(status)) {
    return std::string(
        status.message());  // "node A (name) cannot reach B: ..."
  }
  return std::nullopt;
}

// The fallback's note goes on stderr once the run from here is over: as a
// line of its own after a success, within the one error line after a
// failure.
CommandResult WithFallbackNote(const std::optional<std::string>& reason,
                               CommandResult result) {
  if (!reason.has_value()) return result;
  if (!result.ok()) {
    return absl::Status(
        result.status().code(),
        absl::StrCat(result.status().message(), " (ran it from here because ",
                     *reason, ")"));
  }
  std::fprintf(stderr, "tally: %s; ran it from here instead\n",
               reason->c_str());
  return result;
}

// One side of a difference as A streamed it.
tree::RowEntry EntryOf(const std::string& key, const v1::DiffSide& side) {
  tree::RowEntry entry;
  entry.key = key;
  entry.version = VersionOf(side.version());
  entry.deleted = side.deleted();
  return entry;
}

// Connects to A only and waits for the connection, so that its set-up is
// not inside the diff's timing.
absl::StatusOr<std::unique_ptr<node::NodeClient>> ConnectToA(
    const Context& ctx) {
  constexpr absl::Duration kConnectWait = absl::Seconds(3);
  TALLY_ASSIGN_OR_RETURN(auto a, Connect(ctx, ctx.args[0]));
  a->AwaitConnection(std::min(ctx.client_options.rpc_timeout, kConnectWait));
  return a;
}

Json DiffStatsJson(const tree::DiffStats& stats, double seconds) {
  return {{"differences", stats.differences},
          {"rounds", stats.rounds},
          {"bytes_sent", stats.bytes_sent},
          {"bytes_received", stats.bytes_received},
          {"seconds", seconds}};
}

std::string DiffStatsText(const tree::DiffStats& stats) {
  return absl::StrFormat("%d round%s, %s sent, %s received", stats.rounds,
                         stats.rounds == 1 ? "" : "s",
                         HumanBytes(stats.bytes_sent),
                         HumanBytes(stats.bytes_received));
}

tree::DiffStats DiffStatsOf(const v1::RunDiffSummary& summary) {
  tree::DiffStats stats;
  stats.differences = summary.differences();
  stats.rounds = summary.rounds();
  stats.bytes_sent = summary.bytes_sent();
  stats.bytes_received = summary.bytes_received();
  return stats;
}

// Sets up both connections at once and before the first round, so that a
// diff's rounds and its timing do not include them. A node that cannot be
// reached is reported by the first call, as without this; a link that
// swallows packets delays that report by at most kConnectWait.
void ConnectBoth(const Context& ctx, node::NodeClient& a, node::NodeClient& b) {
  constexpr absl::Duration kConnectWait = absl::Seconds(3);
  const absl::Duration wait =
      std::min(ctx.client_options.rpc_timeout, kConnectWait);
  a.StartConnecting();
  b.StartConnecting();
  a.AwaitConnection(wait);
  b.AwaitConnection(wait);
}

// "~1000000" or "?" for an unknown estimate.
std::string Estimate(uint64_t rows) {
  return rows == 0 ? std::string("?") : absl::StrCat("~", rows);
}

// A table's comparison under way: a line on the terminal, and with --json
// a {"progress": ...} object.
void ShowPgProgress(const Context& ctx, const PgDiffProgress& p,
                    ProgressLine& line) {
  std::string text;
  if (p.step == "hashing") {
    text = absl::StrFormat(
        "%s: both databases hashing their rows into buckets (%s rows in a, "
        "%s in b), %.0f s",
        p.table, Estimate(p.rows_estimated_a), Estimate(p.rows_estimated_b),
        p.elapsed_seconds);
  } else if (p.buckets_differing > 0) {
    text = absl::StrFormat(
        "%s: reading the rows of %d differing buckets: %d from a, %d from b, "
        "%.0f s",
        p.table, p.buckets_differing, p.rows_read_a, p.rows_read_b,
        p.elapsed_seconds);
  } else {
    text = absl::StrFormat(
        "%s: read %d of %s rows from a (%s), %d of %s from b (%s), %.0f s",
        p.table, p.rows_read_a, Estimate(p.rows_estimated_a),
        HumanBytes(p.bytes_read_a), p.rows_read_b, Estimate(p.rows_estimated_b),
        HumanBytes(p.bytes_read_b), p.elapsed_seconds);
  }
  line.Update(text);
  if (!ctx.json) return;
  PrintJson({{"progress",
              {{"table", p.table},
               {"step", p.step},
               {"rows_read_a", p.rows_read_a},
               {"rows_read_b", p.rows_read_b},
               {"bytes_read_a", p.bytes_read_a},
               {"bytes_read_b", p.bytes_read_b},
               {"rows_estimated_a",
                p.rows_estimated_a == 0 ? Json() : Json(p.rows_estimated_a)},
               {"rows_estimated_b",
                p.rows_estimated_b == 0 ? Json() : Json(p.rows_estimated_b)},
               {"buckets_differing", p.buckets_differing},
               {"elapsed_seconds", p.elapsed_seconds}}}});
  std::cout.flush();
}

// `tally diff URL URL` / `tally repair URL URL`: two PostgreSQL databases
// compared directly (tools/cli/pg/pg_diff.h), no node involved.
std::optional<CommandResult> MaybePostgres(const Context& ctx, bool repair) {
  const bool url_a =
      IsPostgresUrl(ctx.args[0]) || mariadb::IsMariaDbUrl(ctx.args[0]);
  const bool url_b =
      IsPostgresUrl(ctx.args[1]) || mariadb::IsMariaDbUrl(ctx.args[1]);
  if (!url_a && !url_b) {
    if (!ctx.columns.empty() || !ctx.exclude_columns.empty() ||
        !ctx.where.empty() || !ctx.transfer.empty()) {
      return CommandResult(absl::InvalidArgumentError(
          "--columns, --exclude-columns, --where and --transfer are for two "
          "PostgreSQL URLs; between nodes, --range and --keys-from choose "
          "the rows"));
    }
    return std::nullopt;
  }
  if (url_a != url_b) {
    return CommandResult(absl::InvalidArgumentError(
        "give two database URLs (postgresql://, mariadb://) or two node "
        "addresses, not one of each"));
  }
  if (!ctx.scope.IsWhole()) {
    return CommandResult(absl::InvalidArgumentError(
        "--range and --keys-from are for two nodes; between PostgreSQL "
        "databases --table chooses what is compared"));
  }
  if (ctx.insert_only || ctx.upsert_only || ctx.max_rows > 0) {
    return CommandResult(absl::InvalidArgumentError(
        "--insert-only, --upsert-only and --max-rows are for two nodes"));
  }
  if (repair && ctx.values) {
    return CommandResult(absl::InvalidArgumentError(
        "repair --values is for two nodes; between PostgreSQL databases, run "
        "diff --values first"));
  }
  PgDiffOptions options;
  options.url_a = ctx.args[0];
  options.url_b = ctx.args[1];
  options.tables = ctx.tables;
  options.columns = ctx.columns;
  options.exclude_columns = ctx.exclude_columns;
  options.where = ctx.where;
  options.transfer = ctx.transfer;
  options.values = ctx.values && !repair;
  options.json = ctx.json;
  options.timeout = ctx.client_options.rpc_timeout;
  options.repair = repair;
  options.source = ctx.source;
  options.dry_run = ctx.dry_run;
  options.command_line = ctx.command_line;
  ProgressLine progress;
  if (progress.enabled() || ctx.json) {
    options.on_progress = [&](const PgDiffProgress& p) {
      ShowPgProgress(ctx, p, progress);
    };
  }
  absl::StatusOr<int> code = RunPgDiff(options);
  progress.Clear();
  return CommandResult(std::move(code));
}

namespace {

void AddRoot(const v1::RunDiffRoot& part, v1::RunDiffRoot* total) {
  if (!part.has_keyspace()) return;
  tree::Digest128 root;
  if (total->has_keyspace() && total->root().size() == 16) {
    root = tree::Digest128::Load(total->root().data());
  }
  if (part.root().size() == 16) {
    root ^= tree::Digest128::Load(part.root().data());
  }
  std::string bytes;
  root.AppendTo(&bytes);
  total->set_root(std::move(bytes));
  total->set_row_count(total->row_count() + part.row_count());
  total->set_has_keyspace(true);
}

}  // namespace

void AddRunDiffSummary(const v1::RunDiffSummary& part,
                       v1::RunDiffSummary* total) {
  total->set_differences(total->differences() + part.differences());
  total->set_rounds(total->rounds() + part.rounds());
  total->set_bytes_sent(total->bytes_sent() + part.bytes_sent());
  total->set_bytes_received(total->bytes_received() + part.bytes_received());
  total->set_seconds(total->seconds() + part.seconds());
  total->set_a_has_keyspace(total->a_has_keyspace() || part.a_has_keyspace());
  total->set_b_has_keyspace(total->b_has_keyspace() || part.b_has_keyspace());
  total->set_rows_to_a(total->rows_to_a() + part.rows_to_a());
  total->set_rows_to_b(total->rows_to_b() + part.rows_to_b());
  total->set_erased(total->erased() + part.erased());
  total->set_ignored(total->ignored() + part.ignored());
  total->set_conflicts(total->conflicts() + part.conflicts());
  total->set_repair_bytes(total->repair_bytes() + part.repair_bytes());
  total->set_rows_changed(total->rows_changed() + part.rows_changed());
  total->set_skipped(total->skipped() + part.skipped());
  if (part.has_a_after()) AddRoot(part.a_after(), total->mutable_a_after());
  if (part.has_b_after()) AddRoot(part.b_after(), total->mutable_b_after());
}

std::string ScopeText(const Context& ctx) {
  const std::string scope = ctx.scope.Describe();
  return scope.empty() ? "" : absl::StrCat(" (", scope, ")");
}

void AddScopeJson(const Context& ctx, Json* summary) {
  if (!ctx.scope.range.IsAll()) {
    (*summary)["range"] = ctx.scope.range.ToString();
  }
  if (ctx.scope.keys != nullptr) {
    (*summary)["keys"] = ctx.scope.keys->size();
  }
}

}  // namespace cli
}  // namespace tally
