// Scenario "mariadb": `tally diff` with MariaDB URLs, cold, against
// Percona's pt-table-sync.
//
// Two throwaway MariaDB servers (support/mariadb_server.h) and one
// PostgreSQL server, each with t(id bigint primary key, a int, b
// varchar(40), c datetime(6) / timestamp) of --mariadb_rows rows, then 100
// differences on MariaDB B (40 updates, 30 deletes, 30 inserts): MariaDB A
// and PostgreSQL hold the same rows. In the same run, alternated,
// --mariadb_runs times each, each timed run from an idle machine:
//
//   tally MariaDB-MariaDB  `tally diff A B`, the whole CLI process
//   pt-table-sync          `pt-table-sync --print A B` (Debian's
//                          percona-toolkit: chunked checksums in each
//                          server, then the rows of differing chunks),
//                          the baseline; it prints one statement per
//                          difference
//   tally PostgreSQL-MariaDB `tally diff PG B`: the cross-engine diff,
//                          shown beside the same baseline (no tool of
//                          tally's peers diffs these two engines here)
//
// Every contender must find exactly 100 differences, or the scenario
// fails.
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
#include "absl/time/clock.h"
#include "support/mariadb_server.h"
#include "support/pg_cluster.h"
#include "support/process.h"
#include "tools/bench/mariadb_fixture.h"
#include "tools/bench/pg_sidecar_fixture.h"
#include "tools/bench/scenario.h"

ABSL_FLAG(std::string, mariadb_rows, "1000000",
          "mariadb: table sizes, comma separated (e.g. 1000000,5000000)");
ABSL_FLAG(int, mariadb_runs, 3, "mariadb: runs of each contender per size");

namespace tally {
namespace bench {
namespace {

using testing::MariaDbServer;
using testing::PgCluster;

absl::Status FillPg(PgCluster& pg, uint64_t rows) {
  return ExecSql(
      pg, absl::StrCat("DROP TABLE IF EXISTS t; CREATE TABLE t (id bigint "
                       "PRIMARY KEY, a int, b varchar(40), c timestamp); "
                       "INSERT INTO t SELECT g, g, md5(g::text), timestamp "
                       "'2026-01-01 00:00:00' + g * interval '1 s' FROM "
                       "generate_series(1, ",
                       rows, ") g"));
}

absl::StatusOr<std::vector<uint64_t>> Sizes() {
  std::vector<uint64_t> sizes;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_mariadb_rows),
                                            ',', absl::SkipEmpty())) {
    uint64_t n = 0;
    if (!absl::SimpleAtoi(s, &n) || n < 1000) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--mariadb_rows: '", s, "' is not a size of 1000 or more"));
    }
    sizes.push_back(n);
  }
  return sizes;
}

absl::Status RunMariaDb(std::ostream& out) {
  absl::StatusOr<std::vector<uint64_t>> sizes = Sizes();
  if (!sizes.ok()) return sizes.status();
  const int runs = std::max(1, absl::GetFlag(FLAGS_mariadb_runs));
  // A bigger buffer pool than the tests': the tables stay in memory.
  testing::MariaDbServerOptions options;
  options.options = {"--innodb-buffer-pool-size=1G"};
  absl::StatusOr<std::unique_ptr<MariaDbServer>> a =
      MariaDbServer::Start(options);
  if (!a.ok()) return a.status();
  absl::StatusOr<std::unique_ptr<MariaDbServer>> b =
      MariaDbServer::Start(options);
  if (!b.ok()) return b.status();
  absl::StatusOr<std::unique_ptr<PgCluster>> pg = PgCluster::Start();
  if (!pg.ok()) return pg.status();
  out << absl::StrFormat(
      "mariadb: cold ad-hoc diff, t(id bigint pk, a int, b varchar(40), c "
      "datetime(6)), 100 differences, %d runs each, alternated\n",
      runs);
  out << absl::StrFormat("%-10s %-26s %-26s %8s %-26s\n", "rows",
                         "tally maria-maria s", "pt-table-sync s", "speedup",
                         "tally pg-maria s");
  for (uint64_t rows : *sizes) {
    absl::Status s = FillMariaTable(**a, rows);
    if (s.ok()) s = FillMariaTable(**b, rows);
    if (s.ok()) s = DifferMaria(**b, rows);
    if (s.ok()) s = FillPg(**pg, rows);
    if (s.ok()) s = SettleTable(**pg);
    if (!s.ok()) return s;
    const std::string url_a = (*a)->Url("db1") + "?table=db1.t";
    const std::string url_b = (*b)->Url("db1") + "?table=db1.t";
    const std::string url_pg = (*pg)->Uri() + "?table=public.t";
    Samples maria;
    Samples baseline;
    Samples cross;
    for (int i = 0; i < runs; ++i) {
      (void)WaitForIdleCpu();
      absl::StatusOr<double> t = TimeColdTallyDiff(url_a, url_b);
      if (!t.ok()) return t.status();
      maria.Add(*t);
      (void)WaitForIdleCpu();
      absl::StatusOr<double> p = TimePtTableSync(**a, **b);
      if (!p.ok()) return p.status();
      baseline.Add(*p);
      (void)WaitForIdleCpu();
      absl::StatusOr<double> c = TimeColdTallyDiff(url_pg, url_b);
      if (!c.ok()) return c.status();
      cross.Add(*c);
    }
    out << absl::StrFormat("%-10d %-26s %-26s %7.1fx %-26s\n", rows,
                           maria.Text(), baseline.Text(),
                           baseline.Median() / maria.Median(), cross.Text());
  }
  return absl::OkStatus();
}

}  // namespace

Scenario MariaDbScenario() {
  return {"mariadb",
          "tally diff with MariaDB URLs (MariaDB-MariaDB, PostgreSQL-MariaDB) "
          "vs pt-table-sync --print",
          &RunMariaDb};
}

}  // namespace bench
}  // namespace tally
