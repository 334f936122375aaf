// Crash tests of the PostgreSQL sidecar: real tallyd processes on real
// PostgreSQL servers, killed where a crash must lose nothing and do nothing
// twice.
//
//  - tallyd SIGKILLed by its own fault points
//    (pg/sidecar/apply/fault_points.h, the hidden --test-fault-point
//    setting): in the capture between the store's commit and the slot's
//    confirmation; in an apply before PostgreSQL's COMMIT, between
//    PostgreSQL's COMMIT and the store's, and after the store's; then
//    restarted without it.
//  - the server stopped as by a crash (`pg_ctl -m immediate`) while the
//    sidecar captures application writes, and while it applies a peer's;
//    tallyd keeps running and reconnects.
//
// After each: the tables of the databases are equal (md5 aggregate), every
// row is where it was written (rows per replication origin: the peer's rows
// came through tally's origin, none came back), the change logs hold each
// change exactly once (their last sequence equals the rows written: a row
// indexed twice would have two entries, under a second version), and the
// index equals the table — Sidecar::Verify (pg/sidecar/sidecar.h), run in this
// process on the stopped node's store once it has caught up.
#include <sys/wait.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pg/sidecar/sidecar.h"
#include "storage/store.h"
#include "support/pg_cluster.h"
#include "support/pg_test_macros.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "tests/pg/pg_sidecar_helpers.h"

namespace tally {
namespace {

using ::tally::pgtest::CountByOrigin;
using ::tally::pgtest::ExpectDiedAt;
using ::tally::pgtest::ExpectLogSettlesAt;
using ::tally::pgtest::Following;
using ::tally::pgtest::JsonNumber;
using ::tally::pgtest::StartSidecar;
using ::tally::pgtest::StartTableCluster;
using ::tally::pgtest::StatusJson;
using ::tally::pgtest::TableMd5;
using ::tally::pgtest::WaitFor;
using ::tally::testing::FreeLoopbackAddress;
using ::tally::testing::NodeProcess;
using ::tally::testing::PgCluster;
using ::tally::testing::PostgresBinDir;
using ::tally::testing::SpawnCommand;
using ::tally::testing::TempDir;

// Inserts `txns` transactions of `rows` new keys each from `first` (b =
// 'tag-id'), one psql call (one transaction) each, `gap` apart, so that
// the sidecar stores (or applies) them in several writes.
void InsertTransactions(PgCluster& pg, long long first, int txns, int rows,
                        absl::string_view tag, absl::Duration gap) {
  for (int i = 0; i < txns; ++i) {
    const long long lo = first + static_cast<long long>(i) * rows;
    absl::StatusOr<std::string> r = pg.Execute(absl::StrCat(
        "INSERT INTO t SELECT g, g, '", tag, "-' || g FROM generate_series(",
        lo, ", ", lo + rows - 1, ") g"));
    ASSERT_TRUE(r.ok()) << r.status();
    absl::SleepFor(gap);
  }
}

// Starts psql running `txns` transactions of `rows` new keys each from
// `first`, 5 ms apart, without waiting; its output goes to `out`. A server
// that goes away ends it.
pid_t SpawnInsertLoad(PgCluster& pg, long long first, int txns, int rows,
                      const std::string& out) {
  std::string sql;
  for (int i = 0; i < txns; ++i) {
    const long long lo = first + static_cast<long long>(i) * rows;
    absl::StrAppend(&sql, "INSERT INTO t SELECT g, g, 'load-' || g FROM ",
                    "generate_series(", lo, ", ", lo + rows - 1,
                    ") g; SELECT pg_sleep(0.005);\n");
  }
  const std::string file = out + ".sql";
  FILE* f = fopen(file.c_str(), "w");
  if (f == nullptr) return -1;
  fputs(sql.c_str(), f);
  fclose(f);
  return SpawnCommand(
      {PostgresBinDir() + "/psql", "-X", "-q", "-At", "-h", "127.0.0.1", "-p",
       absl::StrCat(pg.port()), "-U", "postgres", "-d", "postgres", "-f", file},
      out);
}

// Opens the stopped node's store with a sidecar in this process, lets it
// catch up with the database, and checks that its index equals the table
// (every row's digest, nothing missing on either side) and holds `rows`.
void ExpectIndexEqualsTable(const std::string& name,
                            const std::string& data_dir, PgCluster& pg,
                            uint64_t rows) {
  pg::SidecarOptions o;
  o.conninfo = pg.Uri();
  o.tables = {"public.t"};
  o.node_name = name;
  std::string log;
  o.log = [&log](absl::string_view line) { absl::StrAppend(&log, line, "\n"); };
  absl::StatusOr<std::unique_ptr<pg::Sidecar>> sidecar =
      pg::Sidecar::Prepare(o);
  ASSERT_TRUE(sidecar.ok()) << sidecar.status();
  storage::StoreOptions so;
  so.node_name = name;
  so.backend = (*sidecar)->backend();
  absl::StatusOr<std::unique_ptr<storage::Store>> store =
      storage::Store::Open(data_dir, so);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*sidecar)->Start(store->get()).ok());
  const absl::Status caught_up = (*sidecar)->AwaitCaughtUp(absl::Seconds(30));
  ASSERT_TRUE(caught_up.ok()) << caught_up << "\n" << log;
  // The sidecar resumed where the node's store ended: it had nothing to
  // rebuild.
  EXPECT_THAT(log, ::testing::Not(::testing::HasSubstr("building the index")));
  absl::StatusOr<pg::VerifyResult> v = (*sidecar)->Verify("public.t");
  (*sidecar)->Stop();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->ok()) << v->mismatched_keys.size() << " mismatched, "
                       << v->missing_from_index.size()
                       << " missing from the index, "
                       << v->missing_from_table.size()
                       << " missing from the table";
  EXPECT_EQ(v->table_rows, rows);
  EXPECT_EQ(v->index_rows, rows);
}

