// A sidecar whose source is a database it may only query
// (`--peer postgresql://reader@master/db,role=source`): real tallyd, real
// PostgreSQL servers for the master and the replica, tables compared with
// md5 over ordered rows.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/mariadb_server.h"
#include "support/mariadb_test_macros.h"
#include "support/pg_test_macros.h"
#include "support/process.h"
#include "support/tcp_proxy.h"
#include "support/temp_dir.h"
#include "tests/pg/pg_apply_helpers.h"
#include "tests/pg/pg_sidecar_helpers.h"

namespace tally {
namespace {

using ::tally::pgtest::CountByOrigin;
using ::tally::pgtest::Following;
using ::tally::pgtest::JsonNumber;
using ::tally::pgtest::SourceNumber;
using ::tally::pgtest::StartSidecar;
using ::tally::pgtest::StartTableCluster;
using ::tally::pgtest::StatusJson;
using ::tally::pgtest::TableMd5;
using ::tally::pgtest::WaitFor;
using ::tally::testing::CommandResult;
using ::tally::testing::FreeLoopbackAddress;
using ::tally::testing::MariaDbServer;
using ::tally::testing::NodeProcess;
using ::tally::testing::PgCluster;
using ::tally::testing::RunCommand;
using ::tally::testing::RunTally;
using ::tally::testing::TallydPath;
using ::tally::testing::TcpProxy;
using ::tally::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

// The master's URL for role `user` (password given, as an operator would:
// it must never show in status), at `host_port`.
std::string SourceUrl(const std::string& user, const std::string& host_port) {
  return absl::StrCat("postgresql://", user, ":s3cret-pw@", host_port,
                      "/postgres,role=source");
}

std::string HostPort(const PgCluster& pg) {
  return absl::StrCat("127.0.0.1:", pg.port());
}

// A role that may log in and SELECT from t, nothing more.
void CreateReader(PgCluster& master, const std::string& user, bool select) {
  ASSERT_TRUE(master
                  .Execute(absl::StrCat("CREATE ROLE ", user,
                                        " LOGIN PASSWORD 's3cret-pw'"))
                  .ok());
  if (select) {
    ASSERT_TRUE(
        master.Execute(absl::StrCat("GRANT SELECT ON t TO ", user)).ok());
  }
}

// Each test has two throwaway servers with the table t: the master and
// the replica a sidecar keeps.
class PgDatabaseSource : public ::testing::Test {
 protected:
  void SetUp() override {
    TALLY_SKIP_UNLESS_POSTGRES();
    master_ = StartTableCluster();
    replica_ = StartTableCluster();
    ASSERT_NE(master_, nullptr);
    ASSERT_NE(replica_, nullptr);
  }

