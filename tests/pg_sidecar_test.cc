// tallyd as a sidecar to real PostgreSQL servers (issue 10 §5), started as
// an operator starts it. First the bad input that only the sidecar's
// preparation sees (§5 test 7): each refusal exits 1 with one line naming
// the fix, before the node opens its store, and never shows the password.
//
// The fixture: a throwaway server per test (support/pg_cluster.h), tallyd
// processes on it, SQL as the superuser, and an md5 aggregate to compare a
// table across databases.
//
// A tallyd built without pg::Sidecar refuses --postgres ("built without the
// PostgreSQL sidecar"): these tests then skip, saying so, rather than
// assert what such a build cannot do.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/pg_cluster.h"
#include "support/pg_test_macros.h"
#include "support/process.h"
#include "support/temp_dir.h"

namespace tally {
namespace {

using ::tally::testing::CommandResult;
using ::tally::testing::PgCluster;
using ::tally::testing::PgClusterOptions;
using ::tally::testing::RunCommand;
using ::tally::testing::TallydPath;
using ::tally::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr absl::string_view kNoSidecar = "built without the PostgreSQL sidecar";

class PgSidecarTest : public ::testing::Test {
 protected:
  // Starts a server with `settings` over the defaults, and a table `t` with a
  // primary key in database `postgres`.
  std::unique_ptr<PgCluster> StartCluster(PgClusterOptions options = {}) {
    absl::StatusOr<std::unique_ptr<PgCluster>> pg = PgCluster::Start(options);
    EXPECT_TRUE(pg.ok()) << pg.status();
    if (!pg.ok()) return nullptr;
    EXPECT_TRUE((*pg)
                    ->Execute("CREATE TABLE t (id bigint PRIMARY KEY, a int, "
                              "b text)")
                    .ok());
    return *std::move(pg);
  }

  // Runs tallyd on `conninfo` with `tables` until it exits (a refusal) or
  // the bound passes.
  CommandResult RunTallyd(const std::string& conninfo,
                          const std::vector<std::string>& tables) {
    std::vector<std::string> argv = {TallydPath(),  "--name",     "pg-a",
                                     "--data-dir",  dir_.path(),  "--listen",
                                     "127.0.0.1:0", "--postgres", conninfo};
    for (const std::string& table : tables) {
      argv.push_back("--table");
      argv.push_back(table);
    }
    return RunCommand(argv, absl::Seconds(30));
  }

  // The md5 of a table's rows in key order: equal tables, equal sums.
  static std::string TableMd5(PgCluster& pg, absl::string_view table) {
    absl::StatusOr<std::string> md5 = pg.Execute(
        absl::StrCat("SELECT coalesce(md5(string_agg(x::text, ',' ORDER BY "
                     "x.id)), 'empty') FROM ",
                     table, " x"));
    EXPECT_TRUE(md5.ok()) << md5.status();
    return md5.ok() ? *md5 : "";
  }

  // A refusal: exit 1, one line, before any store was made.
  void ExpectRefusal(const CommandResult& r) {
    EXPECT_EQ(r.exit_code, 1) << r.err;
    std::vector<std::string> lines =
        absl::StrSplit(absl::StripSuffix(r.err, "\n"), '\n');
    // The log lines before the refusal are tallyd's own (INFO ...); the
    // refusal is the one "tallyd: " line, and the last.
    ASSERT_FALSE(lines.empty());
    EXPECT_TRUE(absl::StartsWith(lines.back(), "tallyd: ")) << r.err;
  }

