// Scenario "mariadb-latency": how long an application write on MariaDB
// server A takes to be visible in MariaDB server B through two peered
// tallyd sidecars (end to end), against MariaDB's own replication A -> B.
//
// Two throwaway MariaDB servers (server ids 1 and 2) with the same two
// tables of --mariadb_latency_keys rows, db1.t(id bigint primary key, a
// int, b varchar(40), c datetime(6)) (tools/bench/mariadb_fixture.h) and
// db1.t2 (the same). tally: `tallyd --mariadb` on each server, each
// peering the other, default settings; they keep db1.t only. Baseline:
// B a GTID replica of A (`CHANGE MASTER TO ... MASTER_USE_GTID=slave_pos`
// from A's position after the tables were made) with
// `replicate_do_table = db1.t2`: MariaDB's own replication, the
// replica's I/O and SQL threads with their defaults, serving t2 only.
// Both paths run all the time; each run writes to one table only, tally
// and the baseline alternated, --mariadb_latency_runs runs each.
//
// A run (tools/bench/latency_run.h): a writer on one connection to A
// issues --mariadb_latency_rate single-row transactions per second for
// --mariadb_latency_seconds, `UPDATE tbl SET a = TOKEN, b = 'tok-TOKEN', c
// = SEND_TIME WHERE id = K` (autocommit); a reader on one connection to B
// polls `SELECT id, a FROM tbl` ~1 ms apart. Latency = when the poll saw
// the token - the write's send time. Before the runs, 200 writes at 100/s
// on each path warm it up and must arrive.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mariadb/connection.h"
#include "mariadb/url.h"
#include "support/mariadb_server.h"
#include "support/process.h"
#include "tools/bench/latency_run.h"
#include "tools/bench/mariadb_fixture.h"
#include "tools/bench/pg_sidecar_fixture.h"
#include "tools/bench/scenario.h"

ABSL_FLAG(int, mariadb_latency_rate, 1000,
          "mariadb-latency: application transactions per second on A");
ABSL_FLAG(int, mariadb_latency_seconds, 10,
          "mariadb-latency: seconds of writing a run");
ABSL_FLAG(int, mariadb_latency_keys, 1000,
          "mariadb-latency: rows of the tables");
ABSL_FLAG(int, mariadb_latency_runs, 3,
          "mariadb-latency: runs of each path, alternated");

