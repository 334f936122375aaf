// Scenario "pg-capture": how fast a tallyd sidecar's index absorbs one big
// transaction, against pg_recvlogical decoding the
// same WAL.
//
// One throwaway PostgreSQL 15 server, t(id bigint primary key, a int, b
// text, c timestamptz) of --pg_capture_rows rows, one sidecar
// (`tallyd --postgres URI --table public.t`, default settings) following it.
// Each of --pg_runs runs makes two 1M-row transactions, `UPDATE t SET a =
// a + 1` (one transaction, every row), and measures:
//  1. following: the sidecar follows while the UPDATE runs; the time from
//     the UPDATE's commit (psql returned) until the sidecar's confirmed
//     position (its index committed up to there) is at or past
//     pg_current_wal_lsn() read right after the commit. The walsender
//     decodes while the UPDATE runs, so this is what the application waits
//     beyond its own commit; it has no fair baseline (pg_recvlogical can
//     only be told where to stop once the position is known).
//  2. catch-up, the compared figure: the sidecar is stopped (SIGTERM), a
//     slot for the baseline is created, the UPDATE runs, and then, in an
//     order that alternates between runs, (a) tallyd starts again and is
//     timed from its start until its confirmed position passes the
//     position after the commit, and (b) pg_recvlogical (from the server's
//     bin dir) decodes the same WAL from its own slot with pgoutput,
//     `-o proto_version=1 -o publication_names=... -o binary=true`, to
//     /dev/null, `--endpos` that position, timed until it exits. Both
//     decode the whole transaction after the fact (server-side decoding
//     and spill files, the stream, the client); tallyd also writes its
//     index and pays its start (shown separately: a restart with nothing to
//     decode, its median).
// The sidecar's rows_captured must grow by the table's rows each time, and
// pg_recvlogical must exit 0, or the scenario fails.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "support/pg_cluster.h"
#include "support/process.h"
#include "tools/bench/pg_sidecar_fixture.h"
#include "tools/bench/scenario.h"

ABSL_FLAG(uint64_t, pg_capture_rows, 1000000,
          "pg-capture: rows of the table, all updated in one transaction");

