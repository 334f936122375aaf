// What the PostgreSQL scenarios of tally-bench share: the benchmark table,
// its 100 differences, the pg_comparator baseline, and tallyd sidecars
// started as an operator starts them and watched through their status.
//
//   absl::StatusOr<std::unique_ptr<PgCluster>> pg = PgCluster::Start();
//   FillTable(**pg, 1000000);
//   absl::StatusOr<std::unique_ptr<Sidecar>> side =
//       Sidecar::Start("side-a", **pg, FreeLoopbackAddress(), {});
//   (*side)->AwaitFollowing(absl::Minutes(5));
//   MakeDifferences(**pg, 1000000);
//   (*side)->AwaitConfirmed(*CurrentLsn(**pg), absl::Minutes(1));
//
// The table is t(id bigint primary key, a int, b text, c timestamptz),
// filled by generate_series; the differences are 40 updates, 30 deletes and
// 30 inserts spread over it.
//
// Thread-compatible: a Sidecar is used from one thread at a time.
#ifndef TALLY_TOOLS_BENCH_PG_SIDECAR_FIXTURE_H_
#define TALLY_TOOLS_BENCH_PG_SIDECAR_FIXTURE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "node/client/client.h"
#include "pg/wire/lsn.h"
#include "support/pg_cluster.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "tally/v1/tally.pb.h"

// Runs of each contender (pg_scenario.cc): every PostgreSQL scenario
// measures this many times, alternated with its baseline.
ABSL_DECLARE_FLAG(int, pg_runs);
ABSL_DECLARE_FLAG(std::string, pg_rows);
ABSL_DECLARE_FLAG(std::string, pg_comparator);

namespace tally {
namespace bench {

// Measurements of one contender: printed as min / median / max.
class Samples {
 public:
  void Add(double v) { values_.push_back(v); }
  bool empty() const { return values_.empty(); }
  size_t size() const { return values_.size(); }
  double Min() const;
  double Median() const;
  double Max() const;
  // "min / median / max" with `format` (a printf format for one double).
  std::string Text(const char* format = "%.2f") const;
  // The value below which `fraction` (0..1) of the samples lie (nearest
  // rank).
  double Quantile(double fraction) const;

 private:
  std::vector<double> values_;
};

// Runs `sql` on the cluster's database `postgres` (one psql -c: one
// transaction, so VACUUM must run alone).
absl::Status ExecSql(testing::PgCluster& pg, const std::string& sql);

// (Re)creates t with `rows` rows (ids 1..rows) and the pgcmp extension
// pg_comparator needs.
// --pg_rows as numbers (each 1000 or more).
absl::StatusOr<std::vector<uint64_t>> PgTableSizes();

absl::Status FillTable(testing::PgCluster& pg, uint64_t rows);

// VACUUM (FREEZE, ANALYZE) t and a CHECKPOINT, so that the contenders that
// follow read a settled table.
absl::Status SettleTable(testing::PgCluster& pg);

// The 100 differences on a table filled with `rows` rows.
absl::Status MakeDifferences(testing::PgCluster& pg, uint64_t rows);

// Both tables filled with `rows` rows, the 100 differences made on `b`,
// both settled: the ad-hoc diff scenarios' starting point.
absl::Status FillDiffering(testing::PgCluster& a, testing::PgCluster& b,
                           uint64_t rows);

// Runs `tally diff URL_A URL_B` (a fresh CLI process: connect, read,
// compare) and returns its seconds; an error unless it exits 1 having
// listed exactly the 100 differences the ad-hoc diff scenarios make.
absl::StatusOr<double> TimeColdTallyDiff(const std::string& url_a,
                                         const std::string& url_b);

// Waits until the machine is idle — at most 10% of its CPU time busy over
// 100 ms (/proc/stat) — or 3 s have passed; returns the time waited. Each
// contender's timed run starts from it: a pg_comparator run leaves its
// servers busy for ~100 ms after it returns (its backends ending, their
// temporary tables dropped), and a run alternated right after it was
// charged for that (warm diffs of 60 ms took 100–140 ms then).
absl::Duration WaitForIdleCpu();

// pg_current_wal_lsn() now: a position at or after the end of every
// transaction committed before the call.
absl::StatusOr<pg::Lsn> CurrentLsn(testing::PgCluster& pg);

// The port of "HOST:PORT" (0 when it has none): where pg_comparator, which
// takes ports, reaches a proxy.
int PortOf(const std::string& address);

// Times pg_comparator (`program`, PGTZ=UTC) comparing t on `a` and `b`;
// kInternal unless it reports exactly `expected` differences.
// The same through other ports (proxies in front of the two servers).
absl::StatusOr<double> TimePgComparatorAt(int port_a, int port_b,
                                          const std::string& program,
                                          int expected);
absl::StatusOr<double> TimePgComparator(const testing::PgCluster& a,
                                        const testing::PgCluster& b,
                                        const std::string& program,
                                        int expected);

// A tallyd sidecar (`--postgres URI --table public.t`, or the tables given)
// in its own temp dir, and a client for its status.
class Sidecar {
 public:
  // Starts tallyd named `name` on `listen`, peering `peers`, with `extra`
  // flags after the sidecar's, keeping `tables` (SCHEMA.TABLE each).
  // Returns when it listens (not when it follows: see AwaitFollowing).
  static absl::StatusOr<std::unique_ptr<Sidecar>> Start(
      const std::string& name, testing::PgCluster& pg,
      const std::string& listen, const std::vector<std::string>& peers,
      const std::vector<std::string>& extra = {},
      const std::vector<std::string>& tables = {"public.t"});
  // The same next to any database: `database_flags` name it and its tables
  // ({"--mariadb", URL, "--table", "db1.t"}).
  static absl::StatusOr<std::unique_ptr<Sidecar>> StartWith(
      const std::string& name, std::vector<std::string> database_flags,
      const std::string& listen, const std::vector<std::string>& peers,
      const std::vector<std::string>& extra = {});

