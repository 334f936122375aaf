// tallyd sidecars keeping a declaratively partitioned table: two
// real servers, each with `public.ev` partitioned by range on a date —
// differently on each side (months on A; two months in one partition on B):
// the fingerprint is the parent's, so the sidecars still exchange rows.
// Application writes on both, including UPDATEs that move rows between
// partitions, deletes, and a TRUNCATE of one partition (which logical
// decoding does not send when publishing via the partition root: the
// sidecar's catalog check sees the leaf's new relfilenode and rebuilds)
// and of the parent; the tables converge (md5 aggregate in SQL), with no
// write echoed back; `tally verify` finds each index sound; `tally diff
// URL URL` compares the two partitioned tables.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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
using ::tally::pgtest::StatusJson;
using ::tally::pgtest::WaitFor;
using ::tally::testing::CommandResult;
using ::tally::testing::FreeLoopbackAddress;
using ::tally::testing::NodeProcess;
using ::tally::testing::PgCluster;
using ::tally::testing::RunTally;
using ::tally::testing::TempDir;
using ::testing::HasSubstr;

std::string Sql(PgCluster& pg, const std::string& sql) {
  absl::StatusOr<std::string> r = pg.Execute(sql);
  EXPECT_TRUE(r.ok()) << r.status() << "\n" << sql;
  return r.ok() ? *r : "";
}

// A server with `ev (id bigint, d date, v text, PRIMARY KEY (id, d))`
// partitioned by range on d, its partitions made by `partitions`.
std::unique_ptr<PgCluster> StartPartitioned(const std::string& partitions) {
  absl::StatusOr<std::unique_ptr<PgCluster>> pg = PgCluster::Start({});
  EXPECT_TRUE(pg.ok()) << pg.status();
  if (!pg.ok()) return nullptr;
  Sql(**pg,
      "CREATE TABLE ev (id bigint, d date, v text, PRIMARY KEY (id, d)) "
      "PARTITION BY RANGE (d);" +
          partitions);
  return *std::move(pg);
}

// Month partitions for January to April 2026.
constexpr char kMonths[] =
    "CREATE TABLE ev_01 PARTITION OF ev FOR VALUES FROM ('2026-01-01') TO "
    "('2026-02-01');"
    "CREATE TABLE ev_02 PARTITION OF ev FOR VALUES FROM ('2026-02-01') TO "
    "('2026-03-01');"
    "CREATE TABLE ev_03 PARTITION OF ev FOR VALUES FROM ('2026-03-01') TO "
    "('2026-04-01');"
    "CREATE TABLE ev_04 PARTITION OF ev FOR VALUES FROM ('2026-04-01') TO "
    "('2026-05-01');";
// The same range, cut otherwise.
constexpr char kTwoMonths[] =
    "CREATE TABLE ev_0102 PARTITION OF ev FOR VALUES FROM ('2026-01-01') TO "
    "('2026-03-01');"
    "CREATE TABLE ev_0304 PARTITION OF ev FOR VALUES FROM ('2026-03-01') TO "
    "('2026-05-01');";

std::string EvMd5(PgCluster& pg) {
  return Sql(pg,
             "SELECT coalesce(md5(string_agg(x::text, ',' ORDER BY x.id, "
             "x.d)), 'empty') FROM ev x");
}

// Rows of ev last written through a replication origin (tally's apply).
std::string AppliedRows(PgCluster& pg, const std::string& where) {
  return Sql(pg, absl::StrCat("SELECT count(*) FROM ev WHERE ", where,
                              " AND (pg_xact_commit_timestamp_origin(xmin))."
                              "roident <> 0"));
}

std::unique_ptr<NodeProcess> StartEvSidecar(
    const std::string& name, const std::string& dir, PgCluster& pg,
    const std::string& listen, const std::vector<std::string>& peers,
    const std::string& check_interval = "1s") {
  std::vector<std::string> flags = {"--postgres",
                                    pg.Uri(),
                                    "--table",
                                    "public.ev",
                                    "--sync-interval",
                                    "1s",
                                    "--pg-schema-check-interval",
                                    check_interval};
  for (const std::string& p : peers) {
    flags.push_back("--peer");
    flags.push_back(p);
  }
  absl::StatusOr<std::unique_ptr<NodeProcess>> node =
      NodeProcess::Start(name, dir, flags, listen);
  EXPECT_TRUE(node.ok()) << node.status();
  return node.ok() ? *std::move(node) : nullptr;
}

