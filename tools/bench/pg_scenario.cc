// Scenario "pg": the PostgreSQL figures of issue 10 §6 that need no sidecar.
//
// Two throwaway PostgreSQL 15 servers (support/pg_cluster.h), each with
// t(id bigint primary key, a int, b text, c timestamptz) of --pg_rows rows
// (generate_series), then 100 differences on the second (40 updates, 30
// deletes, 30 inserts). In the same run, alternated, --pg_runs times each:
//  - tally: `tally diff URL URL`, the whole CLI process, cold (nothing kept
//    between runs): connect, read schemas, scan both tables at once, list
//    the 100 keys;
//  - baseline: pg_comparator (Debian's postgresql-comparator, `CREATE
//    EXTENSION pgcmp` in both databases) on the same tables, PGTZ=UTC.
// Both must report exactly 100 differences, or the scenario fails.
//
// Not measured here (they need the sidecar, pg/sidecar.h, not on this
// branch yet): the warm diff of two sidecars, the index build rate, the
// capture and apply rates and the end-to-end latency.
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
#include "support/pg_cluster.h"
#include "support/process.h"
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

struct Figures {
  std::vector<double> seconds;
  void Add(double s) { seconds.push_back(s); }
  std::string Text() const {
    std::vector<double> v = seconds;
    std::sort(v.begin(), v.end());
    return absl::StrFormat("%.2f / %.2f / %.2f", v.front(), v[v.size() / 2],
                           v.back());
  }
  double Median() const {
    std::vector<double> v = seconds;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
};

absl::Status Exec(PgCluster& pg, const std::string& sql) {
  return pg.Execute(sql).status();
}

absl::Status Fill(PgCluster& pg, uint64_t rows) {
  return Exec(
      pg, absl::StrCat(
              "CREATE EXTENSION IF NOT EXISTS pgcmp; DROP TABLE IF EXISTS t; "
              "CREATE TABLE t (id bigint PRIMARY KEY, a int, b text, c "
              "timestamptz); INSERT INTO t SELECT g, g, md5(g::text), "
              "timestamptz '2026-01-01 00:00:00+00' + g * interval '1 s' "
              "FROM generate_series(1, ",
              rows, ") g"));
}

// psql -c runs one string in one transaction, where VACUUM cannot run.
absl::Status Settle(PgCluster& pg) {
  absl::Status s = Exec(pg, "VACUUM (FREEZE, ANALYZE) t");
  return s.ok() ? Exec(pg, "CHECKPOINT") : s;
}

// 40 updates, 30 deletes, 30 inserts, spread over the table.
absl::Status Differ(PgCluster& pg, uint64_t rows) {
  const uint64_t step = rows / 100;
  return Exec(
      pg, absl::StrCat(
              "UPDATE t SET a = -a WHERE id IN (SELECT 1 + g * ", step,
              " FROM generate_series(0, 39) g); DELETE FROM t WHERE id IN "
              "(SELECT 2 + g * ",
              step, " FROM generate_series(40, 69) g); INSERT INTO t SELECT ",
              rows, " + g, 0, 'new', now() FROM generate_series(1, 30) g"));
}

absl::StatusOr<double> TimeTally(const std::string& url_a,
                                 const std::string& url_b) {
  const absl::Time start = absl::Now();
  const CommandResult r = testing::RunTally(
      {"diff", "--timeout=600", url_a, url_b}, absl::Minutes(10));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (r.exit_code != 1 || !absl::StrContains(r.out, "100 keys differ")) {
    return absl::InternalError(absl::StrCat("tally diff exited ", r.exit_code,
                                            " without 100 differences: ", r.err,
                                            r.out.substr(0, 500)));
  }
  return seconds;
}

absl::StatusOr<double> TimeComparator(const PgCluster& a, const PgCluster& b) {
  const std::string url_a = absl::StrCat(
      "pgsql://postgres@127.0.0.1:", a.port(), "/postgres/public.t?id:a,b,c");
  const std::string url_b = absl::StrCat(
      "pgsql://postgres@127.0.0.1:", b.port(), "/postgres/public.t");
  const absl::Time start = absl::Now();
  const CommandResult r =
      testing::RunCommand({"/usr/bin/env", "PGTZ=UTC",
                           absl::GetFlag(FLAGS_pg_comparator), url_a, url_b},
                          absl::Minutes(10));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  int found = 0;
  for (absl::string_view line :
       absl::StrSplit(r.out, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "INSERT ") ||
        absl::StartsWith(line, "UPDATE ") ||
        absl::StartsWith(line, "DELETE ")) {
      ++found;
    }
  }
  if (r.exit_code != 0 || found != 100) {
    return absl::InternalError(absl::StrCat("pg_comparator exited ",
                                            r.exit_code, " with ", found,
                                            " differences: ", r.err));
  }
  return seconds;
}

absl::Status RunPg(std::ostream& out) {
  std::vector<uint64_t> sizes;
  for (absl::string_view s :
       absl::StrSplit(absl::GetFlag(FLAGS_pg_rows), ',', absl::SkipEmpty())) {
    uint64_t n = 0;
    if (!absl::SimpleAtoi(s, &n) || n < 1000) {
      return absl::InvalidArgumentError(
          absl::StrCat("--pg_rows: '", s, "' is not a size of 1000 or more"));
    }
    sizes.push_back(n);
  }
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
  for (uint64_t rows : sizes) {
    absl::Status s = Fill(**a, rows);
    if (s.ok()) s = Fill(**b, rows);
    if (s.ok()) s = Differ(**b, rows);
    if (s.ok()) s = Settle(**a);
    if (s.ok()) s = Settle(**b);
    if (!s.ok()) return s;
    Figures tally;
    Figures baseline;
    for (int i = 0; i < runs; ++i) {
      absl::StatusOr<double> t =
          TimeTally((*a)->Uri() + "?table=public.t", (*b)->Uri());
      if (!t.ok()) return t.status();
      tally.Add(*t);
      absl::StatusOr<double> c = TimeComparator(**a, **b);
      if (!c.ok()) return c.status();
      baseline.Add(*c);
    }
    out << absl::StrFormat("%-10d %-34s %-34s %7.1fx %6s\n", rows, tally.Text(),
                           baseline.Text(), baseline.Median() / tally.Median(),
                           ">= 3x");
  }
  out << "not measured here (need the sidecar): warm diff of two sidecars, "
         "index build rows/s, capture rows/s, apply rows/s, end-to-end "
         "latency\n";
  return absl::OkStatus();
}

}  // namespace

Scenario PgScenario() {
  return {"pg", "tally diff of two PostgreSQL tables vs pg_comparator (cold)",
          &RunPg};
}

}  // namespace bench
}  // namespace tally
