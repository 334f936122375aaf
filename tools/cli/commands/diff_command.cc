// diff: the keys two nodes (or two PostgreSQL databases) hold differently.
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tools/cli/commands/command.h"
#include "tools/cli/commands/commands.h"
#include "tools/cli/commands/diff_scope_flags.h"
#include "tools/cli/commands/node_diff.h"
#include "tools/cli/commands/row_value.h"
#include "tools/cli/format.h"
#include "tree/diff/absent_as_empty_view.h"
#include "tree/diff/diff.h"
#include "tree/status_macros.h"

namespace tally {
namespace cli {
namespace {

// What a diff found, wherever it ran.
struct DiffOutcome {
  tree::DiffStats stats;
  double seconds = 0;
  bool a_absent = false;
  bool b_absent = false;
};

// --values: the nodes whose rows a difference names, read again by key.
struct ValueSources {
  node::NodeClient* a = nullptr;
  node::NodeClient* b = nullptr;
};

void PrintDifference(const Context& ctx, const ValueSources& sources,
                     const tree::RowEntry* in_a, const tree::RowEntry* in_b) {
  std::optional<ReadValue> value_a, value_b;
  if (ctx.values && sources.a != nullptr && sources.b != nullptr) {
    const std::string& key = DifferenceKey(in_a, in_b);
    value_a = ReadRowValue(ctx, *sources.a, key);
    value_b = ReadRowValue(ctx, *sources.b, key);
  }
  if (ctx.json) {
    Json out = DifferenceJson(in_a, in_b);
    if (value_a.has_value()) {
      out["a_now"] = ValueJson(*value_a);
      out["b_now"] = ValueJson(*value_b);
    }
    PrintJson(out);
  } else {
    std::cout << DifferenceText(in_a, in_b) << "\n";
    if (value_a.has_value()) {
      std::cout << "    A now: " << ValueText(*value_a) << "\n"
                << "    B now: " << ValueText(*value_b) << "\n";
    }
  }
}

// The diff from here: both nodes' trees, compared by this process.
absl::StatusOr<DiffOutcome> DiffFromHere(const Context& ctx) {
  TALLY_ASSIGN_OR_RETURN(auto a, Connect(ctx, ctx.args[0]));
  TALLY_ASSIGN_OR_RETURN(auto b, Connect(ctx, ctx.args[1]));
  ConnectBoth(ctx, *a, *b);
  TALLY_RETURN_IF_ERROR(CheckSchemas(ctx, *a, *b));
  // "A has 10 rows, B has none" is a diff, not an error.
  tree::AbsentAsEmptyView view_a(a->NewTreeView(ctx.keyspace));
  tree::AbsentAsEmptyView view_b(b->NewTreeView(ctx.keyspace));
  std::unique_ptr<tree::TreeView> part_a = tree::NarrowView(view_a, ctx.scope);
  std::unique_ptr<tree::TreeView> part_b = tree::NarrowView(view_b, ctx.scope);
  DiffOutcome outcome;
  const ValueSources sources{a.get(), b.get()};
  const absl::Time start = absl::Now();
  absl::Status status = tree::DiffViews(
      part_a != nullptr ? *part_a : view_a,
      part_b != nullptr ? *part_b : view_b, tree::DiffOptions{},
      [&](const tree::RowEntry* in_a, const tree::RowEntry* in_b) {
        PrintDifference(ctx, sources, in_a, in_b);
        return absl::OkStatus();
      },
      &outcome.stats);
  outcome.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::cout.flush();
  if (!status.ok()) return CallFailed(ctx, status);
  outcome.a_absent = view_a.absent();
  outcome.b_absent = view_b.absent();
  return outcome;
}

// The diff on A, or nullopt with `*fallback` set when it is to run from
// here instead.
absl::StatusOr<std::optional<DiffOutcome>> DiffOnA(
    const Context& ctx, std::optional<std::string>* fallback) {
  TALLY_ASSIGN_OR_RETURN(auto a, ConnectToA(ctx));
  // --values reads each differing row on both nodes from here.
  std::unique_ptr<node::NodeClient> b;
  if (ctx.values) {
    TALLY_ASSIGN_OR_RETURN(b, Connect(ctx, ctx.args[1]));
  }
  const ValueSources sources{a.get(), b.get()};
  v1::RunDiffRequest request;
  request.set_peer(ctx.args[1]);
  request.set_keyspace(ctx.keyspace);
  request.set_mode(v1::RUN_DIFF_MODE_DIFF);
  bool streamed = false;
  std::optional<v1::RunDiffSummary> summary;
  // A long --keys-from list takes several calls, reported as one.
  for (const tree::DiffScope& part : RequestScopes(ctx.scope)) {
    SetScope(part, &request);
    std::optional<v1::RunDiffSummary> part_summary;
    const absl::Status status = a->RunDiff(request, [&](v1::RunDiffEvent& e) {
      streamed = true;
      for (const v1::DiffDifference& d : e.differences()) {
        const tree::RowEntry in_a = EntryOf(d.key(), d.a());
        const tree::RowEntry in_b = EntryOf(d.key(), d.b());
        PrintDifference(ctx, sources, d.has_a() ? &in_a : nullptr,
                        d.has_b() ? &in_b : nullptr);
      }
      if (e.has_summary()) part_summary = e.summary();
      return absl::OkStatus();
    });
    std::cout.flush();
    *fallback = FallbackReason(status, streamed, a->address());
    if (fallback->has_value()) return std::optional<DiffOutcome>();
    if (!status.ok()) return CallFailed(ctx, status);
    if (!part_summary.has_value()) {
      return absl::DataLossError(absl::StrFormat(
          "node %s ended the diff without its summary", a->address()));
    }
    if (!summary.has_value()) summary.emplace();
    AddRunDiffSummary(*part_summary, &*summary);
  }
  DiffOutcome outcome;
  outcome.stats = DiffStatsOf(*summary);
  outcome.seconds = summary->seconds();
  outcome.a_absent = !summary->a_has_keyspace();
  outcome.b_absent = !summary->b_has_keyspace();
  return std::optional<DiffOutcome>(outcome);
}

CommandResult PrintDiff(const Context& ctx, const DiffOutcome& outcome) {
  const std::string& a = ctx.args[0];
  const std::string& b = ctx.args[1];
  if (outcome.a_absent && outcome.b_absent) {
    return ListKeyspacesInError(ctx,
                                tree::KeyspaceAbsentOnBoth(ctx.keyspace, a, b));
  }
  const tree::DiffStats& stats = outcome.stats;
  if (ctx.json) {
    Json summary = DiffStatsJson(stats, outcome.seconds);
    summary["keyspace"] = ctx.keyspace;
    AddScopeJson(ctx, &summary);
    summary["a_has_keyspace"] = !outcome.a_absent;
    summary["b_has_keyspace"] = !outcome.b_absent;
    PrintJson({{"summary", summary}});
  } else {
    std::string absent;
    if (outcome.a_absent || outcome.b_absent) {
      absent = absl::StrFormat("; keyspace absent on %s, compared as empty",
                               outcome.a_absent ? "a" : "b");
    }
    std::cout << absl::StrFormat(
        "%s: keyspace '%s'%s on a=%s and b=%s (%s, %.3f s%s)\n",
        stats.differences == 0
            ? std::string("equal")
            : absl::StrCat(stats.differences, stats.differences == 1
                                                  ? " key differs"
                                                  : " keys differ"),
        ctx.keyspace, ScopeText(ctx), a, b, DiffStatsText(stats),
        outcome.seconds, absent);
  }
  return stats.differences == 0 ? 0 : 1;
}

}  // namespace

CommandResult Diff(const Context& ctx) {
  if (ctx.all_keyspaces) return ForEachKeyspace(ctx, &Diff);
  if (auto pg = MaybePostgres(ctx, /*repair=*/false)) return *std::move(pg);
  TALLY_RETURN_IF_ERROR(CheckKeyspace(ctx));
  // Both addresses are checked here, whichever node dials B.
  for (const std::string& address : ctx.args) {
    TALLY_RETURN_IF_ERROR(Connect(ctx, address).status());
  }
  std::optional<std::string> fallback;
  if (!ctx.third_party) {
    TALLY_ASSIGN_OR_RETURN(std::optional<DiffOutcome> on_a,
                           DiffOnA(ctx, &fallback));
    if (on_a.has_value()) return PrintDiff(ctx, *on_a);
  }
  absl::StatusOr<DiffOutcome> here = DiffFromHere(ctx);
  if (!here.ok()) return WithFallbackNote(fallback, here.status());
  return WithFallbackNote(fallback, PrintDiff(ctx, *here));
}

}  // namespace cli
}  // namespace tally