  std::unique_ptr<PgCluster> master_;
  std::unique_ptr<PgCluster> replica_;
};

TEST_F(PgDatabaseSource, AReplicaBecomesTheMastersCopyWithASelectOnlyRole) {
  PgCluster* master = master_.get();
  PgCluster* replica = replica_.get();
  CreateReader(*master, "reader", /*select=*/true);
  // 20,000 rows on the master, one of them TOASTed; the replica holds an
  // older copy: most rows equal, some changed, some missing, some extra,
  // and a NULL where the master has ''.
  ASSERT_TRUE(master
                  ->Execute("INSERT INTO t SELECT g, g, 'v' || g FROM "
                            "generate_series(1, 20000) g; "
                            "UPDATE t SET b = '' WHERE id = 7; "
                            "UPDATE t SET b = repeat('x', 300000) "
                            "WHERE id = 8")
                  .ok());
  ASSERT_TRUE(replica
                  ->Execute("INSERT INTO t SELECT g, g, 'v' || g FROM "
                            "generate_series(1, 19000) g; "
                            "UPDATE t SET a = -a WHERE id % 997 = 0; "
                            "UPDATE t SET b = NULL WHERE id = 7; "
                            "UPDATE t SET b = repeat('x', 299999) || 'y' "
                            "WHERE id = 8; "
                            "INSERT INTO t VALUES (50001, 1, 'extra'), "
                            "(50002, 2, 'extra')")
                  .ok());
  ASSERT_NE(TableMd5(*master, "t"), TableMd5(*replica, "t"));

  TempDir dir;
  std::unique_ptr<NodeProcess> node =
      StartSidecar("copy", dir.path(), *replica, FreeLoopbackAddress(),
                   {SourceUrl("reader", HostPort(*master))});
  ASSERT_NE(node, nullptr);
  ASSERT_TRUE(
      WaitFor([&] { return TableMd5(*master, "t") == TableMd5(*replica, "t"); },
              absl::Seconds(60)))
      << node->Log();
  std::string status = StatusJson(node->address());
  EXPECT_THAT(status, HasSubstr("\"database_source\":{"));
  EXPECT_THAT(status, Not(HasSubstr("s3cret-pw"))) << status;
  EXPECT_GE(SourceNumber(status, "rows_copied"), 1000 + 21);
  EXPECT_GE(SourceNumber(status, "rows_deleted"), 2);
  // The rows came through the sidecar's apply (its replication origin),
  // not a plain write.
  EXPECT_NE(CountByOrigin(*replica, 1, 20000, /*tally=*/true), "0");

  // The master moves on: updates, deletes, inserts. The next sessions
  // bring them, and only what differs crosses: a small part of the bytes
  // of a first copy.
  ASSERT_TRUE(WaitFor(
      [&] {
        return SourceNumber(StatusJson(node->address()), "sessions_ok") >= 2;
      },
      absl::Seconds(30)))
      << StatusJson(node->address());
  ASSERT_TRUE(master
                  ->Execute("UPDATE t SET a = a + 1 WHERE id BETWEEN 100 AND "
                            "149; DELETE FROM t WHERE id BETWEEN 200 AND 209; "
                            "INSERT INTO t VALUES (30000, 3, 'new')")
                  .ok());
  ASSERT_TRUE(
      WaitFor([&] { return TableMd5(*master, "t") == TableMd5(*replica, "t"); },
              absl::Seconds(30)))
      << node->Log();
  status = StatusJson(node->address());
  EXPECT_EQ(SourceNumber(status, "sessions_failed"), 0) << status;

  // The index describes the table exactly (the rows went through the
  // store, not around it).
  ASSERT_TRUE(
      WaitFor([&] { return Following(node->address()); }, absl::Seconds(10)));
  CommandResult verify = RunTally({"verify", "--node", node->address()});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;

  // The text view names the source, masked.
  CommandResult text = RunTally({"status", "--node", node->address()});
  EXPECT_THAT(text.out, HasSubstr("read from source"));
  EXPECT_THAT(text.out, Not(HasSubstr("s3cret-pw")));
}

TEST_F(PgDatabaseSource, ARoleWithoutSelectIsNamedAndChangesNothing) {
  PgCluster* master = master_.get();
  PgCluster* replica = replica_.get();
  CreateReader(*master, "nobody", /*select=*/false);
  ASSERT_TRUE(master->Execute("INSERT INTO t VALUES (1, 1, 'm')").ok());
  ASSERT_TRUE(replica->Execute("INSERT INTO t VALUES (2, 2, 'r')").ok());
  const std::string before = TableMd5(*replica, "t");
  TempDir dir;
  std::unique_ptr<NodeProcess> node =
      StartSidecar("copy", dir.path(), *replica, FreeLoopbackAddress(),
                   {SourceUrl("nobody", HostPort(*master))});
  ASSERT_NE(node, nullptr);
  ASSERT_TRUE(WaitFor(
      [&] {
        return SourceNumber(StatusJson(node->address()), "sessions_failed") >=
               1;
      },
      absl::Seconds(30)))
      << node->Log();
  const std::string status = StatusJson(node->address());
  EXPECT_THAT(status, HasSubstr("permission denied for table t"));
  EXPECT_THAT(status, HasSubstr("needs SELECT on public.t"));
  EXPECT_THAT(status, Not(HasSubstr("s3cret-pw")));
  EXPECT_EQ(TableMd5(*replica, "t"), before);
  EXPECT_THAT(node->Log(), HasSubstr("source session failed"));
}

TEST_F(PgDatabaseSource,
       AMasterThatGoesAwayMidSessionLeavesAConsistentReplica) {
  PgCluster* master = master_.get();
  PgCluster* replica = replica_.get();
  CreateReader(*master, "reader", /*select=*/true);
  // 3,000 rows of 2 kB behind a 1 MB/s link: the first copy takes seconds.
  ASSERT_TRUE(master
                  ->Execute("INSERT INTO t SELECT g, g, repeat(md5(g::text), "
                            "64) FROM generate_series(1, 3000) g")
                  .ok());
  absl::StatusOr<std::unique_ptr<TcpProxy>> proxy =
      TcpProxy::Start(HostPort(*master), absl::Milliseconds(2), 1e6);
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  TempDir dir;
  std::unique_ptr<NodeProcess> node =
      StartSidecar("copy", dir.path(), *replica, FreeLoopbackAddress(),
                   {SourceUrl("reader", (*proxy)->address())});
  ASSERT_NE(node, nullptr);
  // Mid-session: some rows are in, not all.
  ASSERT_TRUE(WaitFor(
      [&] {
        absl::StatusOr<std::string> n =
            replica->Execute("SELECT count(*) FROM t");
        return n.ok() && *n != "0";
      },
      absl::Seconds(60)))
      << node->Log();
  ASSERT_TRUE(master->Stop(PgCluster::StopMode::kImmediate).ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        return SourceNumber(StatusJson(node->address()), "sessions_failed") >=
               1;
      },
      absl::Seconds(60)))
      << node->Log();
  absl::StatusOr<std::string> partial =
      replica->Execute("SELECT count(*) FROM t");
  ASSERT_TRUE(partial.ok());
  EXPECT_NE(*partial, "3000") << "the session was not cut mid-way";
  // Consistent: the index describes the table as it is.
  ASSERT_TRUE(
      WaitFor([&] { return Following(node->address()); }, absl::Seconds(10)));
  CommandResult verify = RunTally({"verify", "--node", node->address()});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  EXPECT_THAT(StatusJson(node->address()), HasSubstr("the source"));

