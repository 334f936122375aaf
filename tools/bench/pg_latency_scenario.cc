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
#include <atomic>
#include <memory>
#include <string>
#include <thread>
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

struct RunFigures {
  double p50_ms = 0;
  double p99_ms = 0;
  double max_ms = 0;
  double rate = 0;  // transactions per second the writer achieved
};

// Opens a plain connection to `pg`.
absl::StatusOr<std::unique_ptr<pg::Connection>> Connect(const PgCluster& pg) {
  pg::ConnectOptions options;
  options.application_name = "tally-bench";
  return pg::Connection::Open(pg.Uri(), options);
}

// One run on `table`: `count` writes on A at `rate`/s, tokens from `base`.
absl::StatusOr<RunFigures> MeasureRun(const PgCluster& a, const PgCluster& b,
                                      const std::string& table, int keys,
                                      int rate, int count, int base) {
  absl::StatusOr<std::unique_ptr<pg::Connection>> writer = Connect(a);
  if (!writer.ok()) return writer.status();
  absl::StatusOr<std::unique_ptr<pg::Connection>> reader = Connect(b);
  if (!reader.ok()) return reader.status();

  std::vector<absl::Time> sent(count);
  std::vector<absl::Time> seen(count, absl::InfiniteFuture());
  std::atomic<int> written{0};
  std::atomic<bool> writer_done{false};
  absl::Status write_status;
  absl::Time write_end;
  const std::string update = absl::StrCat(
      "UPDATE ", table,
      " SET a = $1::int, b = 'tok-' || $1, c = to_timestamp($2::float8) "
      "WHERE id = $3::bigint");
  const absl::Time start = absl::Now() + absl::Milliseconds(100);
  std::thread writing([&] {
    for (int i = 0; i < count; ++i) {
      const absl::Time due = start + absl::Seconds(1) * i / rate;
      const absl::Time now = absl::Now();
      if (due > now) absl::SleepFor(due - now);
      sent[i] = absl::Now();
      absl::StatusOr<pg::Result> r = (*writer)->ExecParams(
          update,
          {pg::Param::Text(absl::StrCat(base + i)),
           pg::Param::Text(absl::StrFormat(
               "%.6f", absl::ToDoubleSeconds(sent[i] - absl::UnixEpoch()))),
           pg::Param::Text(absl::StrCat(i % keys + 1))});
      if (!r.ok()) {
        write_status = r.status();
        break;
      }
      written.store(i + 1, std::memory_order_release);
    }
    write_end = absl::Now();
    writer_done.store(true, std::memory_order_release);
  });

  // next[k]: the first write of key k+1 not yet seen in B.
  std::vector<int> next(keys);
  for (int k = 0; k < keys; ++k) next[k] = k;
  int visible = 0;
  absl::Status read_status;
  const std::string poll = absl::StrCat("SELECT id, a FROM ", table);
  absl::Time give_up = absl::InfiniteFuture();
  while (visible < count) {
    absl::StatusOr<pg::Result> r = (*reader)->Exec(poll);
    const absl::Time now = absl::Now();
    if (!r.ok()) {
      read_status = r.status();
      break;
    }
    for (int row = 0; row < r->rows(); ++row) {
      int64_t id = 0, token = 0;
      if (!absl::SimpleAtoi(r->Value(row, 0), &id) ||
          !absl::SimpleAtoi(r->Value(row, 1), &token) || id < 1 || id > keys) {
        continue;
      }
      int& i = next[id - 1];
      while (i < count && base + i <= token) {
        seen[i] = now;
        ++visible;
        i += keys;
      }
    }
    if (give_up == absl::InfiniteFuture() &&
        writer_done.load(std::memory_order_acquire)) {
      if (written.load(std::memory_order_acquire) < count) break;  // failed
      give_up = now + absl::Minutes(5);
    }
    if (now > give_up) break;
    absl::SleepFor(absl::Milliseconds(1));
  }
  writing.join();
  if (!write_status.ok()) return write_status;
  if (!read_status.ok()) return read_status;
  if (visible < count) {
    return absl::DeadlineExceededError(absl::StrCat(
        table, ": ", count - visible, " of ", count,
        " writes on A not visible in B 5 min after the last was sent"));
  }
  Samples ms;
  for (int i = 0; i < count; ++i) {
    ms.Add(absl::ToDoubleMilliseconds(seen[i] - sent[i]));
  }
  RunFigures f;
  f.p50_ms = ms.Quantile(0.5);
  f.p99_ms = ms.Quantile(0.99);
  f.max_ms = ms.Max();
  f.rate = count / absl::ToDoubleSeconds(write_end - sent[0]);
  return f;
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
  if (rate < 1 || seconds < 1 || keys < 1) {
    return absl::InvalidArgumentError(
        "--pg_latency_rate, --pg_latency_seconds and --pg_latency_keys must "
        "be positive");
  }
  const int count = rate * seconds;
  if (count >= 1000000) {
    return absl::InvalidArgumentError(
        "--pg_latency_rate x --pg_latency_seconds: under 1,000,000 writes a "
        "run");
  }
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

  // A short warm-up of each path (the subscription's worker starts, the
  // feed subscriptions connect); it must deliver, or the runs cannot.
  int base = 1000000;
  for (const char* table : {"t", "t2"}) {
    absl::StatusOr<RunFigures> warm =
        MeasureRun(**a, **b, table, keys, 100, 200, base);
    if (!warm.ok()) return warm.status();
    base += 1000000;
  }

  std::vector<RunFigures> tally, native;
  for (int run = 0; run < runs; ++run) {
    for (int k = 0; k < 2; ++k) {
      const bool tally_turn = (k == run % 2);
      absl::StatusOr<RunFigures> f = MeasureRun(
          **a, **b, tally_turn ? "t" : "t2", keys, rate, count, base);
      if (!f.ok()) return f.status();
      base += 1000000;
      (tally_turn ? tally : native).push_back(*f);
    }
  }

  auto line = [&out](const char* name, const std::vector<RunFigures>& v) {
    Samples p50, p99, max, achieved;
    for (const RunFigures& f : v) {
      p50.Add(f.p50_ms);
      p99.Add(f.p99_ms);
      max.Add(f.max_ms);
      achieved.Add(f.rate);
    }
    out << absl::StrFormat("%-38s %-20s %-20s %-22s %-20s\n", name,
                           p50.Text("%.1f"), p99.Text("%.1f"), max.Text("%.0f"),
                           achieved.Text("%.0f"));
  };
  out << absl::StrFormat(
      "pg-latency: a write on A visible in B, %d transactions/s for %d s on "
      "%d keys; %d runs each, alternated\n",
      rate, seconds, keys, runs);
  out << absl::StrFormat("%-38s %-20s %-20s %-22s %-20s\n", "",
                         "p50 ms (min/med/max)", "p99 ms (min/med/max)",
                         "max ms (min/med/max)", "writes/s achieved");
  line("tally: two peered sidecars", tally);
  line("PostgreSQL logical replication A->B", native);
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
