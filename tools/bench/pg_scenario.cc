// Scenarios "pg" and "pg-warm": `tally diff` of two PostgreSQL tables
// against pg_comparator, cold and warm.
//
// Both use two throwaway PostgreSQL 15 servers (support/pg_cluster.h), each
// with t(id bigint primary key, a int, b text, c timestamptz) of --pg_rows
// rows (generate_series), then 100 differences on the second (40 updates,
// 30 deletes, 30 inserts; tools/bench/pg_sidecar_fixture.h). In the same
// run, alternated, --pg_runs times each, against the same baseline:
// pg_comparator (Debian's postgresql-comparator, `CREATE EXTENSION pgcmp`
// in both databases) on the same tables, PGTZ=UTC. Both contenders must
// report exactly 100 differences, or the scenario fails. Each timed run of
// either starts once the machine is idle (WaitForIdleCpu): pg_comparator's
// servers stay busy for ~100 ms after it returns.
//
// pg (cold): `tally diff URL URL`, the whole CLI process, nothing kept
// between runs: connect, read schemas, scan both tables at once, list the
// 100 keys.
//
// pg-warm: a tallyd sidecar per database (`--postgres URI --table
// public.t`, no peers, so the differences stay), as an operator runs them.
// First the index build, each sidecar alone: the time from starting tallyd
// to its status saying `following` (process start, the database's checks,
// the slot, the snapshot's binary COPY, the index written), as rows/s; a
// third build, by another sidecar of database A that is then removed with
// its slot, makes three. Its baseline in the same run: psql's binary COPY
// of the same table to /dev/null (the scan alone). Then the 100
// differences on B, and the wait until both sidecars' confirmed positions
// are at or past pg_current_wal_lsn() (their indexes hold every change).
// Then `tally --keyspace public.t --json diff A B` is timed as a whole CLI
// process (A runs the diff against B over gRPC and streams the keys
// back); A's log line of the run gives its whole time (connecting to B,
// the handshake and schema check, the diff), and the summary's `seconds`
// is A's own diff time (the diff alone).
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "support/pg_cluster.h"
#include "support/process.h"
#include "tools/bench/pg_sidecar_fixture.h"
#include "tools/bench/scenario.h"

ABSL_FLAG(std::string, pg_rows, "1000000",
          "pg: table sizes, comma separated (e.g. 1000000,5000000)");
ABSL_FLAG(int, pg_runs, 3, "pg: runs of each contender per table size");
ABSL_FLAG(std::string, pg_comparator, "pg_comparator",
          "pg: the baseline's program (postgresql-comparator)");