// tallyd dies after the capture's store write and before it confirms the
// position to the slot, while the application goes on writing. Restarted,
// it resumes from its stored position (not the slot's older one): every
// change is indexed, each once.
TEST(PgCrash, CaptureKilledBeforeConfirmingIndexesEachChangeOnce) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg = StartTableCluster();
  ASSERT_NE(pg, nullptr);
  TempDir dir;
  const std::string addr = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> side =
      StartSidecar("crash-a", dir.path(), *pg, addr, {},
                   {"--test-fault-point", "capture-after-index-commit:4"});
  ASSERT_NE(side, nullptr);
  ASSERT_TRUE(WaitFor([&] { return Following(addr); }, absl::Seconds(20)))
      << side->Log();

  // 12 transactions of 10 rows, each its own store write: the 4th kills.
  ASSERT_NO_FATAL_FAILURE(
      InsertTransactions(*pg, 1, 12, 10, "a", absl::Milliseconds(150)));
  ASSERT_NO_FATAL_FAILURE(ExpectDiedAt(*side, "capture-after-index-commit"));
  // The application goes on while the node is down: 50 updates, 20
  // deletes.
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(pg->Execute(absl::StrCat("UPDATE t SET a = a + 1000 WHERE id "
                                         "BETWEEN ",
                                         i * 10 + 1, " AND ", i * 10 + 10))
                    .ok());
  }
  ASSERT_TRUE(pg->Execute("DELETE FROM t WHERE id BETWEEN 101 AND 110").ok());
  ASSERT_TRUE(pg->Execute("DELETE FROM t WHERE id BETWEEN 111 AND 120").ok());

  side = StartSidecar("crash-a", dir.path(), *pg, addr, {});
  ASSERT_NE(side, nullptr);
  // 120 inserts + 50 updates + 20 deletes, one log entry each.
  ASSERT_NO_FATAL_FAILURE(ExpectLogSettlesAt(addr, 190, *side));
  EXPECT_EQ(side->Stop(), 0) << side->Log();
  ExpectIndexEqualsTable("crash-a", dir.path(), *pg, 100);
}

