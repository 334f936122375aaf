// A sidecar whose source is a database it may only query
// (`--peer postgresql://reader@master/db,role=source`): real tallyd, real
// PostgreSQL servers for the master and the replica, tables compared with
// md5 over ordered rows.
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/pg_test_macros.h"
#include "support/process.h"
#include "support/tcp_proxy.h"
#include "support/temp_dir.h"
#include "tests/pg/pg_sidecar_helpers.h"

namespace tally {
namespace {

using ::tally::pgtest::CountByOrigin;
using ::tally::pgtest::Following;
using ::tally::pgtest::JsonNumber;
using ::tally::pgtest::StartSidecar;
using ::tally::pgtest::StartTableCluster;
using ::tally::pgtest::StatusJson;
using ::tally::pgtest::TableMd5;
using ::tally::pgtest::WaitFor;
using ::tally::testing::CommandResult;
using ::tally::testing::FreeLoopbackAddress;
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

// A number of the status's database_source section (-1 without one).
long long SourceNumber(const std::string& status_json,
                       const std::string& field) {
  const size_t at = status_json.find("\"database_source\":{");
  if (at == std::string::npos) return -1;
  return JsonNumber(status_json.substr(at), field);
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

TEST(PgDatabaseSource, AReplicaBecomesTheMastersCopyWithASelectOnlyRole) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> master = StartTableCluster();
  std::unique_ptr<PgCluster> replica = StartTableCluster();
  ASSERT_NE(master, nullptr);
  ASSERT_NE(replica, nullptr);
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

TEST(PgDatabaseSource, ARoleWithoutSelectIsNamedAndChangesNothing) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> master = StartTableCluster();
  std::unique_ptr<PgCluster> replica = StartTableCluster();
  ASSERT_NE(master, nullptr);
  ASSERT_NE(replica, nullptr);
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

TEST(PgDatabaseSource, AMasterThatGoesAwayMidSessionLeavesAConsistentReplica) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> master = StartTableCluster();
  std::unique_ptr<PgCluster> replica = StartTableCluster();
  ASSERT_NE(master, nullptr);
  ASSERT_NE(replica, nullptr);
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

TEST(PgDatabaseSource, ADatabasePeerMustBeASourceOfASidecar) {
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

}  // namespace
}  // namespace tally