  TempDir dir_;
};

// Skips the calling test when the tallyd under test has no sidecar.
#define SKIP_IF_NO_SIDECAR(result)                                 \
  do {                                                             \
    if (absl::StrContains((result).err, kNoSidecar)) {             \
      GTEST_SKIP() << "this tallyd has no PostgreSQL sidecar yet"; \
    }                                                              \
  } while (false)

TEST_F(PgSidecarTest, WalLevelReplicaIsRefusedNamingTheFix) {
  TALLY_SKIP_UNLESS_POSTGRES();
  PgClusterOptions options;
  options.settings = {"wal_level=replica"};
  std::unique_ptr<PgCluster> pg = StartCluster(options);
  ASSERT_NE(pg, nullptr);
  const CommandResult r = RunTallyd(pg->Uri(), {"public.t"});
  SKIP_IF_NO_SIDECAR(r);
  ExpectRefusal(r);
  EXPECT_THAT(r.err, AllOf(HasSubstr("wal_level"), HasSubstr("logical")));
}

TEST_F(PgSidecarTest, TrackCommitTimestampOffIsRefusedNamingTheFix) {
  TALLY_SKIP_UNLESS_POSTGRES();
  PgClusterOptions options;
  options.settings = {"track_commit_timestamp=off"};
  std::unique_ptr<PgCluster> pg = StartCluster(options);
  ASSERT_NE(pg, nullptr);
  const CommandResult r = RunTallyd(pg->Uri(), {"public.t"});
  SKIP_IF_NO_SIDECAR(r);
  ExpectRefusal(r);
  EXPECT_THAT(r.err, HasSubstr("track_commit_timestamp"));
}

TEST_F(PgSidecarTest, ARoleWithoutReplicationIsRefusedNamingTheFix) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg = StartCluster();
  ASSERT_NE(pg, nullptr);
  ASSERT_TRUE(pg->Execute("CREATE ROLE app LOGIN; GRANT ALL ON t TO app").ok());
  const CommandResult r = RunTallyd(pg->Uri("postgres", "app"), {"public.t"});
  SKIP_IF_NO_SIDECAR(r);
  ExpectRefusal(r);
  EXPECT_THAT(r.err, HasSubstr("REPLICATION"));
}

TEST_F(PgSidecarTest, ATableWithoutAPrimaryKeyIsRefusedNamingIt) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg = StartCluster();
  ASSERT_NE(pg, nullptr);
  ASSERT_TRUE(pg->Execute("CREATE TABLE loose (a int)").ok());
  const CommandResult r = RunTallyd(pg->Uri(), {"public.t", "public.loose"});
  SKIP_IF_NO_SIDECAR(r);
  ExpectRefusal(r);
  EXPECT_THAT(r.err,
              AllOf(HasSubstr("public.loose"), HasSubstr("primary key")));
}

TEST_F(PgSidecarTest, AWrongPasswordIsRefusedWithoutShowingIt) {
  TALLY_SKIP_UNLESS_POSTGRES();
  PgClusterOptions options;
  options.hba_lines = {"local all all trust",
                       "host all postgres 127.0.0.1/32 trust",
                       "host all all 127.0.0.1/32 scram-sha-256",
                       "host replication postgres 127.0.0.1/32 trust",
                       "host replication all 127.0.0.1/32 scram-sha-256"};
  std::unique_ptr<PgCluster> pg = StartCluster(options);
  ASSERT_NE(pg, nullptr);
  ASSERT_TRUE(
      pg->Execute("CREATE ROLE app LOGIN REPLICATION PASSWORD 'right-one'")
          .ok());
  const std::string uri = absl::StrCat(
      "postgresql://app:wrong-one@127.0.0.1:", pg->port(), "/postgres");
  const CommandResult r = RunTallyd(uri, {"public.t"});
  SKIP_IF_NO_SIDECAR(r);
  ExpectRefusal(r);
  EXPECT_THAT(r.err, AllOf(HasSubstr("password"), Not(HasSubstr("wrong-one")),
                           Not(HasSubstr("right-one"))));
}

TEST_F(PgSidecarTest, NoFreeReplicationSlotIsRefusedNamingTheSetting) {
  TALLY_SKIP_UNLESS_POSTGRES();
  PgClusterOptions options;
  options.settings = {"max_replication_slots=1"};
  std::unique_ptr<PgCluster> pg = StartCluster(options);
  ASSERT_NE(pg, nullptr);
  ASSERT_TRUE(pg->Execute("SELECT pg_create_logical_replication_slot("
                          "'someone_else', 'pgoutput')")
                  .ok());
  const CommandResult r = RunTallyd(pg->Uri(), {"public.t"});
  SKIP_IF_NO_SIDECAR(r);
  ExpectRefusal(r);
  EXPECT_THAT(r.err, HasSubstr("max_replication_slots"));
}

// The fixture's md5 aggregate tells equal tables from different ones (the
// later tests compare databases with it).
TEST_F(PgSidecarTest, TheTableChecksumSeesEveryDifference) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg = StartCluster();
  ASSERT_NE(pg, nullptr);
  ASSERT_TRUE(pg->Execute("CREATE TABLE u (LIKE t INCLUDING ALL);"
                          "INSERT INTO t SELECT g, g, 'x' || g FROM "
                          "generate_series(1, 100) g;"
                          "INSERT INTO u SELECT * FROM t")
                  .ok());
  EXPECT_EQ(TableMd5(*pg, "t"), TableMd5(*pg, "u"));
  ASSERT_TRUE(pg->Execute("UPDATE u SET b = NULL WHERE id = 50").ok());
  EXPECT_NE(TableMd5(*pg, "t"), TableMd5(*pg, "u"));
  ASSERT_TRUE(pg->Execute("DELETE FROM t; DELETE FROM u").ok());
  EXPECT_EQ(TableMd5(*pg, "t"), "empty");
}

}  // namespace
}  // namespace tally
