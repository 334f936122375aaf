// Sidecars meeting what a DBA does to a kept table besides writing rows:
// DROP TABLE (the keyspace is "missing": no rows taken, no delete sent to
// the peers, the other tables go on), the table created again (built
// afresh: the peers' rows come back), TRUNCATE (replicated as deletes, as
// before); and what an operator sees of a quiet start: a configured table
// still empty diffs equal, and the server log shows no ERROR of tally's.
//
// Real tallyd processes on throwaway PostgreSQL servers
// (support/pg_cluster.h); tables compared with PostgreSQL's own md5.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/pg_cluster.h"
#include "support/pg_test_macros.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "tests/pg/pg_sidecar_helpers.h"

namespace tally {
namespace {

using ::tally::pgtest::Following;
using ::tally::pgtest::StartSidecar;
using ::tally::pgtest::StartTableCluster;
using ::tally::pgtest::StatusJson;
using ::tally::pgtest::TableMd5;
using ::tally::pgtest::WaitFor;
using ::tally::testing::CommandResult;
using ::tally::testing::FreeLoopbackAddress;
using ::tally::testing::NodeProcess;
using ::tally::testing::PgCluster;
using ::tally::testing::RunTally;
using ::tally::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr absl::string_view kNoSidecar = "built without the PostgreSQL sidecar";

// The server log's lines with ERROR in them.
std::vector<std::string> ErrorLines(const PgCluster& pg) {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(pg.Log(), '\n')) {
    if (absl::StrContains(line, "ERROR")) out.emplace_back(line);
  }
  return out;
}

std::string Count(PgCluster& pg, const std::string& table) {
  absl::StatusOr<std::string> n =
      pg.Execute(absl::StrCat("SELECT count(*) FROM ", table));
  return n.ok() ? *n : n.status().ToString();
}

// A sidecar's first start on a fresh cluster, and a restart: neither makes
// the server log an ERROR (the build dropped a slot that was not there).
TEST(PgDdl, AStartAndARestartLogNoErrorOnTheServer) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg = StartTableCluster();
  ASSERT_NE(pg, nullptr);
  TempDir dir;
  const std::string addr = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> side =
      StartSidecar("side", dir.path(), *pg, addr, {});
  ASSERT_NE(side, nullptr);
  if (absl::StrContains(side->Log(), kNoSidecar)) GTEST_SKIP();
  ASSERT_TRUE(WaitFor([&] { return Following(addr); }, absl::Seconds(20)))
      << side->Log();
  ASSERT_TRUE(pg->Execute("INSERT INTO t VALUES (1, 1, 'a')").ok());
  EXPECT_EQ(side->Stop(), 0) << side->Log();
  side = StartSidecar("side", dir.path(), *pg, addr, {});
  ASSERT_NE(side, nullptr);
  ASSERT_TRUE(WaitFor([&] { return Following(addr); }, absl::Seconds(20)))
      << side->Log();
  EXPECT_EQ(side->Stop(), 0) << side->Log();
  EXPECT_THAT(ErrorLines(*pg), ::testing::IsEmpty()) << pg->Log();
}

// A configured table nobody wrote yet is a keyspace on both nodes, and
// equal (both empty) — not "on neither node".
TEST(PgDdl, AnEmptyKeptTableDiffsEqual) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg_a = StartTableCluster();
  std::unique_ptr<PgCluster> pg_b = StartTableCluster();
  ASSERT_NE(pg_a, nullptr);
  ASSERT_NE(pg_b, nullptr);
  TempDir dir_a, dir_b;
  const std::string addr_a = FreeLoopbackAddress();
  const std::string addr_b = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> side_a =
      StartSidecar("side-a", dir_a.path(), *pg_a, addr_a, {addr_b});
  std::unique_ptr<NodeProcess> side_b =
      StartSidecar("side-b", dir_b.path(), *pg_b, addr_b, {addr_a});
  ASSERT_NE(side_a, nullptr);
  ASSERT_NE(side_b, nullptr);
  ASSERT_TRUE(WaitFor([&] { return Following(addr_a) && Following(addr_b); },
                      absl::Seconds(20)))
      << side_a->Log() << side_b->Log();
  // On A (RunDiff) and from here (--third-party) alike.
  for (const bool third_party : {false, true}) {
    std::vector<std::string> args = {"diff", addr_a, addr_b, "--keyspace",
                                     "public.t"};
    if (third_party) args.push_back("--third-party");
    const CommandResult r = RunTally(args, absl::Seconds(20));
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("equal")) << r.err;
  }
}

// Two databases with tables t and u, a sidecar on each keeping both.
struct TwoTables {
  std::unique_ptr<PgCluster> pg_a, pg_b;
  TempDir dir_a, dir_b;
  std::string addr_a = FreeLoopbackAddress();
  std::string addr_b = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> side_a, side_b;

