// Scenario "pg-latency": how long an application write on database A takes
// to be visible in database B through two peered tallyd sidecars (end to
// end), against PostgreSQL's own logical replication A → B.
//
// Two throwaway PostgreSQL 15 servers with the same two tables of
// --pg_latency_keys rows, t(id bigint primary key, a int, b text, c
// timestamptz) and t2 (the same). tally: a sidecar per database, each
// peering the other, with the settings an operator gets by default (the
// change feed streams continuously; sessions every 30 s; sync writes on;
// --pg_latency_tallyd_flags adds others, e.g. --sync-writes=false, to see
// what a setting changes); they serve t only. Baseline: `CREATE PUBLICATION ...
// FOR TABLE t2` on A, `CREATE SUBSCRIPTION ... WITH (copy_data = false)` on B,
// PostgreSQL's built-in logical replication with its defaults; it serves t2
// only. Both paths run all the time; each run writes to one table only, tally
// and the baseline alternated, --pg_runs runs each.
//
// A run: a writer on one connection to A issues --pg_latency_rate
// transactions per second for --pg_latency_seconds, paced by the clock
// (transaction i is sent at start + i / rate, or at once when late); each is
// `UPDATE tbl SET a = TOKEN, b = 'tok-TOKEN', c = SEND_TIME WHERE id = K`,
// the token unique and increasing, the key (i mod keys) + 1. A reader on
// one connection to B polls `SELECT id, a FROM tbl` back to back (~1 ms
// apart) and records when each token became visible: when its key first
// holds that token or a later one (a later write of the key replaces it,
// last writer wins, so seeing it counts). Latency = time the poll returned
// − the write's send time, so it includes A's commit and one poll. p50 and
// p99 over a run's writes; min / median / max over the runs. The run fails
// if a write has not become visible 5 min after the last was sent. Before
// the runs, 200 writes at 100/s on each path warm it up (the
// subscription's worker, the feed subscriptions) and must arrive.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "pg/wire/connection.h"
#include "support/pg_cluster.h"
#include "support/process.h"
#include "tools/bench/latency_run.h"
#include "tools/bench/pg_sidecar_fixture.h"
#include "tools/bench/scenario.h"

ABSL_FLAG(int, pg_latency_rate, 1000,
          "pg-latency: application transactions per second on A");
ABSL_FLAG(int, pg_latency_seconds, 10, "pg-latency: seconds of writing a run");
ABSL_FLAG(int, pg_latency_keys, 1000, "pg-latency: rows of the tables");
ABSL_FLAG(std::string, pg_latency_tallyd_flags, "",
          "pg-latency: extra tallyd flags for both sidecars, comma separated "
          "(e.g. --sync-writes=false); none by default");

