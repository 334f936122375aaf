#include "tools/cli/pg_url.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tally {
namespace cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(PgUrl, TablesAreTakenOutAndTheRestGoesToLibpq) {
  absl::StatusOr<PostgresTarget> t = ParsePostgresUrl(
      "postgresql://tally@db:5432/app?table=public.t&sslmode=require&"
      "table=%22My%22.x");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->conninfo, "postgresql://tally@db:5432/app?sslmode=require");
  EXPECT_THAT(t->tables, ElementsAre("public.t", "\"My\".x"));
  EXPECT_EQ(t->display, "postgresql://tally@db:5432/app?sslmode=require");
}

TEST(PgUrl, TheDisplayFormNeverHoldsThePassword) {
  absl::StatusOr<PostgresTarget> t = ParsePostgresUrl(
      "postgres://tally:s3cret@db/app?password=other&table=public.t");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->conninfo, "postgres://tally:s3cret@db/app?password=other");
  EXPECT_THAT(t->display, Not(HasSubstr("s3cret")));
  EXPECT_THAT(t->display, Not(HasSubstr("other")));
  EXPECT_EQ(t->display, "postgres://tally@db/app");
  // A password with '@' in it (libpq takes the last '@').
  t = ParsePostgresUrl("postgresql://u:p@ss@h/db");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->display, "postgresql://u@h/db");
}

TEST(PgUrl, WithoutTablesOrQuery) {
  absl::StatusOr<PostgresTarget> t = ParsePostgresUrl("postgresql://h/db");
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->tables.empty());
  EXPECT_EQ(t->conninfo, "postgresql://h/db");
  EXPECT_TRUE(IsPostgresUrl("postgres://h"));
  EXPECT_FALSE(IsPostgresUrl("127.0.0.1:7400"));
  EXPECT_FALSE(IsPostgresUrl("host=h dbname=app"));
}

TEST(PgUrl, BadTableParametersAreRefusedWithoutThePassword) {
  for (const char* url :
       {"postgresql://u:pw@h/db?table=", "postgresql://u:pw@h/db?table=%zz",
        "postgresql://u:pw@h/db?table=%4", "postgresql://u:pw@h/db?table"}) {
    absl::StatusOr<PostgresTarget> t = ParsePostgresUrl(url);
    ASSERT_FALSE(t.ok()) << url;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(t.status().message(), Not(HasSubstr("pw")));
  }
  EXPECT_FALSE(ParsePostgresUrl("mysql://h/db").ok());
}

}  // namespace
}  // namespace cli
}  // namespace tally
