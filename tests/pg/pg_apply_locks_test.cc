// The sidecar's apply next to an application that writes the same rows:
// the apply loses every lock conflict and holds row locks briefly, so that
// PostgreSQL never aborts an application's transaction because of it
// (a deadlock between the two is broken by the apply's own lock timeout,
// never by the application's deadlock detector) and the application is not
// queued behind the apply while the apply waits.
//
// pgbench TPC-B runs on two databases meshed by tally, writing the same
// rows on both; tally keeps the tables in the order opposite to the one
// pgbench locks them in (branches, tellers, accounts), the order that lets
// an apply waiting for a row hold another one an application waits for.
#include <atomic>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "support/pg_cluster.h"
#include "support/pg_test_macros.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "tests/pg/pg_apply_helpers.h"
#include "tests/pg/pg_sidecar_helpers.h"

namespace tally {
namespace {

using ::tally::pgtest::Following;
using ::tally::pgtest::OrderedMd5;
using ::tally::pgtest::Pgbench;
using ::tally::pgtest::PgbenchFigure;
using ::tally::pgtest::StartTablesSidecar;
using ::tally::pgtest::StatusJson;
using ::tally::pgtest::WaitFor;
using ::tally::testing::CommandResult;
using ::tally::testing::FreeLoopbackAddress;
using ::tally::testing::NodeProcess;
using ::tally::testing::PgCluster;
using ::tally::testing::TempDir;

const std::vector<std::string> kTables = {"public.pgbench_branches",
                                          "public.pgbench_tellers",
                                          "public.pgbench_accounts"};

struct Table {
  const char* name;
  const char* key;
};
constexpr Table kSums[] = {{"pgbench_branches", "bid"},
                           {"pgbench_tellers", "tid"},
                           {"pgbench_accounts", "aid"}};

bool TablesEqual(PgCluster& a, PgCluster& b) {
  for (const Table& t : kSums) {
    if (OrderedMd5(a, t.name, t.key) != OrderedMd5(b, t.name, t.key)) {
      return false;
    }
  }
  return true;
}

// Rows an application locks in the order opposite to the apply's: on b,
// pgbench clients lock y's row k then x's row k (SELECT ... FOR UPDATE,
// which changes no row, so the apply's compare-and-swap still holds);
// meanwhile a's writes of x and y arrive at b in applies that write x's
// rows, then y's. An apply that waited for y's row k while holding x's,
// for which a client already waited, would make PostgreSQL abort that
// client's transaction (it waited first, so its deadlock check runs
// first).
TEST(PgApplyLocks, AnApplicationLockingInTheOppositeOrderLosesNothing) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg[2];
  for (auto& p : pg) {
    absl::StatusOr<std::unique_ptr<PgCluster>> started = PgCluster::Start();
    ASSERT_TRUE(started.ok()) << started.status();
    p = *std::move(started);
    ASSERT_TRUE(p->Execute("CREATE TABLE x (id int PRIMARY KEY, v int); "
                           "CREATE TABLE y (id int PRIMARY KEY, v int); "
                           "INSERT INTO x SELECT g, 0 FROM "
                           "generate_series(1, 2000) g; "
                           "INSERT INTO y SELECT g, 0 FROM "
                           "generate_series(1, 2000) g")
                    .ok());
  }
  TempDir dir[2];
  const std::string addr[2] = {FreeLoopbackAddress(), FreeLoopbackAddress()};
  std::unique_ptr<NodeProcess> side[2];
  for (int i = 0; i < 2; ++i) {
    side[i] =
        StartTablesSidecar(absl::StrCat("order-", i), dir[i].path(), *pg[i],
                           addr[i], {addr[1 - i]}, {"public.x", "public.y"});
    ASSERT_NE(side[i], nullptr);
  }
  ASSERT_TRUE(WaitFor([&] { return Following(addr[0]) && Following(addr[1]); },
                      absl::Seconds(30)))
      << side[0]->Log() << side[1]->Log();