  // The master is back: the next session finishes the copy.
  ASSERT_TRUE(master->Restart().ok());
  ASSERT_TRUE(
      WaitFor([&] { return TableMd5(*master, "t") == TableMd5(*replica, "t"); },
              absl::Seconds(90)))
      << node->Log();
  verify = RunTally({"verify", "--node", node->address()});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
}

// md5 over k's rows in key order.
std::string KeyedMd5(PgCluster& pg) {
  absl::StatusOr<std::string> md5 = pg.Execute(
      "SELECT coalesce(md5(string_agg(k::text, ',' ORDER BY region, id)), "
      "'empty') FROM k");
  EXPECT_TRUE(md5.ok()) << md5.status();
  return md5.ok() ? *md5 : "";
}

// A composite text key and the values whose canonical forms are easy to
// get wrong (NULL and '', -0 and 0, numeric scale, enum, array, jsonb,
// bytea, microseconds, a TOASTed value) come across exactly.
TEST_F(PgDatabaseSource, EveryKindOfValueUnderACompositeKeyArrivesExactly) {
  PgCluster* master = master_.get();
  PgCluster* replica = replica_.get();
  for (PgCluster* pg : {master, replica}) {
    ASSERT_TRUE(pg->Execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy'); "
                            "CREATE TABLE k (region text, id int, n numeric, "
                            "f float8, j jsonb, raw bytea, m mood, arr int[], "
                            "ts timestamptz, s text, PRIMARY KEY (region, "
                            "id))")
                    .ok());
  }
  CreateReader(*master, "reader", /*select=*/true);
  ASSERT_TRUE(master->Execute("GRANT SELECT ON k TO reader").ok());
  ASSERT_TRUE(
      master
          ->Execute(
              "INSERT INTO k SELECT (ARRAY['eu','us','ap'])[1 + g % 3], g, "
              "g / 7.0, g * 1.5, jsonb_build_object('g', g), "
              "decode(md5(g::text), 'hex'), (ARRAY['sad','ok','happy'])"
              "[1 + g % 3]::mood, ARRAY[g, g + 1], timestamptz "
              "'2026-01-01 00:00:00.123456Z' + g * interval '1 us', "
              "'v' || g FROM generate_series(1, 3000) g; "
              "INSERT INTO k VALUES ('', 0, 1.10, '-0', 'null', '', 'ok', "
              "'{}', NULL, ''), ('eu', -1, NULL, NULL, NULL, NULL, NULL, "
              "NULL, NULL, NULL), ('big', 1, 1.100, 0, '[]', '\\x00', "
              "'sad', ARRAY[NULL]::int[], now(), repeat('z', 200000))")
          .ok());
  // The replica holds look-alikes that must be replaced: 1.1 for 1.10,
  // 0 for -0, NULL for '', a different TOASTed value, and extra keys.
  ASSERT_TRUE(replica
                  ->Execute("INSERT INTO k VALUES ('', 0, 1.1, '0', 'null', "
                            "NULL, 'ok', '{}', NULL, ''), ('big', 1, 1.100, "
                            "0, '[]', '\\x00', 'sad', ARRAY[NULL]::int[], "
                            "now(), repeat('z', 199999) || 'y'), ('xx', 9, "
                            "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)")
                  .ok());
  TempDir dir;
  std::unique_ptr<NodeProcess> node = StartSidecar(
      "copy", dir.path(), *replica, FreeLoopbackAddress(),
      {SourceUrl("reader", HostPort(*master))}, {"--table", "public.k"});
  ASSERT_NE(node, nullptr);
  ASSERT_TRUE(WaitFor([&] { return KeyedMd5(*master) == KeyedMd5(*replica); },
                      absl::Seconds(60)))
      << node->Log() << StatusJson(node->address());
  EXPECT_EQ(SourceNumber(StatusJson(node->address()), "sessions_failed"), 0);
}