  const std::string& address() const { return listen_; }
  testing::NodeProcess& process() { return *process_; }

  // The status block of the sidecar, or the RPC's error.
  absl::StatusOr<v1::PostgresStatus> Status();
  // The status of its database source (peer = postgresql://...), or the
  // RPC's error (kFailedPrecondition without one).
  absl::StatusOr<v1::DatabaseSourceStatus> SourceStatus();

  // Waits until the phase is `following`. kDeadlineExceeded (with the last
  // status and the log's tail) after `timeout`; kFailedPrecondition at once
  // when the phase is `failed`.
  absl::Status AwaitFollowing(absl::Duration timeout);
  // Waits until the phase is `following` and the confirmed position (the
  // index committed up to it) is at or past `lsn`.
  absl::Status AwaitConfirmed(pg::Lsn lsn, absl::Duration timeout);

  // Stops the process (SIGTERM, the store closed cleanly) and starts it
  // again on the same data dir, address and flags.
  absl::Status Stop();
  absl::Status Restart();

 private:
  Sidecar() = default;
  absl::Status Launch();
  absl::Status Await(const char* what, pg::Lsn lsn, absl::Duration timeout);

  std::string name_;
  std::string listen_;
  std::vector<std::string> flags_;
  testing::TempDir dir_;
  std::unique_ptr<testing::NodeProcess> process_;
  std::unique_ptr<node::NodeClient> client_;
};

// A tallyd's summary of `tally --json diff`: differences and A's seconds.
struct NodeDiff {
  double cli_seconds = 0;   // the whole CLI process
  double node_seconds = 0;  // the summary's `seconds` (A's diff with B)
  // A's whole run: its connection to B, the handshake and schema check,
  // the diff (A's log line `run diff ... duration_ms=`).
  double run_seconds = 0;
  // The summary's exchanges and bytes between A and B.
  int64_t rounds = 0;
  int64_t bytes = 0;
};

// Runs `tally --keyspace KEYSPACE --json diff A B` (a whole CLI process);
// kInternal unless it exits 1 having found exactly 100 differences.
absl::StatusOr<NodeDiff> TimeNodeDiff(Sidecar& a, Sidecar& b,
                                      const std::string& keyspace);

}  // namespace bench
}  // namespace tally

#endif  // TALLY_TOOLS_BENCH_PG_SIDECAR_FIXTURE_H_