// A transaction larger than one store batch, and small ones grouped:
// tallyd dies after the 2nd store write of one 25,000-row transaction
// (three writes of at most 10,000: the split transaction's progress is in
// the stored position); while it is down, 100 small transactions commit,
// which the restarted node groups into shared store writes, and it dies
// again after the first of those. Each restart resumes from the stored
// position: every change is indexed, each once.
TEST(PgCrash, CaptureKilledBetweenBatchesIndexesEachChangeOnce) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg = StartTableCluster();
  ASSERT_NE(pg, nullptr);
  TempDir dir;
  const std::string addr = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> side =
      StartSidecar("crash-p", dir.path(), *pg, addr, {},
                   {"--test-fault-point", "capture-after-index-commit:2"});
  ASSERT_NE(side, nullptr);
  ASSERT_TRUE(WaitFor([&] { return Following(addr); }, absl::Seconds(20)))
      << side->Log();

  ASSERT_NO_FATAL_FAILURE(
      InsertTransactions(*pg, 1, 1, 25000, "big", absl::ZeroDuration()));
  ASSERT_NO_FATAL_FAILURE(ExpectDiedAt(*side, "capture-after-index-commit"));
  ASSERT_NO_FATAL_FAILURE(
      InsertTransactions(*pg, 25001, 100, 5, "small", absl::ZeroDuration()));

  side = StartSidecar("crash-p", dir.path(), *pg, addr, {},
                      {"--test-fault-point", "capture-after-index-commit:1"});
  ASSERT_NE(side, nullptr);
  ASSERT_NO_FATAL_FAILURE(ExpectDiedAt(*side, "capture-after-index-commit"));

  side = StartSidecar("crash-p", dir.path(), *pg, addr, {});
  ASSERT_NE(side, nullptr);
  // 25,000 + 100 × 5 inserts, one log entry each.
  ASSERT_NO_FATAL_FAILURE(ExpectLogSettlesAt(addr, 25500, *side));
  EXPECT_EQ(side->Stop(), 0) << side->Log();
  ExpectIndexEqualsTable("crash-p", dir.path(), *pg, 25500);
}

// Two databases, a sidecar on each peering the other; tallyd A is killed in
// an apply of B's rows at a fault point — an apply of updates, which A
// makes under the compare-and-swap on the tokens its index holds — then
// restarted without it.
class PgApplyCrash : public ::testing::TestWithParam<const char*> {};

