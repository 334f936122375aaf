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
#include "tests/pg_apply_helpers.h"
#include "tests/pg_sidecar_helpers.h"

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

const std::vector<std::string> kTables = {
    "public.pgbench_branches", "public.pgbench_tellers",
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

TEST(PgApplyLocks, PgbenchOnTwoMeshedDatabasesLosesNoTransaction) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg[2];
  for (auto& p : pg) {
    absl::StatusOr<std::unique_ptr<PgCluster>> started = PgCluster::Start();
    ASSERT_TRUE(started.ok()) << started.status();
    p = *std::move(started);
    // The same rows on both (pgbench's initial data is deterministic).
    const CommandResult init = Pgbench(*p, {"-i", "-s", "1", "-q"},
                                       absl::Seconds(60));
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

  // Four clients on each database for 12 s; a transaction PostgreSQL
  // aborts (a deadlock, 40P01) is counted as failed and not retried.
  CommandResult bench[2];
  std::thread runs[2];
  for (int i = 0; i < 2; ++i) {
    runs[i] = std::thread([&, i] {
      bench[i] = Pgbench(*pg[i], {"-n", "-c", "4", "-j", "2", "-T", "12"},
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
              << " transactions, " << failed << " failed, tps " << tps
              << "\n";
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