namespace tally {
namespace bench {
namespace {

using testing::PgCluster;

// Opens a plain connection to `pg`.
absl::StatusOr<std::unique_ptr<pg::Connection>> Connect(const PgCluster& pg) {
  pg::ConnectOptions options;
  options.application_name = "tally-bench";
  return pg::Connection::Open(pg.Uri(), options);
}

// One run on `table` (tools/bench/latency_run.h).
absl::StatusOr<LatencyFigures> MeasureRun(const PgCluster& a,
                                          const PgCluster& b,
                                          const std::string& table, int keys,
                                          int rate, int count, int64_t base) {
  absl::StatusOr<std::unique_ptr<pg::Connection>> writer = Connect(a);
  if (!writer.ok()) return writer.status();
  absl::StatusOr<std::unique_ptr<pg::Connection>> reader = Connect(b);
  if (!reader.ok()) return reader.status();
  const std::string update = absl::StrCat(
      "UPDATE ", table,
      " SET a = $1::int, b = 'tok-' || $1, c = to_timestamp($2::float8) "
      "WHERE id = $3::bigint");
  const std::string poll = absl::StrCat("SELECT id, a FROM ", table);
  return MeasureLatency(
      [&](int64_t token, int64_t key, absl::Time sent) {
        return (*writer)
            ->ExecParams(
                update,
                {pg::Param::Text(absl::StrCat(token)),
                 pg::Param::Text(absl::StrFormat(
                     "%.6f", absl::ToDoubleSeconds(sent - absl::UnixEpoch()))),
                 pg::Param::Text(absl::StrCat(key))})
            .status();
      },
      [&]() -> absl::StatusOr<std::vector<KeyToken>> {
        absl::StatusOr<pg::Result> r = (*reader)->Exec(poll);
        if (!r.ok()) return r.status();
        std::vector<KeyToken> rows;
        rows.reserve(r->rows());
        for (int row = 0; row < r->rows(); ++row) {
          KeyToken kt;
          if (absl::SimpleAtoi(r->Value(row, 0), &kt.key) &&
              absl::SimpleAtoi(r->Value(row, 1), &kt.token)) {
            rows.push_back(kt);
          }
        }
        return rows;
      },
      table, keys, rate, count, base);
}

absl::Status CreateTables(PgCluster& pg, int keys) {
  std::string sql;
  for (const char* table : {"t", "t2"}) {
    absl::StrAppend(
        &sql, "DROP TABLE IF EXISTS ", table, "; CREATE TABLE ", table,
        " (id bigint PRIMARY KEY, a int, b text, c timestamptz); "
        "INSERT INTO ",
        table,
        " SELECT g, g, md5(g::text), timestamptz '2026-01-01 "
        "00:00:00+00' + g * interval '1 s' FROM generate_series(1, ",
        keys, ") g;");
  }
  return ExecSql(pg, sql);
}

absl::Status RunPgLatency(std::ostream& out) {
  const int rate = absl::GetFlag(FLAGS_pg_latency_rate);
  const int seconds = absl::GetFlag(FLAGS_pg_latency_seconds);
  const int keys = absl::GetFlag(FLAGS_pg_latency_keys);
  const int runs = std::max(1, absl::GetFlag(FLAGS_pg_runs));
  absl::StatusOr<int> writes =
      LatencyRunWrites("pg_latency", rate, seconds, keys);
  if (!writes.ok()) return writes.status();
  const int count = *writes;
  absl::StatusOr<std::unique_ptr<PgCluster>> a = PgCluster::Start();
  if (!a.ok()) return a.status();
  absl::StatusOr<std::unique_ptr<PgCluster>> b = PgCluster::Start();
  if (!b.ok()) return b.status();
  absl::Status s = CreateTables(**a, keys);
  if (s.ok()) s = CreateTables(**b, keys);
  if (!s.ok()) return s;

  // The baseline's replication, t2 only.
  s = ExecSql(**a, "CREATE PUBLICATION bench_native FOR TABLE t2");
  if (s.ok()) {
    s = ExecSql(**b, absl::StrCat("CREATE SUBSCRIPTION bench_native "
                                  "CONNECTION 'host=127.0.0.1 port=",
                                  (*a)->port(),
                                  " user=postgres dbname=postgres' "
                                  "PUBLICATION bench_native WITH (copy_data "
                                  "= false)"));
  }
  if (!s.ok()) return s;

  // tally's, t only.
  std::vector<std::string> extra;
  for (absl::string_view f :
       absl::StrSplit(absl::GetFlag(FLAGS_pg_latency_tallyd_flags), ',',
                      absl::SkipEmpty())) {
    extra.emplace_back(f);
  }
  const std::string address_a = testing::FreeLoopbackAddress();
  const std::string address_b = testing::FreeLoopbackAddress();
  absl::StatusOr<std::unique_ptr<Sidecar>> side_a =
      Sidecar::Start("latency-a", **a, address_a, {address_b}, extra);
  if (!side_a.ok()) return side_a.status();
  absl::StatusOr<std::unique_ptr<Sidecar>> side_b =
      Sidecar::Start("latency-b", **b, address_b, {address_a}, extra);
  if (!side_b.ok()) return side_b.status();
  s = (*side_a)->AwaitFollowing(absl::Minutes(2));
  if (s.ok()) s = (*side_b)->AwaitFollowing(absl::Minutes(2));
  if (!s.ok()) return s;

  absl::StatusOr<LatencyRuns> measured = RunAlternated(
      [&](const std::string& table, int run_rate, int run_count, int64_t base) {
        return MeasureRun(**a, **b, table, keys, run_rate, run_count, base);
      },
      runs, rate, count);
  if (!measured.ok()) return measured.status();
  out << absl::StrFormat(
      "pg-latency: a write on A visible in B, %d transactions/s for %d s on "
      "%d keys; %d runs each, alternated\n",
      rate, seconds, keys, runs);
  PrintLatencyHeader(out);
  PrintLatencyLine(out, "tally: two peered sidecars", measured->tally);
  PrintLatencyLine(out, "PostgreSQL logical replication A->B",
                   measured->baseline);
  out << "goal: tally p99 <= 200 ms\n";
  return absl::OkStatus();
}

}  // namespace

Scenario PgLatencyScenario() {
  return {"pg-latency",
          "a write on database A visible in B through two tallyd sidecars, "
          "p50/p99, vs PostgreSQL logical replication",
          &RunPgLatency};
}

}  // namespace bench
}  // namespace tally
