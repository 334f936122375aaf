// Scenario "mariadb-warm": `tally diff` of two MariaDB sidecars (warm:
// both indexes built and following) against Percona's pt-table-sync
// --print on the same tables; and the sidecar's index build.
//
// Two throwaway MariaDB servers (1 GB buffer pool each) with db1.t(id
// bigint primary key, a int, b varchar(40), c datetime(6)) of
// --mariadb_warm_rows rows (tools/bench/mariadb_fixture.h). `tallyd
// --mariadb` on each, keeping db1.t, no peers (so the differences stay);
// the build is timed from tallyd's start to `phase following`. Then the
// 100 differences on B (40 updates, 30 deletes, 30 inserts), and `tally
// verify` of B (it catches B's index up with the server's binary log and
// checks it against the table). In the same run, alternated,
// --mariadb_warm_runs times each, each from an idle machine:
//
//   tally diff A B   `tally --keyspace db1.t --json diff A B`, the whole
//                    CLI process (and A's run and A's own diff, from its
//                    log and the summary)
//   pt-table-sync    `pt-table-sync --print A B` (chunked checksums in
//                    each server, then the rows of differing chunks), the
//                    baseline that compares two servers directly
//   pt-table-checksum + pt-table-sync --replicate
//                    Percona's master/replica workflow: B is also a GTID
//                    replica of A (from A's position after the fill, so
//                    only the checksum statements replicate); the
//                    checksums of A's chunks are computed on A and, by
//                    statement-based replication, on B; then
//                    `pt-table-sync --replicate --sync-to-master --print`
//                    on B prints the rows of the differing chunks
//
// Each must report exactly 100 differences (the checksum: some differing
// chunks), or the scenario fails.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "support/mariadb_server.h"
#include "support/process.h"
#include "tools/bench/mariadb_fixture.h"
#include "tools/bench/pg_sidecar_fixture.h"
#include "tools/bench/scenario.h"

ABSL_FLAG(uint64_t, mariadb_warm_rows, 5000000,
          "mariadb-warm: rows of the table on each server");
ABSL_FLAG(int, mariadb_warm_runs, 3,
          "mariadb-warm: runs of each contender, alternated");