// Applications keep writing the replica, holding row locks, while the
// master changes and sessions copy it: no application transaction fails
// (no deadlock, no abort), and once they stop the replica is the master's
// copy again.
TEST_F(PgDatabaseSource, ApplicationsHoldingLocksOnTheReplicaAreNeverAborted) {
  PgCluster* master = master_.get();
  PgCluster* replica = replica_.get();
  CreateReader(*master, "reader", /*select=*/true);
  ASSERT_TRUE(master
                  ->Execute("INSERT INTO t SELECT g, g, 'v' || g FROM "
                            "generate_series(1, 2000) g")
                  .ok());
  TempDir dir;
  std::unique_ptr<NodeProcess> node =
      StartSidecar("copy", dir.path(), *replica, FreeLoopbackAddress(),
                   {SourceUrl("reader", HostPort(*master))});
  ASSERT_NE(node, nullptr);
  ASSERT_TRUE(
      WaitFor([&] { return TableMd5(*master, "t") == TableMd5(*replica, "t"); },
              absl::Seconds(60)))
      << node->Log();

  std::atomic<bool> stop{false};
  std::atomic<int> app_failures{0};
  std::atomic<int> app_commits{0};
  std::vector<std::thread> apps;
  for (int w = 0; w < 2; ++w) {
    apps.emplace_back([&, w] {
      for (int i = 0; !stop.load(); ++i) {
        // Two rows in an order that differs between the two workers, held
        // for a while: the order a deadlock needs, against each other
        // and against the apply.
        const int x = 1 + (i * 37 + w * 11) % 2000;
        const int y = 1 + (i * 53 + w * 7) % 2000;
        absl::StatusOr<std::string> r = replica->Execute(absl::StrCat(
            "BEGIN; SET LOCAL lock_timeout = '5s'; UPDATE t SET b = 'app' "
            "WHERE id = ",
            w == 0 ? x : y,
            "; SELECT pg_sleep(0.05); UPDATE t SET b = 'app' "
            "WHERE id = ",
            w == 0 ? y : x, "; COMMIT"));
        if (r.ok()) {
          ++app_commits;
        } else {
          // Two applications may deadlock on each other; never on tally.
          if (!absl::StrContains(r.status().message(), "deadlock")) {
            ++app_failures;
            ADD_FAILURE() << r.status();
          }
        }
      }
    });
  }
  const absl::Time until = absl::Now() + absl::Seconds(8);
  for (int i = 0; absl::Now() < until; ++i) {
    ASSERT_TRUE(master
                    ->Execute(absl::StrCat("UPDATE t SET a = a + 1 WHERE id % "
                                           "50 = ",
                                           i % 50))
                    .ok());
    absl::SleepFor(absl::Milliseconds(200));
  }
  stop.store(true);
  for (std::thread& t : apps) t.join();
  EXPECT_EQ(app_failures.load(), 0);
  EXPECT_GT(app_commits.load(), 20);
  ASSERT_TRUE(
      WaitFor([&] { return TableMd5(*master, "t") == TableMd5(*replica, "t"); },
              absl::Seconds(60)))
      << node->Log() << StatusJson(node->address());
  // The index still describes the table exactly.
  CommandResult verify = RunTally({"verify", "--node", node->address()});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
}