TEST(PgPartitionedTable, TwoSidecarsConvergeOnAPartitionedTable) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg_a = StartPartitioned(kMonths);
  std::unique_ptr<PgCluster> pg_b = StartPartitioned(kTwoMonths);
  ASSERT_TRUE(pg_a && pg_b);
  // Rows before the sidecars start: ids 1..400 on both (the build).
  for (PgCluster* pg : {pg_a.get(), pg_b.get()}) {
    Sql(*pg,
        "INSERT INTO ev SELECT g, date '2026-01-01' + (g % 120), 'v' || g "
        "FROM generate_series(1, 400) g");
  }

  TempDir dir_a, dir_b;
  const std::string addr_a = FreeLoopbackAddress();
  const std::string addr_b = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> a =
      StartEvSidecar("part-a", dir_a.path(), *pg_a, addr_a, {addr_b});
  std::unique_ptr<NodeProcess> b =
      StartEvSidecar("part-b", dir_b.path(), *pg_b, addr_b, {addr_a});
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(WaitFor([&] { return Following(addr_a) && Following(addr_b); },
                      absl::Seconds(30)))
      << a->Log() << b->Log();
  // The publication publishes via the partition root.
  EXPECT_EQ(Sql(*pg_a, "SELECT bool_and(pubviaroot) FROM pg_publication"), "t");

  // Application writes on both sides: inserts in every partition, UPDATEs
  // that move rows to another partition (their key changes: the date is
  // in it), plain updates and deletes.
  Sql(*pg_a,
      "INSERT INTO ev SELECT g, date '2026-01-01' + (g % 120), 'a' || g FROM "
      "generate_series(1001, 1300) g;"
      "UPDATE ev SET d = d + 31 WHERE id BETWEEN 1 AND 40 AND d < "
      "'2026-03-15';"
      "UPDATE ev SET v = 'a-updated' WHERE id BETWEEN 41 AND 60;"
      "DELETE FROM ev WHERE id BETWEEN 61 AND 80");
  Sql(*pg_b,
      "INSERT INTO ev SELECT g, date '2026-01-01' + (g % 120), 'b' || g FROM "
      "generate_series(2001, 2300) g;"
      "UPDATE ev SET d = d + 45 WHERE id BETWEEN 101 AND 140 AND d < "
      "'2026-03-01';"
      "UPDATE ev SET v = 'b-updated', d = d - 20 WHERE id BETWEEN 141 AND 160 "
      "AND d > '2026-02-15';"
      "DELETE FROM ev WHERE id BETWEEN 161 AND 180");
  EXPECT_TRUE(
      WaitFor([&] { return EvMd5(*pg_a) == EvMd5(*pg_b); }, absl::Seconds(40)))
      << Sql(*pg_a, "SELECT count(*) FROM ev") << " rows on a, "
      << Sql(*pg_b, "SELECT count(*) FROM ev") << " on b\n"
      << a->Log() << b->Log();
  EXPECT_EQ(Sql(*pg_b,
                "SELECT count(*) FROM ev WHERE id BETWEEN 61 AND 80 OR "
                "id BETWEEN 161 AND 180"),
            "0");
  EXPECT_EQ(Sql(*pg_b, "SELECT count(*) FROM ev WHERE v = 'a-updated'"), "20");
  // The moved rows are under their new keys only, in their new partition.
  EXPECT_EQ(Sql(*pg_a,
                "SELECT count(*) FROM ev WHERE id BETWEEN 101 AND 140 "
                "AND d < '2026-02-15'"),
            "0");
  EXPECT_EQ(Sql(*pg_b, "SELECT count(*) FROM ev"), "960");
  // No echo: a side's own writes are not rewritten by its sidecar's apply.
  EXPECT_EQ(AppliedRows(*pg_a, "id BETWEEN 1001 AND 1300"), "0");
  EXPECT_EQ(AppliedRows(*pg_b, "id BETWEEN 2001 AND 2300"), "0");
  EXPECT_EQ(AppliedRows(*pg_b, "id BETWEEN 1001 AND 1300"), "300");

  // TRUNCATE of one partition: decoding sends nothing; the catalog check
  // rebuilds A's index and its tombstones reach B (whose partitions differ:
  // the rows are deleted one by one there).
  const std::string january =
      Sql(*pg_b, "SELECT count(*) FROM ev WHERE d < '2026-02-01'");
  ASSERT_NE(january, "0");
  Sql(*pg_a, "TRUNCATE ev_01");
  EXPECT_TRUE(WaitFor(
      [&] {
        return Sql(*pg_b, "SELECT count(*) FROM ev WHERE d < '2026-02-01'") ==
               "0";
      },
      absl::Seconds(40)))
      << a->Log() << b->Log();
  EXPECT_TRUE(
      WaitFor([&] { return EvMd5(*pg_a) == EvMd5(*pg_b); }, absl::Seconds(30)));
  EXPECT_THAT(a->Log(), HasSubstr("truncated or rewritten here: public.ev_01"));
  EXPECT_TRUE(WaitFor([&] { return Following(addr_a) && Following(addr_b); },
                      absl::Seconds(30)));

  // Each index describes its table.
  for (const std::string& addr : {addr_a, addr_b}) {
    const CommandResult verify =
        RunTally({"verify", "--node", addr}, absl::Seconds(30));
    EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
    EXPECT_THAT(verify.out, HasSubstr("sound: public.ev"));
  }
  // And the two partitioned tables diff as equal without a daemon.
  const CommandResult equal =
      RunTally({"diff", pg_a->Uri() + "?table=public.ev", pg_b->Uri()},
               absl::Seconds(30));
  EXPECT_EQ(equal.exit_code, 0) << equal.out << equal.err;

  // TRUNCATE of the parent is decoded: B empties.
  Sql(*pg_b, "TRUNCATE ev");
  EXPECT_TRUE(
      WaitFor([&] { return EvMd5(*pg_a) == "empty"; }, absl::Seconds(30)))
      << a->Log() << b->Log();

  // Without the sidecars, a row written on A only: the diff names it.
  a.reset();
  b.reset();
  Sql(*pg_a, "INSERT INTO ev VALUES (7, '2026-03-03', 'only on a')");
  const CommandResult differ =
      RunTally({"diff", pg_a->Uri() + "?table=public.ev", pg_b->Uri()},
               absl::Seconds(30));
  EXPECT_EQ(differ.exit_code, 1) << differ.out << differ.err;
  EXPECT_THAT(differ.out, HasSubstr("only in a"));
}