  void Start(const std::string& schema_check_interval = "1s") {
    for (auto* pg : {&pg_a, &pg_b}) {
      *pg = StartTableCluster();
      ASSERT_NE(*pg, nullptr);
      ASSERT_TRUE(
          (*pg)
              ->Execute("CREATE TABLE u (id bigint PRIMARY KEY, v text)")
              .ok());
    }
    extra = {"--table", "public.u", "--pg-schema-check-interval",
             schema_check_interval};
    side_a =
        StartSidecar("side-a", dir_a.path(), *pg_a, addr_a, {addr_b}, extra);
    side_b =
        StartSidecar("side-b", dir_b.path(), *pg_b, addr_b, {addr_a}, extra);
    ASSERT_NE(side_a, nullptr);
    ASSERT_NE(side_b, nullptr);
    ASSERT_TRUE(WaitFor([&] { return Following(addr_a) && Following(addr_b); },
                        absl::Seconds(20)))
        << side_a->Log() << side_b->Log();
  }
  bool Same(const std::string& table) {
    return TableMd5(*pg_a, table) == TableMd5(*pg_b, table);
  }
  // `rows` rows in A's t, on B too.
  void FillT(int rows) {
    ASSERT_TRUE(pg_a->Execute(absl::StrCat("INSERT INTO t SELECT g, g, 'x' "
                                           "FROM generate_series(1, ",
                                           rows, ") g"))
                    .ok());
    ASSERT_TRUE(WaitFor([&] { return Same("t"); }, absl::Seconds(20)))
        << side_a->Log() << side_b->Log();
  }
  // A's tallyd started again with the same flags.
  void RestartA() {
    side_a =
        StartSidecar("side-a", dir_a.path(), *pg_a, addr_a, {addr_b}, extra);
  }
  // A's status shows a keyspace missing.
  bool AShowsMissing() {
    return absl::StrContains(StatusJson(addr_a), R"("state":"missing")");
  }

  std::vector<std::string> extra;  // both sidecars' flags beyond the helper's
};

// DROP TABLE on A: A notices (catalog check), shows the keyspace missing,
// forgets its rows without sending a delete (B keeps its 500), takes none
// of B's, and the other table keeps flowing both ways. CREATE TABLE again
// on A: built afresh, and anti-entropy brings B's rows back into it.
TEST(PgDdl, ADroppedTableIsMissingUntilCreatedAgainThenRefilledByPeers) {
  TALLY_SKIP_UNLESS_POSTGRES();
  TwoTables p;
  ASSERT_NO_FATAL_FAILURE(p.Start());
  ASSERT_TRUE(p.pg_a
                  ->Execute("INSERT INTO t SELECT g, g, 'x' FROM "
                            "generate_series(1, 500) g")
                  .ok());
  ASSERT_TRUE(p.pg_a->Execute("INSERT INTO u VALUES (1, 'one')").ok());
  ASSERT_TRUE(
      WaitFor([&] { return p.Same("t") && p.Same("u"); }, absl::Seconds(20)))
      << p.side_a->Log() << p.side_b->Log();
  ASSERT_EQ(Count(*p.pg_b, "t"), "500");
  const std::string md5_500 = TableMd5(*p.pg_b, "t");

  ASSERT_TRUE(p.pg_a->Execute("DROP TABLE t").ok());
  ASSERT_TRUE(WaitFor([&] { return p.AShowsMissing() && Following(p.addr_a); },
                      absl::Seconds(15)))
      << StatusJson(p.addr_a) << p.side_a->Log();
  EXPECT_THAT(p.side_a->Log(), HasSubstr("public.t is missing"));
  // B writes both tables: u reaches A; t stays on B alone.
  ASSERT_TRUE(p.pg_b->Execute("INSERT INTO u VALUES (2, 'two')").ok());
  ASSERT_TRUE(p.pg_b->Execute("UPDATE t SET b = 'y' WHERE id = 1").ok());
  EXPECT_TRUE(WaitFor([&] { return p.Same("u"); }, absl::Seconds(15)))
      << p.side_a->Log() << p.side_b->Log();
  absl::SleepFor(absl::Seconds(3));  // sessions every second
  EXPECT_EQ(Count(*p.pg_b, "t"), "500") << p.side_b->Log();
  const CommandResult status =
      RunTally({"status", "--node", p.addr_a}, absl::Seconds(10));
  EXPECT_THAT(status.out, HasSubstr("missing"));
  // The index holds no row of the dropped table: verify finds both empty.
  const CommandResult verify =
      RunTally({"verify", "--node", p.addr_a}, absl::Seconds(60));
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;

  // Created again, empty: built afresh, the peer's rows come back.
  ASSERT_TRUE(
      p.pg_a->Execute("CREATE TABLE t (id bigint PRIMARY KEY, a int, b text)")
          .ok());
  EXPECT_TRUE(WaitFor([&] { return p.Same("t"); }, absl::Seconds(25)))
      << Count(*p.pg_a, "t") << " rows on A\n"
      << StatusJson(p.addr_a) << p.side_a->Log() << p.side_b->Log();
  EXPECT_EQ(Count(*p.pg_a, "t"), "500");
  EXPECT_EQ(Count(*p.pg_b, "t"), "500");
  EXPECT_NE(TableMd5(*p.pg_b, "t"), md5_500);  // B's update is there
  EXPECT_THAT(StatusJson(p.addr_a), Not(HasSubstr(R"("state":"missing")")));

  // A TRUNCATE is an application's change: replicated, as before.
  ASSERT_TRUE(p.pg_a->Execute("TRUNCATE t").ok());
  EXPECT_TRUE(
      WaitFor([&] { return Count(*p.pg_b, "t") == "0"; }, absl::Seconds(15)))
      << p.side_a->Log() << p.side_b->Log();
}