// pgbench's TPC-B on the master (its hot branch and teller rows, its
// accounts), the replica initialised with pgbench's own schema and no rows:
// while the load runs, sessions copy what they find; once it stops, every
// table is the master's, by md5 over the rows in key order.
TEST_F(PgDatabaseSource, PgbenchOnTheMasterEndsWithAnExactCopy) {
  PgCluster* master = master_.get();
  PgCluster* replica = replica_.get();
  const CommandResult init =
      pgtest::Pgbench(*master, {"-i", "-s", "1", "-q"}, absl::Seconds(60));
  ASSERT_EQ(init.exit_code, 0) << init.err;
  // Tables and primary keys, no rows ("-I dtp").
  const CommandResult empty = pgtest::Pgbench(
      *replica, {"-i", "-s", "1", "-q", "-I", "dtp"}, absl::Seconds(60));
  ASSERT_EQ(empty.exit_code, 0) << empty.err;
  CreateReader(*master, "reader", /*select=*/true);
  ASSERT_TRUE(master
                  ->Execute("GRANT SELECT ON pgbench_accounts, "
                            "pgbench_branches, pgbench_tellers TO reader")
                  .ok());
  const std::vector<std::string> tables = {"public.pgbench_branches",
                                           "public.pgbench_tellers",
                                           "public.pgbench_accounts"};
  TempDir dir;
  std::unique_ptr<NodeProcess> node = pgtest::StartTablesSidecar(
      "copy", dir.path(), *replica, FreeLoopbackAddress(),
      {SourceUrl("reader", HostPort(*master))}, tables);
  ASSERT_NE(node, nullptr);
  const CommandResult bench = pgtest::Pgbench(
      *master, {"-n", "-c", "4", "-j", "2", "-T", "10"}, absl::Seconds(60));
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_GT(pgtest::PgbenchFigure(bench.out,
                                  "number of transactions actually processed:"),
            100);
  struct Keyed {
    const char* table;
    const char* key;
  };
  for (const Keyed& t :
       {Keyed{"pgbench_branches", "bid"}, Keyed{"pgbench_tellers", "tid"},
        Keyed{"pgbench_accounts", "aid"}}) {
    SCOPED_TRACE(t.table);
    EXPECT_TRUE(WaitFor(
        [&] {
          return pgtest::OrderedMd5(*master, t.table, t.key) ==
                 pgtest::OrderedMd5(*replica, t.table, t.key);
        },
        absl::Seconds(60)))
        << StatusJson(node->address());
  }
  CommandResult verify = RunTally({"verify", "--node", node->address()});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
}

TEST(PgDatabaseSourceConfig, ADatabasePeerMustBeASourceOfASidecar) {
  TempDir dir;
  const std::string url = "postgresql://reader:s3cret-pw@127.0.0.1:1/app";
  CommandResult two_way =
      RunCommand({TallydPath(), "--check-config", "--name", "n", "--data-dir",
                  dir.path(), "--peer", url},
                 absl::Seconds(10));
  EXPECT_NE(two_way.exit_code, 0) << two_way.out << two_way.err;
  EXPECT_THAT(two_way.err, HasSubstr("give it as role=source"));
  EXPECT_THAT(two_way.err, Not(HasSubstr("s3cret-pw")));
  CommandResult no_sidecar =
      RunCommand({TallydPath(), "--check-config", "--name", "n", "--data-dir",
                  dir.path(), "--peer", absl::StrCat(url, ",role=source")},
                 absl::Seconds(10));
  EXPECT_NE(no_sidecar.exit_code, 0) << no_sidecar.out << no_sidecar.err;
  EXPECT_THAT(no_sidecar.err, HasSubstr("only a sidecar can copy"));
  EXPECT_THAT(no_sidecar.err, Not(HasSubstr("s3cret-pw")));
}

// A PostgreSQL replica kept equal to a MariaDB master: each side's own
// md5 over the same text of its ordered rows.
constexpr char kMariaTable[] =
    "CREATE DATABASE shop; CREATE TABLE shop.t (id bigint PRIMARY KEY, a "
    "int, b mediumtext) DEFAULT CHARSET utf8mb4";
constexpr char kMariaMd5[] =
    "SET SESSION group_concat_max_len = 1 << 30; SELECT "
    "COALESCE(MD5(GROUP_CONCAT(CONCAT_WS('|', id, COALESCE(a, 'NULL'), "
    "COALESCE(b, 'NULL')) ORDER BY id SEPARATOR ',')), 'empty') FROM shop.t";
