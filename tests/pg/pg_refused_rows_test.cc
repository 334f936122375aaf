// Rows one database refuses stop nothing else: the sidecar's apply isolates
// them (a table's statements in a savepoint, the refused rows found by
// bisection) and applies the rest, so the feed of every other table, and
// the other rows of the same table, keep flowing; once the cause is gone,
// an anti-entropy session brings the refused rows. Identity columns
// GENERATED ALWAYS and generated stored columns apply as they are.
#include <iostream>
#include <memory>
#include <string>
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
using ::tally::pgtest::Query;
using ::tally::pgtest::StartTablesSidecar;
using ::tally::pgtest::StatusJson;
using ::tally::pgtest::WaitFor;
using ::tally::testing::CommandResult;
using ::tally::testing::FreeLoopbackAddress;
using ::tally::testing::NodeProcess;
using ::tally::testing::PgCluster;
using ::tally::testing::RunTally;
using ::tally::testing::TempDir;

constexpr absl::string_view kSchema = R"sql(
CREATE TABLE t (id bigint PRIMARY KEY, a int, b text);
CREATE TABLE u (id bigint PRIMARY KEY, v int,
                g int GENERATED ALWAYS AS (v * 2) STORED);
CREATE TABLE w (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, x text);
)sql";

const std::vector<std::string> kTables = {"public.t", "public.u", "public.w"};

std::unique_ptr<PgCluster> StartSchemaCluster() {
  absl::StatusOr<std::unique_ptr<PgCluster>> pg = PgCluster::Start();
  EXPECT_TRUE(pg.ok()) << pg.status();
  if (!pg.ok()) return nullptr;
  absl::StatusOr<std::string> made = (*pg)->Execute(kSchema);
  EXPECT_TRUE(made.ok()) << made.status();
  return *std::move(pg);
}

TEST(PgRefusedRows, ATableThatRefusesRowsStopsNoOtherTable) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg_a = StartSchemaCluster();
  std::unique_ptr<PgCluster> pg_b = StartSchemaCluster();
  ASSERT_NE(pg_a, nullptr);
  ASSERT_NE(pg_b, nullptr);
  // Only b refuses large values of u.v (constraints are no part of the
  // schema fingerprint: the sidecars exchange u's rows).
  ASSERT_TRUE(
      pg_b->Execute("ALTER TABLE u ADD CONSTRAINT small CHECK (v < 1000)")
          .ok());
  TempDir dir_a, dir_b;
  const std::string addr_a = FreeLoopbackAddress();
  const std::string addr_b = FreeLoopbackAddress();
  // No scheduled session during the test: only the feed moves rows, until
  // `tally sync` asks for a session.
  const std::vector<std::string> extra = {"--sync-interval", "1h"};
  std::unique_ptr<NodeProcess> side_a = StartTablesSidecar(
      "refused-a", dir_a.path(), *pg_a, addr_a, {addr_b}, kTables, extra);
  std::unique_ptr<NodeProcess> side_b = StartTablesSidecar(
      "refused-b", dir_b.path(), *pg_b, addr_b, {addr_a}, kTables, extra);
  ASSERT_NE(side_a, nullptr);
  ASSERT_NE(side_b, nullptr);
  ASSERT_TRUE(WaitFor([&] { return Following(addr_a) && Following(addr_b); },
                      absl::Seconds(30)))
      << side_a->Log() << side_b->Log();

  // Identity values made on a apply on b as they are.
  ASSERT_TRUE(pg_a->Execute("INSERT INTO w (x) SELECT 'w' || g FROM "
                            "generate_series(1, 20) g")
                  .ok());
  EXPECT_TRUE(WaitFor(
      [&] {
        return OrderedMd5(*pg_a, "w", "id") == OrderedMd5(*pg_b, "w", "id");
      },
      absl::Seconds(10)))
      << "w on b: " << Query(*pg_b, "SELECT count(*) FROM w") << " rows\n"
      << side_b->Log();

  // One transaction: rows of u that b refuses (2 and 4), rows of u it
  // takes, and a row of t.
  ASSERT_TRUE(pg_a->Execute("BEGIN; INSERT INTO u (id, v) VALUES (1, 5), "
                            "(2, 5000), (3, 7), (4, 6000); "
                            "INSERT INTO t VALUES (1, 0, 'x'); COMMIT")
                  .ok());
  EXPECT_TRUE(WaitFor(
      [&] { return Query(*pg_b, "SELECT a FROM t WHERE id = 1") == "0"; },
      absl::Seconds(10)))
      << side_b->Log();
  EXPECT_TRUE(WaitFor(
      [&] {
        return Query(*pg_b,
                     "SELECT string_agg(id || ':' || g, ',' ORDER BY "
                     "id) FROM u") == "1:10,3:14";
      },
      absl::Seconds(10)))
      << Query(*pg_b, "SELECT string_agg(id::text, ',') FROM u") << "\n"
      << side_b->Log();

  // While b keeps refusing u's updates, t's keep arriving within seconds.
  for (int k = 1; k <= 3; ++k) {
    ASSERT_TRUE(
        pg_a->Execute(absl::StrCat("UPDATE u SET v = v + 10000 WHERE id = 1; "
                                   "UPDATE t SET a = ",
                                   k, " WHERE id = 1"))
            .ok());
    const absl::Time written = absl::Now();
    EXPECT_TRUE(WaitFor(
        [&] {
          return Query(*pg_b, "SELECT a FROM t WHERE id = 1") ==
                 std::to_string(k);
        },
        absl::Seconds(5)))
        << "update " << k << "\n"
        << side_b->Log();
    std::cout << "t's update " << k << " reached b in " << absl::Now() - written
              << "\n";
  }
  EXPECT_EQ(Query(*pg_b, "SELECT v FROM u WHERE id = 1"), "5");

  // The cause removed, a session brings u's refused rows.
  ASSERT_TRUE(pg_b->Execute("ALTER TABLE u DROP CONSTRAINT small").ok());
  EXPECT_TRUE(WaitFor(
      [&] {
        const CommandResult sync =
            RunTally({"sync", addr_b}, absl::Seconds(30));
        return OrderedMd5(*pg_a, "u", "id") == OrderedMd5(*pg_b, "u", "id");
      },
      absl::Seconds(30)))
      << "u on b: "
      << Query(*pg_b,
               "SELECT string_agg(id || ':' || v, ',' "
               "ORDER BY id) FROM u")
      << "\n"
      << StatusJson(addr_b) << side_b->Log();
  for (const char* table : {"t", "u", "w"}) {
    EXPECT_EQ(OrderedMd5(*pg_a, table, "id"), OrderedMd5(*pg_b, table, "id"))
        << table;
  }
  EXPECT_EQ(side_a->Stop(), 0);
  EXPECT_EQ(side_b->Stop(), 0);
}

}  // namespace
}  // namespace tally