// The table dropped and created again while A's tallyd is stopped: the
// index recorded the table's OID, so the next start builds the new table
// afresh, and the peer's rows come back instead of being deleted there.
TEST(PgDdl, ATableCreatedAgainWhileStoppedIsBuiltAfreshAtStart) {
  TALLY_SKIP_UNLESS_POSTGRES();
  TwoTables p;
  ASSERT_NO_FATAL_FAILURE(p.Start());
  ASSERT_NO_FATAL_FAILURE(p.FillT(300));
  EXPECT_EQ(p.side_a->Stop(), 0) << p.side_a->Log();
  ASSERT_TRUE(p.pg_a
                  ->Execute("DROP TABLE t; CREATE TABLE t (id bigint PRIMARY "
                            "KEY, a int, b text); INSERT INTO t VALUES (1000, "
                            "1, 'new')")
                  .ok());
  p.RestartA();
  ASSERT_NE(p.side_a, nullptr);
  EXPECT_TRUE(WaitFor([&] { return p.Same("t"); }, absl::Seconds(25)))
      << Count(*p.pg_a, "t") << " rows on A, " << Count(*p.pg_b, "t")
      << " on B\n"
      << p.side_a->Log() << p.side_b->Log();
  EXPECT_EQ(Count(*p.pg_b, "t"), "301");
  EXPECT_THAT(p.side_a->Log(), HasSubstr("dropped and created again"));
}

// The catalog check runs every 10 minutes here, but a peer's row refused
// because its table does not exist asks for one at once: A finds the table
// missing within seconds of B's first write to it, not at the next check.
TEST(PgDdl, ARowRefusedForADroppedTableBringsTheCatalogCheckForward) {
  TALLY_SKIP_UNLESS_POSTGRES();
  TwoTables p;
  ASSERT_NO_FATAL_FAILURE(p.Start("10m"));
  ASSERT_TRUE(p.pg_a->Execute("INSERT INTO t VALUES (1, 1, 'x')").ok());
  ASSERT_TRUE(WaitFor([&] { return p.Same("t"); }, absl::Seconds(20)))
      << p.side_a->Log() << p.side_b->Log();
  ASSERT_TRUE(p.pg_a->Execute("DROP TABLE t").ok());
  ASSERT_TRUE(p.pg_b->Execute("INSERT INTO t VALUES (2, 2, 'y')").ok());
  EXPECT_TRUE(WaitFor([&] { return p.AShowsMissing(); }, absl::Seconds(15)))
      << StatusJson(p.addr_a) << p.side_a->Log();
  ASSERT_TRUE(p.pg_b->Execute("INSERT INTO u VALUES (3, 'three')").ok());
  EXPECT_TRUE(WaitFor([&] { return p.Same("u"); }, absl::Seconds(15)))
      << p.side_a->Log() << p.side_b->Log();
}

// A kept table dropped while tallyd is stopped: tallyd starts all the same,
// with that keyspace missing and the others flowing (one dropped table must
// not keep a node down); created again, it is built and refilled.
TEST(PgDdl, ATableDroppedWhileStoppedIsMissingAtStartAndTheRestFlows) {
  TALLY_SKIP_UNLESS_POSTGRES();
  TwoTables p;
  ASSERT_NO_FATAL_FAILURE(p.Start());
  ASSERT_NO_FATAL_FAILURE(p.FillT(200));
  EXPECT_EQ(p.side_a->Stop(), 0) << p.side_a->Log();
  ASSERT_TRUE(p.pg_a->Execute("DROP TABLE t").ok());
  p.RestartA();
  ASSERT_NE(p.side_a, nullptr);
  ASSERT_TRUE(WaitFor([&] { return p.AShowsMissing() && Following(p.addr_a); },
                      absl::Seconds(20)))
      << StatusJson(p.addr_a) << p.side_a->Log();
  ASSERT_TRUE(p.pg_b->Execute("INSERT INTO u VALUES (7, 'seven')").ok());
  EXPECT_TRUE(WaitFor([&] { return p.Same("u"); }, absl::Seconds(15)))
      << p.side_a->Log() << p.side_b->Log();
  EXPECT_EQ(Count(*p.pg_b, "t"), "200");

  ASSERT_TRUE(
      p.pg_a->Execute("CREATE TABLE t (id bigint PRIMARY KEY, a int, b text)")
          .ok());
  EXPECT_TRUE(WaitFor([&] { return p.Same("t"); }, absl::Seconds(25)))
      << Count(*p.pg_a, "t") << " rows on A\n"
      << StatusJson(p.addr_a) << p.side_a->Log() << p.side_b->Log();
  EXPECT_EQ(Count(*p.pg_a, "t"), "200");
}

}  // namespace
}  // namespace tally