constexpr char kPgMd5[] =
    "SELECT coalesce(md5(string_agg(concat_ws('|', id, coalesce(a::text, "
    "'NULL'), coalesce(b, 'NULL')), ',' ORDER BY id)), 'empty') FROM t";

class MariaDbDatabaseSource : public ::testing::Test {
 protected:
  void SetUp() override {
    TALLY_SKIP_UNLESS_POSTGRES();
    TALLY_SKIP_UNLESS_MARIADB();
    absl::StatusOr<std::unique_ptr<MariaDbServer>> m = MariaDbServer::Start();
    ASSERT_TRUE(m.ok()) << m.status();
    master_ = *std::move(m);
    ASSERT_TRUE(master_->Execute(kMariaTable).ok());
    ASSERT_TRUE(master_
                    ->Execute("CREATE USER 'reader'@'127.0.0.1' IDENTIFIED BY "
                              "'s3cret-pw'; GRANT SELECT ON shop.t TO "
                              "'reader'@'127.0.0.1'; CREATE USER "
                              "'nobody'@'127.0.0.1' IDENTIFIED BY "
                              "'s3cret-pw'; CREATE TABLE shop.other (id int "
                              "PRIMARY KEY); GRANT SELECT ON shop.other TO "
                              "'nobody'@'127.0.0.1'")
                    .ok());
    replica_ = StartTableCluster();
    ASSERT_NE(replica_, nullptr);
  }
  std::string MasterMd5() {
    absl::StatusOr<std::string> r = master_->Execute(kMariaMd5);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : "";
  }
  std::string ReplicaMd5() {
    absl::StatusOr<std::string> r = replica_->Execute(kPgMd5);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : "";
  }
  std::string SourceUrl(const std::string& user) {
    return absl::StrCat("mariadb://", user,
                        ":s3cret-pw@127.0.0.1:", master_->port(),
                        "/shop,role=source");
  }

  std::unique_ptr<MariaDbServer> master_;
  std::unique_ptr<PgCluster> replica_;
};

TEST_F(MariaDbDatabaseSource, APostgresReplicaFollowsAMariaDbMaster) {
  // 20,000 rows on the master, one of 300 kB; the replica an older copy.
  ASSERT_TRUE(master_
                  ->Execute("INSERT INTO shop.t SELECT seq, seq, CONCAT('v', "
                            "seq) FROM shop.seq_1_to_20000; UPDATE shop.t SET "
                            "b = '' WHERE id = 7; UPDATE shop.t SET b = "
                            "REPEAT('x', 300000) WHERE id = 8; UPDATE shop.t "
                            "SET a = NULL WHERE id = 9")
                  .ok());
  ASSERT_TRUE(replica_
                  ->Execute("INSERT INTO t SELECT g, g, 'v' || g FROM "
                            "generate_series(1, 19000) g; UPDATE t SET a = -a "
                            "WHERE id % 997 = 0; UPDATE t SET b = NULL WHERE "
                            "id = 7; INSERT INTO t VALUES (50001, 1, 'extra')")
                  .ok());
  ASSERT_NE(MasterMd5(), ReplicaMd5());
  TempDir dir;
  std::unique_ptr<NodeProcess> node =
      StartSidecar("copy", dir.path(), *replica_, FreeLoopbackAddress(),
                   {SourceUrl("reader")});
  ASSERT_NE(node, nullptr);
  ASSERT_TRUE(
      WaitFor([&] { return MasterMd5() == ReplicaMd5(); }, absl::Seconds(60)))
      << node->Log();
  std::string status = StatusJson(node->address());
  EXPECT_THAT(status, Not(HasSubstr("s3cret-pw"))) << status;
  EXPECT_THAT(status, HasSubstr("mariadb://reader@127.0.0.1:"));
  EXPECT_GE(SourceNumber(status, "rows_copied"), 1000 + 3);
  EXPECT_GE(SourceNumber(status, "rows_deleted"), 1);
  // Through the sidecar's apply, under its replication origin.
  EXPECT_NE(CountByOrigin(*replica_, 1, 20000, /*tally=*/true), "0");

  // The master moves on, while the sidecar runs.
  ASSERT_TRUE(master_
                  ->Execute("UPDATE shop.t SET b = 'changed' WHERE id <= 50; "
                            "DELETE FROM shop.t WHERE id BETWEEN 100 AND 120; "
                            "INSERT INTO shop.t VALUES (30000, 3, 'new')")
                  .ok());
  ASSERT_TRUE(
      WaitFor([&] { return MasterMd5() == ReplicaMd5(); }, absl::Seconds(60)))
      << node->Log();
  CommandResult verify = RunTally({"verify", "--node", node->address()});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
}