// ATTACH of a table holding rows brings rows no row change reveals: the
// catalog check rebuilds, and the rows reach the peer.
TEST(PgPartitionedTable, AnAttachedPartitionsRowsReachThePeer) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg_a = StartPartitioned(kMonths);
  std::unique_ptr<PgCluster> pg_b = StartPartitioned(kTwoMonths);
  ASSERT_TRUE(pg_a && pg_b);
  Sql(*pg_b,
      "CREATE TABLE ev_05 PARTITION OF ev FOR VALUES FROM ('2026-05-01') TO "
      "('2026-06-01')");
  TempDir dir_a, dir_b;
  const std::string addr_a = FreeLoopbackAddress();
  const std::string addr_b = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> a =
      StartEvSidecar("attach-a", dir_a.path(), *pg_a, addr_a, {addr_b});
  std::unique_ptr<NodeProcess> b =
      StartEvSidecar("attach-b", dir_b.path(), *pg_b, addr_b, {addr_a});
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(WaitFor([&] { return Following(addr_a) && Following(addr_b); },
                      absl::Seconds(30)))
      << a->Log() << b->Log();
  Sql(*pg_a,
      "CREATE TABLE may (LIKE ev INCLUDING ALL);"
      "INSERT INTO may SELECT g, date '2026-05-01' + (g % 30), 'may' FROM "
      "generate_series(1, 50) g;"
      "ALTER TABLE ev ATTACH PARTITION may FOR VALUES FROM ('2026-05-01') TO "
      "('2026-06-01')");
  EXPECT_TRUE(
      WaitFor([&] { return Sql(*pg_b, "SELECT count(*) FROM ev") == "50"; },
              absl::Seconds(40)))
      << a->Log() << b->Log();
  EXPECT_THAT(a->Log(), HasSubstr("partitions new here: public.may"));
  EXPECT_EQ(EvMd5(*pg_a), EvMd5(*pg_b));
}