namespace tally {
namespace bench {
namespace {

using testing::CommandResult;
using testing::PgCluster;

constexpr char kBaselineSlot[] = "bench_recvlogical";
constexpr char kBaselinePublication[] = "bench_recvlogical";

// Runs the 1M-row UPDATE; returns its seconds and sets `*after` to the
// position right after its commit.
absl::StatusOr<double> UpdateAll(PgCluster& pg, pg::Lsn* after) {
  const absl::Time start = absl::Now();
  absl::Status s = ExecSql(pg, "UPDATE t SET a = a + 1");
  if (!s.ok()) return s;
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  absl::StatusOr<pg::Lsn> lsn = CurrentLsn(pg);
  if (!lsn.ok()) return lsn.status();
  *after = *lsn;
  return seconds;
}

// The sidecar's rows_captured, or an error.
absl::StatusOr<uint64_t> RowsCaptured(Sidecar& side) {
  absl::StatusOr<v1::PostgresStatus> st = side.Status();
  if (!st.ok()) return st.status();
  return st->rows_captured();
}

absl::Status CheckCaptured(Sidecar& side, uint64_t before, uint64_t rows) {
  absl::StatusOr<uint64_t> now = RowsCaptured(side);
  if (!now.ok()) return now.status();
  if (*now < before + rows) {
    return absl::InternalError(absl::StrCat(
        "the sidecar confirmed the update's position having captured ",
        *now - before, " rows; the update changed ", rows));
  }
  return absl::OkStatus();
}

absl::StatusOr<double> TimeRecvLogical(const PgCluster& pg, pg::Lsn endpos) {
  const absl::Time start = absl::Now();
  const CommandResult r = testing::RunCommand(
      {testing::PostgresBinDir() + "/pg_recvlogical",
       "-h",
       "127.0.0.1",
       "-p",
       absl::StrCat(pg.port()),
       "-U",
       "postgres",
       "-d",
       "postgres",
       "--slot",
       kBaselineSlot,
       "--start",
       "--no-loop",
       "--endpos",
       pg::FormatLsn(endpos),
       "-f",
       "/dev/null",
       "-o",
       "proto_version=1",
       "-o",
       absl::StrCat("publication_names=", kBaselinePublication),
       "-o",
       "binary=true"},
      absl::Minutes(30));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (r.exit_code != 0) {
    return absl::InternalError(
        absl::StrCat("pg_recvlogical exited ", r.exit_code, ": ", r.err));
  }
  return seconds;
}

absl::Status RunPgCapture(std::ostream& out) {
  const uint64_t rows = absl::GetFlag(FLAGS_pg_capture_rows);
  const int runs = std::max(1, absl::GetFlag(FLAGS_pg_runs));
  if (rows < 1000) {
    return absl::InvalidArgumentError("--pg_capture_rows: at least 1000");
  }
  absl::StatusOr<std::unique_ptr<PgCluster>> pg = PgCluster::Start();
  if (!pg.ok()) return pg.status();
  absl::Status s = FillTable(**pg, rows);
  if (s.ok()) s = SettleTable(**pg);
  if (s.ok()) {
    s = ExecSql(**pg, absl::StrCat("CREATE PUBLICATION ", kBaselinePublication,
                                   " FOR TABLE t"));
  }
  if (!s.ok()) return s;
  absl::StatusOr<std::unique_ptr<Sidecar>> started =
      Sidecar::Start("capture", **pg, "127.0.0.1:0", {});
  if (!started.ok()) return started.status();
  Sidecar& side = **started;
  s = side.AwaitFollowing(absl::Minutes(30));
  if (!s.ok()) return s;

  Samples update, following, catch_up, baseline, restart;
  for (int run = 0; run < runs; ++run) {
    // 1. Following.
    absl::StatusOr<uint64_t> before = RowsCaptured(side);
    if (!before.ok()) return before.status();
    pg::Lsn after = 0;
    absl::StatusOr<double> u = UpdateAll(**pg, &after);
    if (!u.ok()) return u.status();
    const absl::Time committed = absl::Now();
    s = side.AwaitConfirmed(after, absl::Minutes(30));
    if (!s.ok()) return s;
    following.Add(absl::ToDoubleSeconds(absl::Now() - committed));
    update.Add(*u);
    s = CheckCaptured(side, *before, rows);
    if (s.ok()) s = ExecSql(**pg, "VACUUM t");
    if (!s.ok()) return s;

    // 2. Catch-up against pg_recvlogical on the same WAL.
    s = side.Stop();
    if (s.ok()) {
      s = ExecSql(**pg,
                  absl::StrCat("SELECT pg_create_logical_replication_slot('",
                               kBaselineSlot, "', 'pgoutput')"));
    }
    if (!s.ok()) return s;
    u = UpdateAll(**pg, &after);
    if (!u.ok()) return u.status();
    update.Add(*u);
    for (int k = 0; k < 2; ++k) {
      if (k == run % 2) {
        const absl::Time start = absl::Now();
        s = side.Restart();
        if (s.ok()) s = side.AwaitConfirmed(after, absl::Minutes(30));
        if (!s.ok()) return s;
        catch_up.Add(absl::ToDoubleSeconds(absl::Now() - start));
        // Counted since the process started.
        s = CheckCaptured(side, 0, rows);
        if (!s.ok()) return s;
      } else {
        absl::StatusOr<double> t = TimeRecvLogical(**pg, after);
        if (!t.ok()) return t.status();
        baseline.Add(*t);
      }
    }
    s = ExecSql(**pg, absl::StrCat("SELECT pg_drop_replication_slot('",
                                   kBaselineSlot, "')"));
    if (s.ok()) s = ExecSql(**pg, "VACUUM t");
    if (!s.ok()) return s;

    // 3. tallyd's start alone: a restart with nothing to decode.
    absl::StatusOr<pg::Lsn> now = CurrentLsn(**pg);
    if (!now.ok()) return now.status();
    s = side.Stop();
    if (!s.ok()) return s;
    const absl::Time start = absl::Now();
    s = side.Restart();
    if (s.ok()) s = side.AwaitConfirmed(*now, absl::Minutes(5));
    if (!s.ok()) return s;
    restart.Add(absl::ToDoubleSeconds(absl::Now() - start));
  }

  const double r = static_cast<double>(rows);
  auto rates = [r](const Samples& seconds) {
    return absl::StrFormat("%.0f / %.0f / %.0f", r / seconds.Max(),
                           r / seconds.Median(), r / seconds.Min());
  };
  out << absl::StrFormat(
      "pg-capture: one UPDATE of all %d rows of t in one transaction; %d "
      "runs, catch-up and pg_recvlogical alternated\n",
      rows, runs);
  out << absl::StrFormat("%-44s %-24s %-30s\n", "", "seconds (min/med/max)",
                         "rows/s (min/med/max)");
  out << absl::StrFormat("%-44s %-24s %-30s\n",
                         "the UPDATE itself (psql, both kinds)", update.Text(),
                         rates(update));
  out << absl::StrFormat("%-44s %-24s %-30s\n",
                         "tally following: commit -> index confirmed",
                         following.Text(), rates(following));
  out << absl::StrFormat("%-44s %-24s %-30s\n",
                         "tally catch-up: tallyd start -> confirmed",
                         catch_up.Text(), rates(catch_up));
  out << absl::StrFormat("%-44s %-24s %-30s\n",
                         "pg_recvlogical pgoutput binary (baseline)",
                         baseline.Text(), rates(baseline));
  out << absl::StrFormat("%-44s %-24s\n", "tallyd restart, nothing to decode",
                         restart.Text());
  out << absl::StrFormat(
      "catch-up / pg_recvlogical (rows/s, medians): %.2f (goal >= 0.8)\n",
      baseline.Median() / catch_up.Median());
  return absl::OkStatus();
}

}  // namespace

Scenario PgCaptureScenario() {
  return {"pg-capture",
          "rows/s a tallyd sidecar's index absorbs from a 1M-row UPDATE vs "
          "pg_recvlogical",
          &RunPgCapture};
}

}  // namespace bench
}  // namespace tally
