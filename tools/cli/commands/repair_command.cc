// repair: two nodes made equal, two-way (last writer wins) or from a source.
#include <atomic>
#include <csignal>
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "node/client/replica.h"
#include "node/sync/rows_to_move.h"
#include "node/sync/sync.h"
#include "tools/cli/commands/command.h"
#include "tools/cli/commands/commands.h"
#include "tools/cli/commands/diff_scope_flags.h"
#include "tools/cli/commands/node_diff.h"
#include "tools/cli/commands/repair_report.h"
#include "tools/cli/commands/row_value.h"
#include "tools/cli/format.h"
#include "tools/cli/progress_report.h"
#include "tree/diff/absent_as_empty_view.h"
#include "tree/diff/diff.h"
#include "tree/progress_meter.h"
#include "tree/status_macros.h"

namespace tally {
namespace cli {
namespace {

// Set by the first Ctrl-C during a repair: the sync stops between batches,
// so that no batch is left half applied on the way out.
std::atomic<bool> interrupted{false};

extern "C" void OnInterrupt(int) {
  interrupted.store(true);
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends the process at once
}

// A keyspace's root on a node after a repair.
struct Root {
  std::string hex = std::string(32, '0');
  uint64_t rows = 0;
  bool present = false;
};

// What a repair is asked to do, in the user's terms (A and B as given).
struct RepairPlan {
  bool one_way = false;
  bool dry_run = false;
  bool source_is_b = false;  // with one_way: B is the source, A the copy
  // --report: where every differing key goes, with its action (null: none).
  RepairReportWriter* report = nullptr;
  // --report with --values: the nodes, to read each key's values from.
  node::NodeClient* values_a = nullptr;
  node::NodeClient* values_b = nullptr;
  // A real repair's first pass, a dry run: collects the differing keys
  // here (nothing printed or written) to read their values before.
  std::vector<std::string>* collect_keys = nullptr;
  // The values read before a real repair, by key.
  const absl::flat_hash_map<std::string, std::pair<ReadValue, ReadValue>>*
      before = nullptr;
  // A real repair's report lines, held until the repair ends and their
  // values after it are read (FinishReport).
  std::vector<Json>* held_lines = nullptr;
  bool wants_keys() const {
    return report != nullptr || collect_keys != nullptr;
  }
  std::string source_label() const { return source_is_b ? "B" : "A"; }
  std::string copy_label() const { return source_is_b ? "A" : "B"; }
};

// What a repair did (a dry run: would do), wherever it ran; A and B as the
// user named them.
struct RepairOutcome {
  node::SyncStats stats;  // rows_to_a and rows_to_b unused: see below
  uint64_t to_a = 0;
  uint64_t to_b = 0;
  uint64_t would_copy_to_a = 0;
  uint64_t would_copy_to_b = 0;
  uint64_t would_erase = 0;
  Root root_a;
  Root root_b;
  absl::Status report_status;  // the first failed write to --report
};

// One key a repair changes (a dry run: would change): printed in a dry run,
// written to the report when there is one, and counted.
void PrintPlanned(const Context& ctx, const RepairPlan& plan,
                  const tree::RowEntry* in_a, const tree::RowEntry* in_b,
                  v1::DiffAction action, RepairOutcome* outcome) {
  if (plan.collect_keys != nullptr) {
    plan.collect_keys->push_back(DifferenceKey(in_a, in_b));
    return;
  }
  std::string name;  // JSON
  std::string what;  // text
  // A tombstone copied over a row deletes it: said as a delete.
  switch (action) {
    case v1::DIFF_ACTION_COPY_TO_A:
      name = in_b != nullptr && in_b->deleted ? "delete_on_a" : "copy_to_a";
      what = in_b != nullptr && in_b->deleted ? "would delete on A"
                                              : "would copy to A";
      ++outcome->would_copy_to_a;
      break;
    case v1::DIFF_ACTION_COPY_TO_B:
      name = in_a != nullptr && in_a->deleted ? "delete_on_b" : "copy_to_b";
      what = in_a != nullptr && in_a->deleted ? "would delete on B"
                                              : "would copy to B";
      ++outcome->would_copy_to_b;
      break;
    case v1::DIFF_ACTION_SKIPPED:
      name = "skipped";
      what =
          ctx.insert_only ? "skipped (insert-only)" : "skipped (upsert-only)";
      break;
    case v1::DIFF_ACTION_ERASE_FROM_A:
      name = "erase_from_a";
      what = "would erase from A";
      ++outcome->would_erase;
      break;
    case v1::DIFF_ACTION_ERASE_FROM_B:
      name = "erase_from_b";
      what = "would erase from B";
      ++outcome->would_erase;
      break;
    default:
      name = "conflict";  // SyncStats counts these, dry run or not
      what = "conflict (left alone)";
      break;
  }
  Json line = DifferenceJson(in_a, in_b);
  line["action"] = name;
  if (plan.values_a != nullptr && plan.report != nullptr) {
    const std::string& key = DifferenceKey(in_a, in_b);
    if (plan.before != nullptr) {
      auto it = plan.before->find(key);
      if (it != plan.before->end()) {
        line["a_before"] = ValueJson(it->second.first);
        line["b_before"] = ValueJson(it->second.second);
      }
    } else if (plan.dry_run) {
      // Nothing changes: the values now are the values before.
      line["a_before"] = ValueJson(ReadRowValue(ctx, *plan.values_a, key));
      line["b_before"] = ValueJson(ReadRowValue(ctx, *plan.values_b, key));
    }
  }
  if (plan.held_lines != nullptr) {
    plan.held_lines->push_back(line);
  } else if (plan.report != nullptr) {
    // A failed write ends in the summary's check (FinishReport).
    outcome->report_status.Update(plan.report->Write(line));
  }
  if (!plan.dry_run) return;  // a real repair streams keys for the report
  if (ctx.json) {
    PrintJson(line);
  } else {
    std::cout << absl::StrFormat("%-22s %s\n", what,
                                 DifferenceText(in_a, in_b, "A", "B"));
  }
}

// Where a real repair is, wherever it runs, with A and B as the user named
// them: the rows copied both ways against the rows to copy when the row
// counts give a total (node/sync/rows_to_move.h), else with the time left
// unknown.
struct RepairProgress {
  uint64_t differences = 0;
  uint64_t to_a = 0;
  uint64_t to_b = 0;
  tree::ProgressEstimate estimate;  // of rows copied, to_a + to_b
};

// Shows `p` on the terminal and, with --json, as a {"progress": ...} line
// at most once a second (`*last_json`: when the last one was printed).
void ShowProgress(const Context& ctx, ProgressLine& progress,
                  absl::Time* last_json, const RepairProgress& p) {
  progress.Update(absl::StrFormat(
      "repair: %d differences, %d rows copied to A, %d to B; %s", p.differences,
      p.to_a, p.to_b, ProgressText(p.estimate, "rows")));
  const absl::Time now = absl::Now();
  if (!ctx.json || now - *last_json < kJsonProgressInterval) return;
  *last_json = now;
  Json line = {{"keyspace", ctx.keyspace},
               {"differences", p.differences},
               {"rows_to_a", p.to_a},
               {"rows_to_b", p.to_b}};
  line.update(ProgressJson(p.estimate, "rows"));
  PrintJson({{"progress", std::move(line)}});
  std::cout.flush();
}

// The progress a node running the repair sent (Admin.RunDiff).
RepairProgress ProgressOf(const v1::RunDiffProgress& in) {
  RepairProgress p;
  p.differences = in.differences();
  p.to_a = in.rows_to_a();
  p.to_b = in.rows_to_b();
  p.estimate = EstimateFromNode(
      p.to_a + p.to_b,
      in.has_rows_expected() ? std::optional<uint64_t>(in.rows_expected())
                             : std::nullopt,
      in.rows_per_second(),
      in.has_eta_seconds() ? std::optional<double>(in.eta_seconds())
                           : std::nullopt,
      absl::Seconds(in.seconds()));
  return p;
}

absl::Status RepairFailed(const Context& ctx, const RepairPlan& plan,
                          const absl::Status& status) {
  if (absl::IsNotFound(status)) return ListKeyspacesInError(ctx, status);
  return absl::Status(
      status.code(),
      absl::StrFormat("repair of keyspace '%s' %s: %s%s", ctx.keyspace,
                      interrupted.load() ? "interrupted" : "failed",
                      CallFailed(ctx, status).message(),
                      plan.dry_run ? ""
                                   : "; rows repaired so far stay repaired, "
                                     "run it again to finish"));
}

// The repair from here: both nodes as remote replicas of this process.
absl::StatusOr<RepairOutcome> RepairFromHere(const Context& ctx,
                                             const RepairPlan& plan) {
  TALLY_ASSIGN_OR_RETURN(auto client_a, Connect(ctx, ctx.args[0]));
  TALLY_ASSIGN_OR_RETURN(auto client_b, Connect(ctx, ctx.args[1]));
  ConnectBoth(ctx, *client_a, *client_b);
  TALLY_RETURN_IF_ERROR(CheckSchemas(ctx, *client_a, *client_b));

  // The sync's `a` is the source; the user's A and B keep their names in
  // everything printed.
  const bool swapped = plan.one_way && plan.source_is_b;
  node::NodeClient* sync_a = swapped ? client_b.get() : client_a.get();
  node::NodeClient* sync_b = swapped ? client_a.get() : client_b.get();
  std::unique_ptr<node::Replica> replica_a = node::NewRemoteReplica(sync_a);
  std::unique_ptr<node::Replica> replica_b = node::NewRemoteReplica(sync_b);

  // The rows to copy, when the row counts give a total (none for a
  // --range or --keys-from run: the keyspaces' counts do not bound the
  // part, so they are not asked for).
  tree::ProgressMeter meter(absl::Now());
  if (ctx.scope.IsWhole()) {
    TALLY_ASSIGN_OR_RETURN(std::optional<v1::KeyspaceSummary> sync_a_ks,
                           FindKeyspace(ctx, *sync_a, ctx.keyspace));
    TALLY_ASSIGN_OR_RETURN(std::optional<v1::KeyspaceSummary> sync_b_ks,
                           FindKeyspace(ctx, *sync_b, ctx.keyspace));
    meter.set_total(node::RowsToMove::Between(
                        sync_a_ks.has_value() ? sync_a_ks->row_count() : 0,
                        sync_b_ks.has_value() ? sync_b_ks->row_count() : 0,
                        plan.one_way)
                        .Total());
  }
  absl::Time last_json = absl::Now();

  RepairOutcome outcome;
  ProgressLine progress;
  node::SyncOptions options;
  options.keyspace = ctx.keyspace;
  options.scope = ctx.scope;
  options.a_is_source = plan.one_way;
  options.dry_run = plan.dry_run;
  options.changes = ctx.insert_only   ? node::RepairChanges::kInsertOnly
                    : ctx.upsert_only ? node::RepairChanges::kUpsertOnly
                                      : node::RepairChanges::kAll;
  options.max_rows = ctx.max_rows;
  options.bandwidth_bytes_per_second = ctx.bandwidth_mb * 1e6;
  options.cancelled = &interrupted;
  if (plan.dry_run || plan.wants_keys()) {
    options.on_difference = [&](const node::KeyDifference& d) {
      using Action = node::KeyDifference::Action;
      const tree::RowEntry* in_user_a = swapped ? d.in_b : d.in_a;
      const tree::RowEntry* in_user_b = swapped ? d.in_a : d.in_b;
      // The target, in the sync's terms, then in the user's.
      const bool to_sync_b =
          d.action == Action::kCopyToB || d.action == Action::kEraseFromB;
      const bool to_user_a = to_sync_b == swapped;
      v1::DiffAction action = v1::DIFF_ACTION_CONFLICT;
      switch (d.action) {
        case Action::kCopyToA:
        case Action::kCopyToB:
          action =
              to_user_a ? v1::DIFF_ACTION_COPY_TO_A : v1::DIFF_ACTION_COPY_TO_B;
          break;
        case Action::kEraseFromB:
          action = to_user_a ? v1::DIFF_ACTION_ERASE_FROM_A
                             : v1::DIFF_ACTION_ERASE_FROM_B;
          break;
        case Action::kConflict:
          break;
        case Action::kSkip:
          action = v1::DIFF_ACTION_SKIPPED;
          break;
      }
      progress.Clear();
      PrintPlanned(ctx, plan, in_user_a, in_user_b, action, &outcome);
    };
  }
  if (progress.enabled() || ctx.json) {
    options.on_progress = [&](const node::SyncProgress& p) {
      RepairProgress shown;
      shown.differences = p.differences;
      shown.to_a = swapped ? p.rows_to_b : p.rows_to_a;
      shown.to_b = swapped ? p.rows_to_a : p.rows_to_b;
      const absl::Time now = absl::Now();
      meter.Record(now, p.rows_to_a + p.rows_to_b);
      shown.estimate = meter.Estimate(now);
      ShowProgress(ctx, progress, &last_json, shown);
    };
  }

  std::signal(SIGINT, OnInterrupt);
  absl::StatusOr<node::SyncStats> result =
      node::SyncKeyspace(*replica_a, *replica_b, options);
  std::signal(SIGINT, SIG_DFL);
  progress.Clear();
  std::cout.flush();
  if (!result.ok()) return RepairFailed(ctx, plan, result.status());
  outcome.stats = *result;
  outcome.to_a = swapped ? result->rows_to_b : result->rows_to_a;
  outcome.to_b = swapped ? result->rows_to_a : result->rows_to_b;

  // After a real repair, read both roots again: equal roots are the proof
  // the user wants, unequal ones mean writes raced the repair or conflicts.
  if (!plan.dry_run) {
    for (auto [client, root] : {std::pair{client_a.get(), &outcome.root_a},
                                std::pair{client_b.get(), &outcome.root_b}}) {
      if (!ctx.scope.IsWhole()) {
        // The part repaired is what was made equal: its root, not the
        // keyspace's.
        absl::StatusOr<std::optional<tree::ViewSummary>> s =
            tree::ScopedSummary(client->NewTreeView(ctx.keyspace), ctx.scope);
        if (!s.ok()) return CallFailed(ctx, s.status());
        if (s->has_value()) {
          root->hex = (*s)->root.ToHex();
          root->rows = (*s)->row_count;
          root->present = true;
        }
        continue;
      }
      TALLY_ASSIGN_OR_RETURN(std::optional<v1::KeyspaceSummary> ks,
                             FindKeyspace(ctx, *client, ctx.keyspace));
      if (ks.has_value()) {
        root->hex = RootHex(ks->root());
        root->rows = ks->row_count();
        root->present = true;
      }
    }
  }
  return outcome;
}

Root RootOf(const v1::RunDiffRoot& root) {
  Root out;
  if (!root.has_keyspace()) return out;
  out.hex = RootHex(root.root());
  out.rows = root.row_count();
  out.present = true;
  return out;
}

// The repair on A, or nullopt with `*fallback` set when it is to run from
// here instead. A Ctrl-C cancels the call, and A stops between batches.
absl::StatusOr<std::optional<RepairOutcome>> RepairOnA(
    const Context& ctx, const RepairPlan& plan,
    std::optional<std::string>* fallback) {
  TALLY_ASSIGN_OR_RETURN(auto a, ConnectToA(ctx));
  v1::RunDiffRequest request;
  request.set_peer(ctx.args[1]);
  request.set_keyspace(ctx.keyspace);
  request.set_mode(!plan.one_way      ? v1::RUN_DIFF_MODE_REPAIR
                   : plan.source_is_b ? v1::RUN_DIFF_MODE_REPAIR_FROM_PEER
                                      : v1::RUN_DIFF_MODE_REPAIR_FROM_NODE);
  request.set_dry_run(plan.dry_run);
  request.set_bandwidth_mb(ctx.bandwidth_mb);
  request.set_insert_only(ctx.insert_only);
  request.set_upsert_only(ctx.upsert_only);
  request.set_max_rows(ctx.max_rows);
  request.set_stream_keys(plan.wants_keys());

  RepairOutcome outcome;
  ProgressLine progress;
  absl::Time last_json = absl::Now();
  bool streamed = false;
  std::optional<v1::RunDiffSummary> summary;
  // A signal handler cannot cancel a call; this thread does it for it.
  node::StreamCanceller canceller;
  std::atomic<bool> call_done{false};
  std::signal(SIGINT, OnInterrupt);
  std::thread watcher([&] {
    while (!call_done.load()) {
      if (interrupted.load()) {
        canceller.Cancel();
        return;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
  });
  // A long --keys-from list takes several calls, reported as one.
  absl::Status status;
  for (const tree::DiffScope& part : RequestScopes(ctx.scope)) {
    SetScope(part, &request);
    std::optional<v1::RunDiffSummary> part_summary;
    status = a->RunDiff(
        request,
        [&](v1::RunDiffEvent& e) {
          streamed = true;
          for (const v1::DiffDifference& d : e.differences()) {
            const tree::RowEntry in_a = EntryOf(d.key(), d.a());
            const tree::RowEntry in_b = EntryOf(d.key(), d.b());
            progress.Clear();
            PrintPlanned(ctx, plan, d.has_a() ? &in_a : nullptr,
                         d.has_b() ? &in_b : nullptr, d.action(), &outcome);
          }
          if (e.has_progress()) {
            // The parts before this one count too.
            RepairProgress p = ProgressOf(e.progress());
            if (summary.has_value()) {
              p.differences += summary->differences();
              p.to_a += summary->rows_to_a();
              p.to_b += summary->rows_to_b();
            }
            ShowProgress(ctx, progress, &last_json, p);
          }
          if (e.has_summary()) part_summary = e.summary();
          return absl::OkStatus();
        },
        &canceller);
    if (!status.ok()) break;
    if (!part_summary.has_value()) {
      status = absl::DataLossError(absl::StrFormat(
          "node %s ended the repair without its summary", a->address()));
      break;
    }
    if (!summary.has_value()) summary.emplace();
    AddRunDiffSummary(*part_summary, &*summary);
    if (interrupted.load()) {
      status = absl::CancelledError("interrupted between key batches");
      break;
    }
  }
  call_done.store(true);
  watcher.join();
  std::signal(SIGINT, SIG_DFL);
  progress.Clear();
  std::cout.flush();
  *fallback = FallbackReason(status, streamed, a->address());
  if (fallback->has_value()) return std::optional<RepairOutcome>();
  if (!status.ok()) return RepairFailed(ctx, plan, status);
  if (!summary.has_value()) {
    return absl::DataLossError(absl::StrFormat(
        "node %s ended the repair without its summary", a->address()));
  }
  if (!summary->a_has_keyspace() && !summary->b_has_keyspace()) {
    // As the sync from here says it: the source first.
    const bool swapped = plan.one_way && plan.source_is_b;
    return ListKeyspacesInError(
        ctx, tree::KeyspaceAbsentOnBoth(ctx.keyspace, ctx.args[swapped ? 1 : 0],
                                        ctx.args[swapped ? 0 : 1]));
  }
  outcome.stats.diff = DiffStatsOf(*summary);
  outcome.stats.erased_from_b = summary->erased();
  outcome.stats.ignored = summary->ignored();
  outcome.stats.skipped = summary->skipped();
  outcome.stats.conflicts = summary->conflicts();
  outcome.stats.repair_bytes = summary->repair_bytes();
  outcome.stats.rows_changed = summary->rows_changed();
  outcome.stats.duration = absl::Seconds(summary->seconds());
  outcome.to_a = summary->rows_to_a();
  outcome.to_b = summary->rows_to_b();
  outcome.root_a = RootOf(summary->a_after());
  outcome.root_b = RootOf(summary->b_after());
  return std::optional<RepairOutcome>(std::move(outcome));
}

CommandResult PrintRepair(const Context& ctx, const RepairPlan& plan,
                          const RepairOutcome& outcome) {
  const node::SyncStats& stats = outcome.stats;
  const bool one_way = plan.one_way;
  const bool dry_run = plan.dry_run;
  const std::string mode =
      one_way ? absl::StrFormat("one-way from %s (source) to %s",
                                plan.source_label(), plan.copy_label())
              : "two-way (last writer wins)";
  const double seconds = absl::ToDoubleSeconds(stats.duration);
  const Root& root_a = outcome.root_a;
  const Root& root_b = outcome.root_b;
  const bool equal = root_a.hex == root_b.hex && root_a.rows == root_b.rows;
  // Exit 1, as diff's "different": a script that runs repair and goes on
  // must not take nodes that still differ for repaired ones. A dry run
  // changes nothing, so the nodes still differ whenever it found a
  // difference.
  const bool still_differ = dry_run ? stats.diff.differences > 0 : !equal;
  const uint64_t to_a = dry_run ? outcome.would_copy_to_a : outcome.to_a;
  const uint64_t to_b = dry_run ? outcome.would_copy_to_b : outcome.to_b;
  const uint64_t erased = dry_run ? outcome.would_erase : stats.erased_from_b;

  if (ctx.json) {
    Json summary = DiffStatsJson(stats.diff, seconds);
    summary["keyspace"] = ctx.keyspace;
    AddScopeJson(ctx, &summary);
    summary["mode"] = one_way ? "one-way" : "two-way";
    summary["source"] = one_way ? Json(plan.source_label()) : nullptr;
    summary["dry_run"] = dry_run;
    summary["rows_to_a"] = to_a;
    summary["rows_to_b"] = to_b;
    summary["erased"] = erased;
    summary["ignored"] = stats.ignored;
    summary["skipped"] = stats.skipped;
    summary["conflicts"] = stats.conflicts;
    summary["repair_bytes"] = stats.repair_bytes;
    summary["rows_changed_during_repair"] = stats.rows_changed;
    Json out = {{"summary", summary}};
    if (!dry_run) {
      auto root_json = [](const std::string& address, const Root& root) {
        return Json{{"address", address},
                    {"root", root.hex},
                    {"rows", root.rows},
                    {"has_keyspace", root.present}};
      };
      out["after"] = {{"a", root_json(ctx.args[0], root_a)},
                      {"b", root_json(ctx.args[1], root_b)},
                      {"equal", equal}};
    }
    PrintJson(out);
    return still_differ ? 1 : 0;
  }

  std::string text = absl::StrFormat(
      "%srepair of keyspace '%s'%s, A=%s B=%s, %s\n", dry_run ? "dry-run " : "",
      ctx.keyspace, ScopeText(ctx), ctx.args[0], ctx.args[1], mode);
  const std::string verb = dry_run ? "would copy" : "copied";
  // The traffic is what the diff moved (between the nodes when A ran it,
  // through this tool when it ran here) and, in a real repair, the rows.
  std::vector<std::vector<std::string>> rows = {
      {"differences", absl::StrFormat("%d (%s)", stats.diff.differences,
                                      DiffStatsText(stats.diff))},
  };
  // One-way never copies towards the source.
  if (!one_way || plan.copy_label() == "A") {
    rows.push_back({absl::StrCat(verb, " to A"), absl::StrCat(to_a)});
  }
  if (!one_way || plan.copy_label() == "B") {
    rows.push_back({absl::StrCat(verb, " to B"), absl::StrCat(to_b)});
  }
  if (one_way) {
    rows.push_back({absl::StrCat(dry_run ? "would erase" : "erased", " from ",
                                 plan.copy_label()),
                    absl::StrCat(erased)});
  }
  if (!dry_run) {
    rows.push_back({"ignored", absl::StrFormat("%d (the target already had a "
                                               "newer version)",
                                               stats.ignored)});
  }
  rows.push_back({"conflicts", absl::StrFormat("%d (same version, different "
                                               "content: left alone)",
                                               stats.conflicts)});
  if (ctx.insert_only || ctx.upsert_only) {
    rows.push_back(
        {"skipped",
         absl::StrFormat("%d (%s: %s)", stats.skipped,
                         ctx.insert_only ? "--insert-only" : "--upsert-only",
                         ctx.insert_only
                             ? "rows both sides have, deletes and erasures"
                             : "deletes and erasures")});
  }
  if (stats.rows_changed > 0) {
    rows.push_back(
        {"changed meanwhile",
         absl::StrFormat("%d (an application changed them in a table while "
                         "the repair read them: not moved; the capture and "
                         "the feed carry the newer write, or repair again)",
                         stats.rows_changed)});
  }
  if (!dry_run) {
    rows.push_back(
        {"moved", absl::StrFormat("%s of keys and values in %.3f s",
                                  HumanBytes(stats.repair_bytes), seconds)});
  }
  absl::StrAppend(&text, Table(rows));
  if (!dry_run) {
    absl::StrAppend(
        &text, "after repair:\n",
        Table(
            {{"A", ctx.args[0], root_a.hex, absl::StrCat(root_a.rows, " rows")},
             {"B", ctx.args[1], root_b.hex,
              absl::StrCat(root_b.rows, " rows")}}),
        equal ? "  A and B are equal\n"
              : "  A and B still differ (writes during the repair, or "
                "conflicts); run repair again\n");
  }
  std::cout << text;
  return still_differ ? 1 : 0;
}

}  // namespace

// The report's last line, the counts; a report that could not be written
// whole fails the command (after the repair, which is not undone).
CommandResult FinishReport(const Context& ctx, const RepairPlan& plan,
                           const RepairOutcome& outcome, CommandResult result) {
  if (plan.report == nullptr) return result;
  absl::Status status = outcome.report_status;
  if (plan.held_lines != nullptr) {
    for (Json& line : *plan.held_lines) {
      // The key as DifferenceJson wrote it (base64 for bytes not UTF-8).
      std::string key = line.value("key", "");
      if (line.contains("key_base64")) {
        (void)absl::Base64Unescape(line["key_base64"].get<std::string>(), &key);
      }
      line["a_after"] = ValueJson(ReadRowValue(ctx, *plan.values_a, key));
      line["b_after"] = ValueJson(ReadRowValue(ctx, *plan.values_b, key));
      status.Update(plan.report->Write(line));
    }
  }
  status.Update(plan.report->Write(
      {{"summary",
        {{"differences", outcome.stats.diff.differences},
         {"rows_to_a", plan.dry_run ? outcome.would_copy_to_a : outcome.to_a},
         {"rows_to_b", plan.dry_run ? outcome.would_copy_to_b : outcome.to_b},
         {"erased",
          plan.dry_run ? outcome.would_erase : outcome.stats.erased_from_b},
         {"skipped", outcome.stats.skipped},
         {"conflicts", outcome.stats.conflicts}}}}));
  if (!status.ok()) return status;
  return result;
}

CommandResult Repair(const Context& ctx) {
  if (ctx.all_keyspaces) return ForEachKeyspace(ctx, &Repair);
  if (auto pg = MaybePostgres(ctx, /*repair=*/true)) return *std::move(pg);
  TALLY_RETURN_IF_ERROR(CheckKeyspace(ctx));
  // NaN fails both comparisons.
  if (!(ctx.bandwidth_mb >= 0 && ctx.bandwidth_mb <= 1e6)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--bandwidth=%g is not a number of MB/s in 0..1000000 (0: no limit)",
        ctx.bandwidth_mb));
  }
  if (ctx.values && ctx.report.empty()) {
    return absl::InvalidArgumentError(
        "repair --values goes with --report FILE: the report then holds each "
        "key's values on A and B before and after the repair");
  }
  RepairPlan plan;
  plan.one_way = ctx.given.count("source") > 0;
  plan.dry_run = ctx.dry_run;
  if (plan.one_way) {
    TALLY_ASSIGN_OR_RETURN(const Side source,
                           ParseSide(ctx.source, ctx.args[0], ctx.args[1]));
    plan.source_is_b = source == Side::kB;
  }
  // Both addresses are checked here, whichever node dials B.
  for (const std::string& address : ctx.args) {
    TALLY_RETURN_IF_ERROR(Connect(ctx, address).status());
  }
  std::unique_ptr<RepairReportWriter> report;
  if (!ctx.report.empty()) {
    TALLY_ASSIGN_OR_RETURN(
        report,
        RepairReportWriter::Create(
            ctx.report,
            {{"report", "tally repair"},
             {"a", ctx.args[0]},
             {"b", ctx.args[1]},
             {"keyspace", ctx.keyspace},
             {"mode", plan.one_way
                          ? absl::StrCat("one-way from ", plan.source_label())
                          : std::string("two-way")},
             {"dry_run", plan.dry_run},
             {"started", absl::FormatTime(absl::RFC3339_full, absl::Now(),
                                          absl::UTCTimeZone())},
             {"command", ctx.command_line}}));
    plan.report = report.get();
  }
  // --values with --report: each key's values on A and B before the repair
  // (read after a first, dry pass found the keys) and after it.
  std::unique_ptr<node::NodeClient> values_a;
  std::unique_ptr<node::NodeClient> values_b;
  std::vector<std::string> keys;
  absl::flat_hash_map<std::string, std::pair<ReadValue, ReadValue>> before;
  std::vector<Json> held_lines;
  if (plan.report != nullptr && ctx.values) {
    TALLY_ASSIGN_OR_RETURN(values_a, Connect(ctx, ctx.args[0]));
    TALLY_ASSIGN_OR_RETURN(values_b, Connect(ctx, ctx.args[1]));
    plan.values_a = values_a.get();
    plan.values_b = values_b.get();
    if (!plan.dry_run) {
      RepairPlan first = plan;
      first.dry_run = true;
      first.report = nullptr;
      first.collect_keys = &keys;
      std::optional<std::string> unused;
      absl::StatusOr<std::optional<RepairOutcome>> on_a =
          ctx.third_party ? std::optional<RepairOutcome>()
                          : RepairOnA(ctx, first, &unused);
      if (!on_a.ok()) return on_a.status();
      if (!on_a->has_value()) {
        TALLY_RETURN_IF_ERROR(RepairFromHere(ctx, first).status());
      }
      for (const std::string& key : keys) {
        before.emplace(key, std::make_pair(ReadRowValue(ctx, *values_a, key),
                                           ReadRowValue(ctx, *values_b, key)));
      }
      plan.before = &before;
      plan.held_lines = &held_lines;
    }
  }
  std::optional<std::string> fallback;
  if (!ctx.third_party) {
    TALLY_ASSIGN_OR_RETURN(std::optional<RepairOutcome> on_a,
                           RepairOnA(ctx, plan, &fallback));
    if (on_a.has_value())
      return FinishReport(ctx, plan, *on_a, PrintRepair(ctx, plan, *on_a));
  }
  absl::StatusOr<RepairOutcome> here = RepairFromHere(ctx, plan);
  if (!here.ok()) return WithFallbackNote(fallback, here.status());
  return WithFallbackNote(
      fallback, FinishReport(ctx, plan, *here, PrintRepair(ctx, plan, *here)));
}

}  // namespace cli
}  // namespace tally