TEST_P(PgApplyCrash, AppliesEveryPeerRowOnceWithoutEcho) {
  TALLY_SKIP_UNLESS_POSTGRES();
  const std::string point = GetParam();
  std::unique_ptr<PgCluster> pg_a = StartTableCluster();
  std::unique_ptr<PgCluster> pg_b = StartTableCluster();
  ASSERT_NE(pg_a, nullptr);
  ASSERT_NE(pg_b, nullptr);
  TempDir dir_a, dir_b;
  const std::string addr_a = FreeLoopbackAddress();
  const std::string addr_b = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> side_a =
      StartSidecar("crash-a", dir_a.path(), *pg_a, addr_a, {addr_b},
                   {"--test-fault-point", absl::StrCat(point, ":7")});
  std::unique_ptr<NodeProcess> side_b =
      StartSidecar("crash-b", dir_b.path(), *pg_b, addr_b, {addr_a});
  ASSERT_NE(side_a, nullptr);
  ASSERT_NE(side_b, nullptr);
  ASSERT_TRUE(WaitFor([&] { return Following(addr_a) && Following(addr_b); },
                      absl::Seconds(20)))
      << side_a->Log() << side_b->Log();

  // B's application writes 5 transactions of inserts, then 5 of updates of
  // those rows, each reaching A in an apply of its own: A dies in its 7th,
  // the second of updates. B goes on while A is down.
  ASSERT_NO_FATAL_FAILURE(
      InsertTransactions(*pg_b, 1001, 5, 10, "b", absl::Milliseconds(300)));
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(
        pg_b->Execute(absl::StrCat("UPDATE t SET a = a + 1, b = "
                                   "'b-upd' WHERE id BETWEEN ",
                                   1001 + i * 10, " AND ", 1010 + i * 10))
            .ok());
    absl::SleepFor(absl::Milliseconds(300));
  }
  ASSERT_NO_FATAL_FAILURE(ExpectDiedAt(*side_a, point));
  ASSERT_NO_FATAL_FAILURE(
      InsertTransactions(*pg_b, 1051, 2, 10, "b", absl::ZeroDuration()));

  side_a = StartSidecar("crash-a", dir_a.path(), *pg_a, addr_a, {addr_b});
  ASSERT_NE(side_a, nullptr);
  ASSERT_TRUE(WaitFor(
      [&] {
        return *pg_a->Execute("SELECT count(*) FROM t") == "70" &&
               TableMd5(*pg_a, "t") == TableMd5(*pg_b, "t");
      },
      absl::Seconds(30)))
      << "rows a " << *pg_a->Execute("SELECT count(*) FROM t") << "\n"
      << side_a->Log() << side_b->Log();
  // Each of B's 70 inserts and 50 updates is one change in each log:
  // applied once on A (a second apply, or the capture indexing A's own
  // apply as a local change, would add entries), nothing echoed to B.
  ASSERT_NO_FATAL_FAILURE(ExpectLogSettlesAt(addr_a, 120, *side_a));
  ASSERT_NO_FATAL_FAILURE(ExpectLogSettlesAt(addr_b, 120, *side_b));
  EXPECT_EQ(TableMd5(*pg_a, "t"), TableMd5(*pg_b, "t"));
  EXPECT_EQ(*pg_a->Execute("SELECT count(*) FROM t WHERE b = 'b-upd'"), "50");
  EXPECT_EQ(CountByOrigin(*pg_a, 1001, 1070, /*tally=*/true), "70");
  EXPECT_EQ(CountByOrigin(*pg_a, 1001, 1070, /*tally=*/false), "0");
  EXPECT_EQ(CountByOrigin(*pg_b, 1001, 1070, /*tally=*/true), "0");
  EXPECT_EQ(CountByOrigin(*pg_b, 1001, 1070, /*tally=*/false), "70");
  EXPECT_EQ(JsonNumber(StatusJson(addr_b), "rows_applied"), 0)
      << StatusJson(addr_b);

  EXPECT_EQ(side_a->Stop(), 0) << side_a->Log();
  EXPECT_EQ(side_b->Stop(), 0) << side_b->Log();
  ExpectIndexEqualsTable("crash-a", dir_a.path(), *pg_a, 70);
  ExpectIndexEqualsTable("crash-b", dir_b.path(), *pg_b, 70);
}

INSTANTIATE_TEST_SUITE_P(FaultPoints, PgApplyCrash,
                         ::testing::Values("apply-before-db-commit",
                                           "apply-after-db-commit",
                                           "apply-after-store-commit"),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           std::string name;
                           for (const char* c = p.param; *c != '\0'; ++c) {
                             if (*c != '-') name.push_back(*c);
                           }
                           return name;
                         });

// The server crashes (pg_ctl -m immediate) while the sidecar captures a
// stream of application transactions; tallyd keeps running. After the
// server's restart it resumes: the index holds exactly what committed.
TEST(PgCrash, ServerCrashDuringCaptureLosesNothingAndIndexesNothingTwice) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg = StartTableCluster();
  ASSERT_NE(pg, nullptr);
  TempDir dir, out;
  const std::string addr = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> side =
      StartSidecar("crash-a", dir.path(), *pg, addr, {});
  ASSERT_NE(side, nullptr);
  ASSERT_TRUE(WaitFor([&] { return Following(addr); }, absl::Seconds(20)))
      << side->Log();

  const pid_t load = SpawnInsertLoad(*pg, 1, 600, 5, out.path() + "/load");
  ASSERT_GT(load, 0);
  ASSERT_TRUE(WaitFor(
      [&] {
        absl::StatusOr<std::string> n = pg->Execute("SELECT count(*) FROM t");
        return n.ok() && *n != "0" && std::stoll(*n) >= 300;
      },
      absl::Seconds(20)));
  ASSERT_TRUE(pg->Stop(PgCluster::StopMode::kImmediate).ok());
  int wstatus = 0;
  ASSERT_EQ(waitpid(load, &wstatus, 0), load);  // the load lost its server
  absl::SleepFor(absl::Milliseconds(1500));
  ASSERT_TRUE(pg->Restart().ok()) << pg->Log();
  const std::string committed = *pg->Execute("SELECT count(*) FROM t");
  const long long rows = std::stoll(committed);
  ASSERT_LT(rows, 3000) << "the load ended before the crash";
  // And the application writes again after the restart.
  ASSERT_NO_FATAL_FAILURE(
      InsertTransactions(*pg, 100001, 5, 10, "after", absl::ZeroDuration()));

  ASSERT_NO_FATAL_FAILURE(ExpectLogSettlesAt(addr, rows + 50, *side));
  EXPECT_EQ(side->Stop(), 0) << side->Log();
  ExpectIndexEqualsTable("crash-a", dir.path(), *pg, rows + 50);
}