namespace tally {
namespace bench {
namespace {

using testing::MariaDbServer;

// Starts a sidecar on `db` and returns it once it follows; adds the
// seconds from its start to `build`.
absl::StatusOr<std::unique_ptr<Sidecar>> StartAndBuild(const std::string& name,
                                                       MariaDbServer& db,
                                                       Samples* build) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<Sidecar>> side =
      Sidecar::StartWith(name, {"--mariadb", db.Url("db1"), "--table", "db1.t"},
                         testing::FreeLoopbackAddress(), {});
  if (!side.ok()) return side.status();
  absl::Status s = (*side)->AwaitFollowing(absl::Minutes(10));
  if (!s.ok()) return s;
  build->Add(absl::ToDoubleSeconds(absl::Now() - start));
  return side;
}

absl::Status RunMariaDbWarm(std::ostream& out) {
  const uint64_t rows = absl::GetFlag(FLAGS_mariadb_warm_rows);
  const int runs = std::max(1, absl::GetFlag(FLAGS_mariadb_warm_runs));
  if (rows < 1000) {
    return absl::InvalidArgumentError("--mariadb_warm_rows: 1000 or more");
  }
  testing::MariaDbServerOptions options;
  options.options = {"--innodb-buffer-pool-size=1G"};
  absl::StatusOr<std::unique_ptr<MariaDbServer>> a =
      MariaDbServer::Start(options);
  if (!a.ok()) return a.status();
  // B is a replica of A too, for the master/replica baseline.
  options.options.push_back("--server-id=2");
  absl::StatusOr<std::unique_ptr<MariaDbServer>> b =
      MariaDbServer::Start(options);
  if (!b.ok()) return b.status();
  absl::Status s = FillMariaTable(**a, rows);
  if (s.ok()) s = FillMariaTable(**b, rows);
  if (!s.ok()) return s;

  Samples build;
  absl::StatusOr<std::unique_ptr<Sidecar>> side_a =
      StartAndBuild("warm-a", **a, &build);
  if (!side_a.ok()) return side_a.status();
  absl::StatusOr<std::unique_ptr<Sidecar>> side_b =
      StartAndBuild("warm-b", **b, &build);
  if (!side_b.ok()) return side_b.status();

  s = MakeMariaReplica(**a, **b);
  if (!s.ok()) return s;
  s = DifferMaria(**b, rows);
  if (!s.ok()) return s;
  const testing::CommandResult verified = testing::RunTally(
      {"verify", "--node", (*side_b)->address()}, absl::Minutes(10));
  if (verified.exit_code != 0) {
    return absl::InternalError(absl::StrCat("tally verify of B exited ",
                                            verified.exit_code, ": ",
                                            verified.out, verified.err));
  }

  Samples cli, node, run, baseline, checksum, replicate_sync, percona;
  NodeDiff last;
  int differing_chunks = 0;
  for (int i = 0; i < 3 * runs; ++i) {
    (void)WaitForIdleCpu();
    // tally, pt-table-sync, the master/replica pair; the next round in
    // another order.
    const int contender = (i % 3 + i / 3) % 3;
    if (contender == 2) {
      absl::StatusOr<PerconaTimes> t = TimePtTableChecksumAndSync(**a, **b);
      if (!t.ok()) return t.status();
      checksum.Add(t->checksum_seconds);
      replicate_sync.Add(t->sync_seconds);
      percona.Add(t->checksum_seconds + t->sync_seconds);
      differing_chunks = t->differing_chunks;
    } else if (contender == 0) {
      absl::StatusOr<NodeDiff> d = TimeNodeDiff(**side_a, **side_b, "db1.t");
      if (!d.ok()) return d.status();
      cli.Add(d->cli_seconds * 1000);
      node.Add(d->node_seconds * 1000);
      run.Add(d->run_seconds * 1000);
      out << absl::StrFormat(
          "mariadb-warm: diff run %d: CLI %.0f ms, A's run %.0f ms, A's own "
          "diff %.0f ms\n",
          cli.size(), d->cli_seconds * 1000, d->run_seconds * 1000,
          d->node_seconds * 1000);
      last = *d;
    } else {
      absl::StatusOr<double> t = TimePtTableSync(**a, **b);
      if (!t.ok()) return t.status();
      baseline.Add(*t);
    }
  }
  out << absl::StrFormat(
      "mariadb-warm: two MariaDB sidecars following their servers (no "
      "peers), db1.t of %d rows, 100 differences; %d runs each, "
      "alternated\n",
      rows, runs);
  out << absl::StrFormat("%-10s %-24s %-20s %-20s %-28s %10s %7s %10s\n",
                         "rows", "tally diff A B ms (CLI)", "A's run ms",
                         "A's own diff ms", "pt-table-sync s (min/med/max)",
                         "speedup", "rounds", "A<->B B");
  out << absl::StrFormat(
      "%-10d %-24s %-20s %-20s %-28s %9.0fx %7d %10d\n", rows, cli.Text("%.0f"),
      run.Text("%.0f"), node.Text("%.0f"), baseline.Text(),
      baseline.Median() * 1000 / cli.Median(), last.rounds, last.bytes);
  out << absl::StrFormat("%-10s %-28s %-28s %-28s %10s %7s\n", "rows",
                         "pt-table-checksum s", "pt-table-sync --replicate s",
                         "both s (min/med/max)", "speedup", "chunks");
  out << absl::StrFormat("%-10d %-28s %-28s %-28s %9.0fx %7d\n", rows,
                         checksum.Text(), replicate_sync.Text(), percona.Text(),
                         percona.Median() * 1000 / cli.Median(),
                         differing_chunks);
  out << "goal: >= 100x pt-table-checksum + pt-table-sync\n";
  const double r = static_cast<double>(rows);
  out << absl::StrFormat(
      "index build (tallyd start to phase following), each sidecar: %s s, "
      "%.0f / %.0f rows/s\n",
      build.Text(), r / build.Max(), r / build.Min());
  s = (*side_a)->Stop();
  if (s.ok()) s = (*side_b)->Stop();
  return s;
}

}  // namespace

Scenario MariaDbWarmScenario() {
  return {"mariadb-warm",
          "tally diff of two MariaDB sidecars (warm) vs pt-table-sync "
          "--print; the sidecar's index build",
          &RunMariaDbWarm};
}

}  // namespace bench
}  // namespace tally
