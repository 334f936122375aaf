#include "pg/sidecar/apply/apply_sql.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace tally {
namespace pg {
namespace {

TableColumn Column(std::string name, std::string type, bool identity = false) {
  TableColumn c;
  c.name = std::move(name);
  c.type = std::move(type);
  c.identity_always = identity;
  return c;
}

TEST(MergeSql, LocksWithSkipLockedAndInsertsIdentityValuesAsGiven) {
  absl::StatusOr<TableSchema> t = TableSchema::FromColumns(
      "public.t", {Column("id", "bigint"), Column("a", "integer")}, {"id"});
  ASSERT_TRUE(t.ok()) << t.status();
  const std::string sql = MergeSql(*t, "tally_apply_0");
  EXPECT_TRUE(absl::StrContains(sql, "FOR UPDATE OF t SKIP LOCKED")) << sql;
  EXPECT_TRUE(absl::StrContains(sql, "OVERRIDING SYSTEM VALUE")) << sql;
  EXPECT_TRUE(absl::StrContains(sql, "SET \"a\" = s.c1")) << sql;
  EXPECT_TRUE(absl::StrContains(sql, "SELECT 'b', i FROM busy")) << sql;
  // Updates and deletes touch only the rows the statement locked.
  EXPECT_TRUE(
      absl::StrContains(sql, "s.op = 'u' AND s.i IN (SELECT i FROM lk)"))
      << sql;
  EXPECT_TRUE(
      absl::StrContains(sql, "s.op = 'd' AND s.i IN (SELECT i FROM lk)"))
      << sql;
}

TEST(MergeSql, AnIdentityColumnGeneratedAlwaysIsNotUpdated) {
  absl::StatusOr<TableSchema> t = TableSchema::FromColumns(
      "public.t",
      {Column("id", "bigint"), Column("seq", "bigint", true),
       Column("v", "text")},
      {"id"});
  ASSERT_TRUE(t.ok()) << t.status();
  const std::string sql = MergeSql(*t, "tally_apply_0");
  // Canonical order: id, then seq, v by name.
  EXPECT_FALSE(absl::StrContains(sql, "\"seq\" = s.c1")) << sql;
  EXPECT_TRUE(absl::StrContains(sql, "SET \"v\" = s.c2")) << sql;
  // Inserted with the row's own value.
  EXPECT_TRUE(absl::StrContains(sql, "(\"id\", \"seq\", \"v\") OVERRIDING"))
      << sql;

  // A key-only table whose key is such a column rewrites nothing else.
  absl::StatusOr<TableSchema> k = TableSchema::FromColumns(
      "public.k", {Column("id", "bigint", true), Column("r", "text")},
      {"id", "r"});
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_TRUE(absl::StrContains(MergeSql(*k, "x"), "SET \"r\" = s.c1"));
}

TEST(ApplySessionSettings, ReplicaRoleFirstThenTheLockTimeout) {
  const std::vector<std::string> s =
      ApplySessionSettings(absl::Milliseconds(200));
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0], "SET session_replication_role = replica");
  EXPECT_EQ(s[1], "SET lock_timeout = 200");
  EXPECT_EQ(ApplyDeadlockTimeoutSql(absl::ZeroDuration()),
            "SET deadlock_timeout = 1");
}

}  // namespace
}  // namespace pg
}  // namespace tally