// The server of A crashes while A's sidecar applies a stream of B's
// transactions; tallyd A keeps running. After the restart both tables are
// equal, each of B's rows applied once, nothing echoed.
TEST(PgCrash, ServerCrashDuringApplyLosesNothingAndAppliesNothingTwice) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg_a = StartTableCluster();
  std::unique_ptr<PgCluster> pg_b = StartTableCluster();
  ASSERT_NE(pg_a, nullptr);
  ASSERT_NE(pg_b, nullptr);
  TempDir dir_a, dir_b, out;
  const std::string addr_a = FreeLoopbackAddress();
  const std::string addr_b = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> side_a =
      StartSidecar("crash-a", dir_a.path(), *pg_a, addr_a, {addr_b});
  std::unique_ptr<NodeProcess> side_b =
      StartSidecar("crash-b", dir_b.path(), *pg_b, addr_b, {addr_a});
  ASSERT_NE(side_a, nullptr);
  ASSERT_NE(side_b, nullptr);
  ASSERT_TRUE(WaitFor([&] { return Following(addr_a) && Following(addr_b); },
                      absl::Seconds(20)))
      << side_a->Log() << side_b->Log();

  const pid_t load = SpawnInsertLoad(*pg_b, 1, 400, 5, out.path() + "/load");
  ASSERT_GT(load, 0);
  // A has applied some of the stream: crash its server.
  ASSERT_TRUE(WaitFor(
      [&] {
        absl::StatusOr<std::string> n = pg_a->Execute("SELECT count(*) FROM t");
        return n.ok() && std::stoll(*n) >= 200;
      },
      absl::Seconds(20)))
      << side_a->Log();
  ASSERT_TRUE(pg_a->Stop(PgCluster::StopMode::kImmediate).ok());
  absl::SleepFor(absl::Milliseconds(1500));
  ASSERT_TRUE(pg_a->Restart().ok()) << pg_a->Log();
  int wstatus = 0;
  ASSERT_EQ(waitpid(load, &wstatus, 0), load);
  ASSERT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
  ASSERT_EQ(*pg_b->Execute("SELECT count(*) FROM t"), "2000");

  ASSERT_TRUE(WaitFor(
      [&] {
        return *pg_a->Execute("SELECT count(*) FROM t") == "2000" &&
               TableMd5(*pg_a, "t") == TableMd5(*pg_b, "t");
      },
      absl::Seconds(40)))
      << "rows a " << *pg_a->Execute("SELECT count(*) FROM t") << "\n"
      << side_a->Log() << side_b->Log();
  ASSERT_NO_FATAL_FAILURE(ExpectLogSettlesAt(addr_a, 2000, *side_a));
  ASSERT_NO_FATAL_FAILURE(ExpectLogSettlesAt(addr_b, 2000, *side_b));
  EXPECT_EQ(CountByOrigin(*pg_a, 1, 2000, /*tally=*/true), "2000");
  EXPECT_EQ(CountByOrigin(*pg_b, 1, 2000, /*tally=*/true), "0");
  EXPECT_EQ(JsonNumber(StatusJson(addr_b), "rows_applied"), 0)
      << StatusJson(addr_b);

  EXPECT_EQ(side_a->Stop(), 0) << side_a->Log();
  EXPECT_EQ(side_b->Stop(), 0) << side_b->Log();
  ExpectIndexEqualsTable("crash-a", dir_a.path(), *pg_a, 2000);
  ExpectIndexEqualsTable("crash-b", dir_b.path(), *pg_b, 2000);
}

}  // namespace
}  // namespace tally