namespace tally {
namespace bench {
namespace {

using testing::MariaDbServer;

absl::StatusOr<std::unique_ptr<mariadb::Connection>> Connect(
    const MariaDbServer& server) {
  absl::StatusOr<mariadb::MariaDbTarget> target =
      mariadb::ParseMariaDbUrl(server.Url("db1"));
  if (!target.ok()) return target.status();
  return mariadb::Connection::Open(*target, absl::Seconds(30));
}

// One run on `table` (tools/bench/latency_run.h).
absl::StatusOr<LatencyFigures> MeasureRun(const MariaDbServer& a,
                                          const MariaDbServer& b,
                                          const std::string& table, int keys,
                                          int rate, int count, int64_t base) {
  absl::StatusOr<std::unique_ptr<mariadb::Connection>> writer = Connect(a);
  if (!writer.ok()) return writer.status();
  absl::StatusOr<std::unique_ptr<mariadb::Connection>> reader = Connect(b);
  if (!reader.ok()) return reader.status();
  const std::string poll = absl::StrCat("SELECT id, a FROM db1.", table);
  return MeasureLatency(
      [&](int64_t token, int64_t key, absl::Time sent) {
        return (*writer)->Exec(absl::StrFormat(
            "UPDATE db1.%s SET a = %d, b = 'tok-%d', c = FROM_UNIXTIME(%.6f) "
            "WHERE id = %d",
            table, token, token,
            absl::ToDoubleSeconds(sent - absl::UnixEpoch()), key));
      },
      [&]() -> absl::StatusOr<std::vector<KeyToken>> {
        absl::StatusOr<mariadb::TextRows> r = (*reader)->Query(poll);
        if (!r.ok()) return r.status();
        std::vector<KeyToken> rows;
        rows.reserve(r->size());
        for (const mariadb::TextRow& row : *r) {
          KeyToken kt;
          if (row.size() == 2 && row[0].has_value() && row[1].has_value() &&
              absl::SimpleAtoi(*row[0], &kt.key) &&
              absl::SimpleAtoi(*row[1], &kt.token)) {
            rows.push_back(kt);
          }
        }
        return rows;
      },
      table, keys, rate, count, base);
}

absl::Status CreateTables(MariaDbServer& db, int keys) {
  absl::Status s = FillMariaTable(db, keys);
  if (!s.ok()) return s;
  return MariaExec(db,
                   "DROP TABLE IF EXISTS db1.t2; CREATE TABLE db1.t2 LIKE "
                   "db1.t; INSERT INTO db1.t2 SELECT * FROM db1.t");
}

absl::Status RunMariaDbLatency(std::ostream& out) {
  const int rate = absl::GetFlag(FLAGS_mariadb_latency_rate);
  const int seconds = absl::GetFlag(FLAGS_mariadb_latency_seconds);
  const int keys = absl::GetFlag(FLAGS_mariadb_latency_keys);
  const int runs = std::max(1, absl::GetFlag(FLAGS_mariadb_latency_runs));
  absl::StatusOr<int> writes =
      LatencyRunWrites("mariadb_latency", rate, seconds, keys);
  if (!writes.ok()) return writes.status();
  const int count = *writes;
  absl::StatusOr<std::unique_ptr<MariaDbServer>> a = MariaDbServer::Start();
  if (!a.ok()) return a.status();
  testing::MariaDbServerOptions replica;
  replica.options = {"--server-id=2"};
  absl::StatusOr<std::unique_ptr<MariaDbServer>> b =
      MariaDbServer::Start(replica);
  if (!b.ok()) return b.status();
  absl::Status s = CreateTables(**a, keys);
  if (s.ok()) s = CreateTables(**b, keys);
  if (!s.ok()) return s;

  // The baseline's replication, t2 only, from A's position now.
  s = MakeMariaReplica(**a, **b, "db1.t2");
  if (!s.ok()) return s;

  // tally's, t only.
  const std::string address_a = testing::FreeLoopbackAddress();
  const std::string address_b = testing::FreeLoopbackAddress();
  absl::StatusOr<std::unique_ptr<Sidecar>> side_a = Sidecar::StartWith(
      "latency-a", {"--mariadb", (*a)->Url("db1"), "--table", "db1.t"},
      address_a, {address_b});
  if (!side_a.ok()) return side_a.status();
  absl::StatusOr<std::unique_ptr<Sidecar>> side_b = Sidecar::StartWith(
      "latency-b", {"--mariadb", (*b)->Url("db1"), "--table", "db1.t"},
      address_b, {address_a});
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
      "mariadb-latency: a write on A visible in B, %d transactions/s for %d "
      "s on %d keys; %d runs each, alternated\n",
      rate, seconds, keys, runs);
  PrintLatencyHeader(out);
  PrintLatencyLine(out, "tally: two peered MariaDB sidecars", measured->tally);
  PrintLatencyLine(out, "MariaDB replication A->B (GTID)", measured->baseline);
  out << "goal: tally p99 <= 200 ms\n";
  s = (*side_a)->Stop();
  if (s.ok()) s = (*side_b)->Stop();
  return s;
}

}  // namespace

Scenario MariaDbLatencyScenario() {
  return {"mariadb-latency",
          "a write on MariaDB A visible in MariaDB B through two tallyd "
          "sidecars, p50/p99, vs MariaDB's GTID replication",
          &RunMariaDbLatency};
}

}  // namespace bench
}  // namespace tally