namespace tally {
namespace bench {
namespace {

using testing::CommandResult;
using testing::PgCluster;

absl::Status RunPg(std::ostream& out) {
  absl::StatusOr<std::vector<uint64_t>> sizes = PgTableSizes();
  if (!sizes.ok()) return sizes.status();
  const int runs = std::max(1, absl::GetFlag(FLAGS_pg_runs));
  absl::StatusOr<std::unique_ptr<PgCluster>> a = PgCluster::Start();
  if (!a.ok()) return a.status();
  absl::StatusOr<std::unique_ptr<PgCluster>> b = PgCluster::Start();
  if (!b.ok()) return b.status();
  out << absl::StrFormat(
      "pg: cold ad-hoc diff, t(id bigint pk, a int, b text, c timestamptz), "
      "100 differences, %d runs each, alternated\n",
      runs);
  out << absl::StrFormat("%-10s %-34s %-34s %8s %6s\n", "rows",
                         "tally diff URL URL s (min/med/max)",
                         "pg_comparator s (min/med/max)", "speedup", "goal");
  for (uint64_t rows : *sizes) {
    if (absl::Status s = FillDiffering(**a, **b, rows); !s.ok()) return s;
    Samples tally;
    Samples baseline;
    for (int i = 0; i < runs; ++i) {
      (void)WaitForIdleCpu();
      absl::StatusOr<double> t =
          TimeColdTallyDiff((*a)->Uri() + "?table=public.t", (*b)->Uri());
      if (!t.ok()) return t.status();
      tally.Add(*t);
      (void)WaitForIdleCpu();
      absl::StatusOr<double> c =
          TimePgComparator(**a, **b, absl::GetFlag(FLAGS_pg_comparator), 100);
      if (!c.ok()) return c.status();
      baseline.Add(*c);
    }
    out << absl::StrFormat("%-10d %-34s %-34s %7.1fx %6s\n", rows, tally.Text(),
                           baseline.Text(), baseline.Median() / tally.Median(),
                           ">= 3x");
  }
  return absl::OkStatus();
}

// psql's binary COPY of t to /dev/null: the scan the build starts with.
absl::StatusOr<double> TimeBinaryCopy(const PgCluster& pg) {
  const std::string command = absl::StrCat(
      testing::PostgresBinDir(), "/psql -X -q -h 127.0.0.1 -p ", pg.port(),
      " -U postgres -d postgres -c 'COPY (SELECT id, a, b, c FROM t) TO "
      "STDOUT (FORMAT binary)' > /dev/null");
  const absl::Time start = absl::Now();
  const CommandResult r =
      testing::RunCommand({"/bin/sh", "-c", command}, absl::Minutes(10));
  if (r.exit_code != 0) {
    return absl::InternalError(absl::StrCat("binary COPY failed: ", r.err));
  }
  return absl::ToDoubleSeconds(absl::Now() - start);
}

// Starts a sidecar on `pg` and returns it once it follows, with the time
// from the start to then in `seconds`.
absl::StatusOr<std::unique_ptr<Sidecar>> StartAndBuild(const std::string& name,
                                                       PgCluster& pg,
                                                       Samples* seconds) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<Sidecar>> side =
      Sidecar::Start(name, pg, "127.0.0.1:0", {});
  if (!side.ok()) return side.status();
  absl::Status s = (*side)->AwaitFollowing(absl::Minutes(30));
  if (!s.ok()) return s;
  seconds->Add(absl::ToDoubleSeconds(absl::Now() - start));
  return side;
}

// Stops a sidecar and removes what it made in its database (slot,
// publication, replication origin), so that nothing retains WAL.
absl::Status RemoveSidecar(Sidecar& side, PgCluster& pg) {
  absl::StatusOr<v1::PostgresStatus> st = side.Status();
  if (!st.ok()) return st.status();
  absl::Status s = side.Stop();
  if (!s.ok()) return s;
  // The walsender may outlive tallyd's exit by a moment (slot "active").
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  for (;;) {
    absl::StatusOr<std::string> active =
        pg.Execute(absl::StrCat("SELECT active FROM pg_replication_slots WHERE "
                                "slot_name = '",
                                st->slot(), "'"));
    if (!active.ok()) return active.status();
    const absl::string_view state = absl::StripAsciiWhitespace(*active);
    if (state.empty()) break;  // gone
    if (state == "f") {
      s = ExecSql(pg, absl::StrCat("SELECT pg_drop_replication_slot('",
                                   st->slot(), "')"));
      if (!s.ok()) return s;
      break;
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "slot ", st->slot(), " still active 10 s after tallyd left"));
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  return ExecSql(
      pg, absl::StrCat("DROP PUBLICATION IF EXISTS ", st->publication(),
                       "; SELECT pg_replication_origin_drop(roname) FROM "
                       "pg_replication_origin WHERE roname = '",
                       st->origin(), "'"));
}

absl::Status RunPgWarm(std::ostream& out) {
  absl::StatusOr<std::vector<uint64_t>> sizes = PgTableSizes();
  if (!sizes.ok()) return sizes.status();
  const int runs = std::max(1, absl::GetFlag(FLAGS_pg_runs));
  const std::string comparator = absl::GetFlag(FLAGS_pg_comparator);
  out << absl::StrFormat(
      "pg-warm: two sidecars following their databases (no peers), "
      "t(id bigint pk, a int, b text, c timestamptz), 100 differences; "
      "%d runs each, alternated\n",
      runs);
  std::vector<std::string> diff_lines, build_lines;
  for (uint64_t rows : *sizes) {
    // Fresh servers per size: no slot of an earlier size retains WAL.
    absl::StatusOr<std::unique_ptr<PgCluster>> a = PgCluster::Start();
    if (!a.ok()) return a.status();
    absl::StatusOr<std::unique_ptr<PgCluster>> b = PgCluster::Start();
    if (!b.ok()) return b.status();
    absl::Status s = FillTable(**a, rows);
    if (s.ok()) s = FillTable(**b, rows);
    if (s.ok()) s = SettleTable(**a);
    if (s.ok()) s = SettleTable(**b);
    if (!s.ok()) return s;

    // The builds, each sidecar alone, each beside a binary COPY of its
    // table.
    Samples build, copy;
    absl::StatusOr<double> c = TimeBinaryCopy(**a);
    if (!c.ok()) return c.status();
    copy.Add(*c);
    absl::StatusOr<std::unique_ptr<Sidecar>> side_a =
        StartAndBuild("warm-a", **a, &build);
    if (!side_a.ok()) return side_a.status();
    c = TimeBinaryCopy(**b);
    if (!c.ok()) return c.status();
    copy.Add(*c);
    absl::StatusOr<std::unique_ptr<Sidecar>> side_b =
        StartAndBuild("warm-b", **b, &build);
    if (!side_b.ok()) return side_b.status();
    for (int i = 2; i < runs; ++i) {
      c = TimeBinaryCopy(**a);
      if (!c.ok()) return c.status();
      copy.Add(*c);
      absl::StatusOr<std::unique_ptr<Sidecar>> extra =
          StartAndBuild(absl::StrCat("warm-a", i), **a, &build);
      if (!extra.ok()) return extra.status();
      s = RemoveSidecar(**extra, **a);
      if (!s.ok()) return s;
    }
    const double r = static_cast<double>(rows);
    build_lines.push_back(
        absl::StrFormat("%-10d %-26s %-28s %-26s %-26s", rows, build.Text(),
                        absl::StrFormat("%.0f / %.0f / %.0f", r / build.Max(),
                                        r / build.Median(), r / build.Min()),
                        copy.Text(),
                        absl::StrFormat("%.0f / %.0f / %.0f", r / copy.Max(),
                                        r / copy.Median(), r / copy.Min())));

    // The differences, then both indexes caught up.
    s = MakeDifferences(**b, rows);
    if (!s.ok()) return s;
    for (auto [side, pg] : {std::make_pair(side_a->get(), a->get()),
                            std::make_pair(side_b->get(), b->get())}) {
      absl::StatusOr<pg::Lsn> lsn = CurrentLsn(*pg);
      if (!lsn.ok()) return lsn.status();
      s = side->AwaitConfirmed(*lsn, absl::Minutes(2));
      if (!s.ok()) return s;
    }

    Samples cli, node, run, baseline;
    NodeDiff last;
    const char* last_was = "the builds";
    for (int i = 0; i < 2 * runs; ++i) {
      (void)WaitForIdleCpu();
      if ((i % 2 == 0) == (i / 2 % 2 == 0)) {
        absl::StatusOr<NodeDiff> d =
            TimeNodeDiff(**side_a, **side_b, "public.t");
        if (!d.ok()) return d.status();
        cli.Add(d->cli_seconds * 1000);
        node.Add(d->node_seconds * 1000);
        run.Add(d->run_seconds * 1000);
        // Each run as it came (the table has min / median / max only).
        out << absl::StrFormat(
            "pg-warm: %d rows, diff run %d (after %s): CLI %.0f ms, A's run "
            "%.0f ms, A's own diff %.0f ms\n",
            rows, cli.size(), i == 0 ? "the builds" : last_was,
            d->cli_seconds * 1000, d->run_seconds * 1000,
            d->node_seconds * 1000);
        last_was = "a diff";
        last = *d;
      } else {
        absl::StatusOr<double> t = TimePgComparator(**a, **b, comparator, 100);
        if (!t.ok()) return t.status();
        baseline.Add(*t);
        last_was = "pg_comparator";
      }
    }
    diff_lines.push_back(absl::StrFormat(
        "%-10d %-24s %-20s %-20s %-28s %9.0fx %7d %10d", rows, cli.Text("%.0f"),
        run.Text("%.0f"), node.Text("%.0f"), baseline.Text(),
        baseline.Median() * 1000 / cli.Median(), last.rounds, last.bytes));
  }
  out << absl::StrFormat("%-10s %-24s %-20s %-20s %-28s %10s %7s %10s\n",
                         "rows", "tally diff A B ms (CLI)", "A's run ms",
                         "A's own diff ms", "pg_comparator s (min/med/max)",
                         "speedup", "rounds", "A<->B B");
  for (const std::string& line : diff_lines) out << line << "\n";
  out << "goal: <= 100 ms at 5M rows, >= 100x pg_comparator\n";
  out << "\nindex build (tallyd start to phase following, each sidecar "
         "alone) vs psql binary COPY of t to /dev/null, same run\n";
  out << absl::StrFormat("%-10s %-26s %-28s %-26s %-26s\n", "rows",
                         "build s (min/med/max)", "build rows/s",
                         "binary COPY s", "COPY rows/s");
  for (const std::string& line : build_lines) out << line << "\n";
  out << "build goal: >= 300000 rows/s\n";
  return absl::OkStatus();
}

}  // namespace

Scenario PgScenario() {
  return {"pg", "tally diff of two PostgreSQL tables vs pg_comparator (cold)",
          &RunPg};
}

Scenario PgWarmScenario() {
  return {"pg-warm",
          "tally diff of two tallyd sidecars (warm) vs pg_comparator; the "
          "sidecar's index build",
          &RunPgWarm};
}

}  // namespace bench
}  // namespace tally