TEST_F(MariaDbDatabaseSource, AUserWithoutSelectIsNamedAndNothingChanges) {
  ASSERT_TRUE(master_->Execute("INSERT INTO shop.t VALUES (1, 1, 'a')").ok());
  ASSERT_TRUE(replica_->Execute("INSERT INTO t VALUES (2, 2, 'b')").ok());
  TempDir dir;
  std::unique_ptr<NodeProcess> node =
      StartSidecar("copy", dir.path(), *replica_, FreeLoopbackAddress(),
                   {SourceUrl("nobody")});
  ASSERT_NE(node, nullptr);
  std::string status;
  ASSERT_TRUE(WaitFor(
      [&] {
        status = StatusJson(node->address());
        return SourceNumber(status, "sessions_failed") >= 1;
      },
      absl::Seconds(30)))
      << status;
  EXPECT_THAT(status, HasSubstr("no table shop.t"));
  EXPECT_THAT(status, HasSubstr("needs SELECT"));
  EXPECT_THAT(status, Not(HasSubstr("s3cret-pw")));
  EXPECT_EQ(*replica_->Execute("SELECT id FROM t"), "2");
}

TEST_F(MariaDbDatabaseSource, AMasterKilledMidSessionThenBackConverges) {
  ASSERT_TRUE(master_
                  ->Execute("INSERT INTO shop.t SELECT seq, seq, REPEAT('y', "
                            "500) FROM shop.seq_1_to_30000")
                  .ok());
  TempDir dir;
  std::unique_ptr<NodeProcess> node =
      StartSidecar("copy", dir.path(), *replica_, FreeLoopbackAddress(),
                   {SourceUrl("reader")});
  ASSERT_NE(node, nullptr);
  // Killed while the first copy is under way (or just after it).
  ASSERT_TRUE(WaitFor(
      [&] {
        absl::StatusOr<std::string> n =
            replica_->Execute("SELECT count(*) FROM t");
        return n.ok() && *n != "0";
      },
      absl::Seconds(60)));
  ASSERT_TRUE(master_->Kill().ok());
  std::string status;
  ASSERT_TRUE(WaitFor(
      [&] {
        status = StatusJson(node->address());
        return SourceNumber(status, "sessions_failed") >= 1;
      },
      absl::Seconds(30)))
      << status;
  EXPECT_THAT(status, HasSubstr("the source"));
  // The replica is consistent with the sidecar's index throughout.
  CommandResult verify = RunTally({"verify", "--node", node->address()});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  ASSERT_TRUE(master_->Restart().ok());
  ASSERT_TRUE(
      WaitFor([&] { return MasterMd5() == ReplicaMd5(); }, absl::Seconds(60)))
      << StatusJson(node->address());
}

TEST(MariaDbDatabaseSourceConfig, AMariaDbSourceNamesItsDatabase) {
  TempDir dir;
  CommandResult r = RunCommand(
      {TallydPath(), "--check-config", "--name", "n", "--data-dir", dir.path(),
       "--postgres", "postgresql://x@127.0.0.1:1/app", "--table", "public.t",
       "--peer", "mariadb://reader:s3cret-pw@127.0.0.1:1,role=source"},
      absl::Seconds(10));
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("names no database"));
  EXPECT_THAT(r.err, Not(HasSubstr("s3cret-pw")));
  r = RunCommand(
      {TallydPath(), "--check-config", "--name", "n", "--data-dir", dir.path(),
       "--postgres", "postgresql://x@127.0.0.1:1/app", "--table", "public.t",
       "--peer", "mariadb://reader:s3cret-pw@127.0.0.1:1/shop"},
      absl::Seconds(10));
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("give it as role=source"));
  EXPECT_THAT(r.err, Not(HasSubstr("s3cret-pw")));
  r = RunCommand(
      {TallydPath(), "--check-config", "--name", "n", "--data-dir", dir.path(),
       "--postgres", "postgresql://x@127.0.0.1:1/app", "--table", "public.t",
       "--peer", "mariadb://reader:s3cret-pw@127.0.0.1:1/shop,role=source"},
      absl::Seconds(10));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("s3cret-pw")));
}

}  // namespace
}  // namespace tally