  const std::string script = absl::StrCat(dir[1].path(), "/opposite.sql");
  {
    std::ofstream out(script);
    out << "\\set k random(1, 2000)\n"
           "BEGIN;\n"
           "SELECT v FROM y WHERE id = :k FOR UPDATE;\n"
           "SELECT v FROM x WHERE id = :k FOR UPDATE;\n"
           "END;\n";
  }
  std::atomic<bool> done{false};
  long long written = 0;
  std::thread writer([&] {
    // Half of each table per transaction, x's rows first.
    for (int n = 0; !done.load(); ++n) {
      const int from = n % 2 == 0 ? 1 : 1001;
      absl::StatusOr<std::string> r = pg[0]->Execute(absl::StrCat(
          "BEGIN; UPDATE x SET v = v + 1 WHERE id BETWEEN ", from, " AND ",
          from + 999, "; UPDATE y SET v = v + 1 WHERE id BETWEEN ", from,
          " AND ", from + 999, "; COMMIT"));
      EXPECT_TRUE(r.ok()) << r.status();
      ++written;
      absl::SleepFor(absl::Milliseconds(100));
    }
  });
  const CommandResult bench = Pgbench(*pg[1],
                                      {"-n", "-c", "4", "-j", "2", "-T", "12",
                                       "--failures-detailed", "-f", script},
                                      absl::Seconds(60));
  done = true;
  writer.join();
  const double processed =
      PgbenchFigure(bench.out, "number of transactions actually processed:");
  const double failed =
      PgbenchFigure(bench.out, "number of failed transactions:");
  std::cout << "opposite-order clients on b: " << processed << " transactions, "
            << failed << " failed; " << written
            << " transactions of 2,000 rows written on a\n";
  EXPECT_EQ(bench.exit_code, 0) << bench.out << bench.err;
  EXPECT_GT(processed, 0) << bench.out << bench.err;
  EXPECT_EQ(failed, 0) << bench.out << bench.err;

  // The rows the clients held were left to sessions: the tables converge.
  EXPECT_TRUE(WaitFor(
      [&] {
        return OrderedMd5(*pg[0], "x", "id") == OrderedMd5(*pg[1], "x", "id") &&
               OrderedMd5(*pg[0], "y", "id") == OrderedMd5(*pg[1], "y", "id");
      },
      absl::Seconds(30)))
      << StatusJson(addr[1]) << side[1]->Log();
  EXPECT_EQ(side[0]->Stop(), 0);
  EXPECT_EQ(side[1]->Stop(), 0);
}

TEST(PgApplyLocks, PgbenchOnTwoMeshedDatabasesLosesNoTransaction) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg[2];
  for (auto& p : pg) {
    absl::StatusOr<std::unique_ptr<PgCluster>> started = PgCluster::Start();
    ASSERT_TRUE(started.ok()) << started.status();
    p = *std::move(started);
    // The same rows on both (pgbench's initial data is deterministic).
    const CommandResult init =
        Pgbench(*p, {"-i", "-s", "1", "-q"}, absl::Seconds(60));
    ASSERT_EQ(init.exit_code, 0) << init.err;
  }
  ASSERT_TRUE(TablesEqual(*pg[0], *pg[1]));
  TempDir dir[2];
  const std::string addr[2] = {FreeLoopbackAddress(), FreeLoopbackAddress()};
  std::unique_ptr<NodeProcess> side[2];
  for (int i = 0; i < 2; ++i) {
    side[i] = StartTablesSidecar(absl::StrCat("bench-", i), dir[i].path(),
                                 *pg[i], addr[i], {addr[1 - i]}, kTables);
    ASSERT_NE(side[i], nullptr);
  }
  ASSERT_TRUE(WaitFor([&] { return Following(addr[0]) && Following(addr[1]); },
                      absl::Seconds(40)))
      << side[0]->Log() << side[1]->Log();

  // Four clients on each database for 10 s; a transaction PostgreSQL
  // aborts (a deadlock, 40P01) is counted as failed and not retried.
  CommandResult bench[2];
  std::thread runs[2];
  for (int i = 0; i < 2; ++i) {
    runs[i] = std::thread([&, i] {
      bench[i] = Pgbench(*pg[i], {"-n", "-c", "4", "-j", "2", "-T", "10"},
                         absl::Seconds(60));
    });
  }
  for (std::thread& t : runs) t.join();
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(absl::StrCat("database ", i));
    const double processed = PgbenchFigure(
        bench[i].out, "number of transactions actually processed:");
    const double failed =
        PgbenchFigure(bench[i].out, "number of failed transactions:");
    const double tps = PgbenchFigure(bench[i].out, "tps =");
    std::cout << "pgbench on database " << i << " with tally: " << processed
              << " transactions, " << failed << " failed, tps " << tps << "\n";
    EXPECT_EQ(bench[i].exit_code, 0) << bench[i].out << bench[i].err;
    EXPECT_GT(processed, 0) << bench[i].out << bench[i].err;
    EXPECT_EQ(failed, 0) << bench[i].out << bench[i].err;
  }

  // Both sides wrote the same rows: afterwards the tables are equal again.
  EXPECT_TRUE(
      WaitFor([&] { return TablesEqual(*pg[0], *pg[1]); }, absl::Seconds(40)))
      << StatusJson(addr[0]) << "\n"
      << StatusJson(addr[1]) << "\n"
      << side[0]->Log() << side[1]->Log();
  EXPECT_EQ(side[0]->Stop(), 0);
  EXPECT_EQ(side[1]->Stop(), 0);
}

}  // namespace
}  // namespace tally