// What happens while a sidecar is stopped: its next start compares the
// leaves with those its index was built from (the catalog check, every
// hour here, plays no part), and rebuilds when a partition was truncated.
// A publication that no longer publishes via the root (altered by hand, or
// by a tool) is rebuilt too: its changes would come under the leaves.
TEST(PgPartitionedTable, ChangesWhileStoppedAreFoundAtTheNextStart) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg_a = StartPartitioned(kMonths);
  std::unique_ptr<PgCluster> pg_b = StartPartitioned(kTwoMonths);
  ASSERT_TRUE(pg_a && pg_b);
  for (PgCluster* pg : {pg_a.get(), pg_b.get()}) {
    Sql(*pg,
        "INSERT INTO ev SELECT g, date '2026-01-01' + (g % 120), 'v' || g "
        "FROM generate_series(1, 240) g");
  }
  TempDir dir_a, dir_b;
  const std::string addr_a = FreeLoopbackAddress();
  const std::string addr_b = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> a =
      StartEvSidecar("stop-a", dir_a.path(), *pg_a, addr_a, {addr_b}, "1h");
  std::unique_ptr<NodeProcess> b =
      StartEvSidecar("stop-b", dir_b.path(), *pg_b, addr_b, {addr_a}, "1h");
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(WaitFor([&] { return Following(addr_a) && Following(addr_b); },
                      absl::Seconds(30)))
      << a->Log() << b->Log();

  // Stopped: February truncated, and the publication altered.
  a.reset();
  Sql(*pg_a,
      "TRUNCATE ev_02;"
      "DO $$ DECLARE p name; BEGIN FOR p IN SELECT pubname FROM "
      "pg_publication LOOP EXECUTE format('ALTER PUBLICATION %I SET "
      "(publish_via_partition_root = false)', p); END LOOP; END $$");
  a = StartEvSidecar("stop-a", dir_a.path(), *pg_a, addr_a, {addr_b}, "1h");
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(WaitFor(
      [&] {
        return Sql(*pg_b,
                   "SELECT count(*) FROM ev WHERE d >= '2026-02-01' AND d < "
                   "'2026-03-01'") == "0";
      },
      absl::Seconds(40)))
      << a->Log() << b->Log();
  EXPECT_THAT(a->Log(), HasSubstr("the partitions of public.ev changed while "
                                  "tallyd was stopped"));
  EXPECT_EQ(Sql(*pg_a, "SELECT bool_and(pubviaroot) FROM pg_publication"), "t");

  // Altered back while stopped, nothing else changed: the start rebuilds
  // (and sets it again), and a write made after reaches the peer.
  a.reset();
  Sql(*pg_a,
      "DO $$ DECLARE p name; BEGIN FOR p IN SELECT pubname FROM "
      "pg_publication LOOP EXECUTE format('ALTER PUBLICATION %I SET "
      "(publish_via_partition_root = false)', p); END LOOP; END $$");
  a = StartEvSidecar("stop-a", dir_a.path(), *pg_a, addr_a, {addr_b}, "1h");
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(WaitFor([&] { return Following(addr_a); }, absl::Seconds(30)))
      << a->Log();
  EXPECT_THAT(a->Log(), HasSubstr("does not publish via the partition root"));
  EXPECT_EQ(Sql(*pg_a, "SELECT bool_and(pubviaroot) FROM pg_publication"), "t");
  Sql(*pg_a, "INSERT INTO ev VALUES (5000, '2026-03-03', 'after')");
  EXPECT_TRUE(WaitFor(
      [&] {
        return Sql(*pg_b, "SELECT count(*) FROM ev WHERE id = 5000") == "1";
      },
      absl::Seconds(30)))
      << a->Log() << b->Log();
  EXPECT_TRUE(
      WaitFor([&] { return EvMd5(*pg_a) == EvMd5(*pg_b); }, absl::Seconds(30)));
}

}  // namespace
}  // namespace tally
