#include "node/sidecar/postgres_table_rows.h"

#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/pg_cluster.h"
#include "support/pg_test_macros.h"

namespace tally {
namespace node {
namespace {

using ::tally::testing::PgCluster;
using ::testing::HasSubstr;

// One server for the suite (a start costs seconds on a busy machine); each
// test makes its tables afresh.
class TableRowsTest : public ::testing::Test {
 protected:
  static void TearDownTestSuite() { server_.reset(); }

  void SetUp() override {
    TALLY_SKIP_UNLESS_POSTGRES();
    if (server_ == nullptr) {
      absl::StatusOr<std::unique_ptr<PgCluster>> pg = PgCluster::Start();
      ASSERT_TRUE(pg.ok()) << pg.status();
      server_ = *std::move(pg);
    }
    pg_ = server_.get();
    ASSERT_TRUE(pg_->Execute("DROP TABLE IF EXISTS users, items, nokey;"
                             "CREATE TABLE users (id bigint PRIMARY KEY, "
                             "name text NOT NULL, score int DEFAULT 7, "
                             "seen timestamptz);"
                             "CREATE TABLE items (order_id int, line int, "
                             "sku text, PRIMARY KEY (line, order_id));"
                             "CREATE TABLE nokey (a int)")
                    .ok());
    rows_ = NewPostgresTableRows(
        pg_->Uri(), std::vector<std::string>{"public.users", "public.items",
                                             "public.nokey"});
  }

  std::string Sql(absl::string_view sql) {
    absl::StatusOr<std::string> out = pg_->Execute(sql);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? *out : "";
  }

  static std::unique_ptr<PgCluster> server_;
  PgCluster* pg_ = nullptr;
  std::unique_ptr<TableRows> rows_;
};

std::unique_ptr<PgCluster> TableRowsTest::server_;

TEST_F(TableRowsTest, PutInsertsThenUpdatesOnlyTheNamedColumns) {
  ASSERT_TRUE(rows_->Put("public.users", {"42"}, R"({"name":"Ada"})").ok());
  // A new row gets the defaults of the columns the JSON leaves out.
  EXPECT_EQ(Sql("SELECT name || ',' || score FROM users WHERE id = 42"),
            "Ada,7");
  ASSERT_TRUE(rows_->Put("public.users", {"42"}, R"({"score":"9"})").ok());
  EXPECT_EQ(Sql("SELECT name || ',' || score FROM users WHERE id = 42"),
            "Ada,9");
  // The key in the JSON may repeat the key values, typed as PostgreSQL
  // reads them ("042" is 42).
  ASSERT_TRUE(
      rows_->Put("public.users", {"42"}, R"({"id":"042","score":1})").ok());
  EXPECT_EQ(Sql("SELECT count(*) || ',' || max(score) FROM users"), "1,1");
}

TEST_F(TableRowsTest, GetAnswersTheRowAsJsonOfTextValues) {
  Sql("INSERT INTO users VALUES (5, 'Grace', NULL, "
      "'2024-01-02 03:04:05+00')");
  absl::StatusOr<std::string> row = rows_->Get("public.users", {"5"});
  ASSERT_TRUE(row.ok()) << row.status();
  EXPECT_THAT(*row, HasSubstr(R"("id" : "5")"));
  EXPECT_THAT(*row, HasSubstr(R"("name" : "Grace")"));
  EXPECT_THAT(*row, HasSubstr(R"("score" : null)"));
  // The JSON get prints is a JSON put takes.
  ASSERT_TRUE(rows_->Put("public.users", {"6"}, *row).code() ==
              absl::StatusCode::kInvalidArgument);  // its id says 5
  Sql("DELETE FROM users");
  ASSERT_TRUE(rows_->Put("public.users", {"5"}, *row).ok());
  EXPECT_EQ(Sql("SELECT name || ',' || (score IS NULL) || ',' || "
                "(seen = '2024-01-02 03:04:05+00') FROM users"),
            "Grace,true,true");
  const absl::Status absent = rows_->Get("public.users", {"6"}).status();
  EXPECT_EQ(absent.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(absent.message()),
              HasSubstr("no row with key (6) in public.users"));
}

// Before: arrays, JSON and composites came out of get as JSON strings of
// their JSON ("[\"a\",\"b c\"]"), which put then refused ("malformed
// array literal") or stored as a JSON string. Now they come out as JSON and
// go back in as the same values.
TEST_F(TableRowsTest, ArraysJsonAndCompositesGoBackInAsTheyCameOut) {
  ASSERT_TRUE(pg_->Execute("DROP TABLE IF EXISTS docs; DROP TYPE IF EXISTS "
                           "pair; CREATE TYPE pair AS (a int, b text);"
                           "CREATE TABLE docs (id int PRIMARY KEY, tags "
                           "text[], grid int[][], doc jsonb, raw json, "
                           "p pair, num jsonb)")
                  .ok());
  Sql("INSERT INTO docs VALUES (1, ARRAY['a', 'b c', NULL, '{x}'], "
      "'{{1,2},{3,4}}', '{\"k\": [1, \"two\"]}', '[true, null]', "
      "ROW(7, 'seven'), '5')");
  std::unique_ptr<TableRows> rows =
      NewPostgresTableRows(pg_->Uri(), {"public.docs"});
  absl::StatusOr<std::string> row = rows->Get("public.docs", {"1"});
  ASSERT_TRUE(row.ok()) << row.status();
  EXPECT_THAT(*row, HasSubstr(R"("tags" : ["a","b c",null,"{x}"])"));
  const std::string before =
      Sql("SELECT md5(d::text) FROM docs d WHERE id = 1");
  Sql("DELETE FROM docs");
  ASSERT_TRUE(rows->Put("public.docs", {"1"}, *row).ok()) << *row;
  EXPECT_EQ(Sql("SELECT md5(d::text) FROM docs d WHERE id = 1"), before)
      << *row;
  EXPECT_EQ(Sql("SELECT jsonb_typeof(num) || ',' || (doc->'k'->>1) FROM "
                "docs"),
            "number,two");
}

TEST_F(TableRowsTest, CompositeKeysTakeOneValuePerColumnInKeyOrder) {
  // The key is (line, order_id): key order, not table order.
  ASSERT_TRUE(rows_->Put("public.items", {"2", "100"}, R"({"sku":"x"})").ok());
  EXPECT_EQ(Sql("SELECT order_id || '/' || line FROM items"), "100/2");
  absl::StatusOr<std::string> row = rows_->Get("public.items", {"2", "100"});
  ASSERT_TRUE(row.ok()) << row.status();
  EXPECT_THAT(*row, HasSubstr(R"("sku" : "x")"));
  const absl::Status one = rows_->Get("public.items", {"2"}).status();
  EXPECT_EQ(one.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(one.message()),
              HasSubstr("primary key of public.items is (line, order_id): "
                        "give 2 key values"));
  ASSERT_TRUE(rows_->Delete("public.items", {"2", "100"}).ok());
  EXPECT_EQ(Sql("SELECT count(*) FROM items"), "0");
  EXPECT_EQ(rows_->Delete("public.items", {"2", "100"}).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(TableRowsTest, RefusesBadArgumentsNamingThem) {
  const absl::Status unknown =
      rows_->Put("public.users", {"1"}, R"({"nmae":"Ada"})");
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unknown.message()), HasSubstr("no column 'nmae'"));
  EXPECT_THAT(std::string(rows_->Put("public.users", {"1"}, "[1,2]").message()),
              HasSubstr("must be a JSON object"));
  EXPECT_EQ(rows_->Put("public.users", {"1"}, "{not json").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rows_->Get("public.users", {"abc"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rows_->Put("public.users", {"1"}, R"({"score":"many"})").code(),
            absl::StatusCode::kInvalidArgument);
  // NOT NULL name: the database's own refusal comes back.
  EXPECT_FALSE(rows_->Put("public.users", {"1"}, R"({"score":3})").ok());
  const absl::Status mismatch =
      rows_->Put("public.users", {"1"}, R"({"id":2,"name":"x"})");
  EXPECT_THAT(std::string(mismatch.message()),
              HasSubstr("key column id is '2' in the JSON but the key says "
                        "'1'"));
  EXPECT_EQ(rows_->Get("public.nokey", {"1"}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Sql("SELECT count(*) FROM users"), "0");
}

// A put is an application write: no replication origin (capture indexes
// it and stamps its version like any other).
TEST_F(TableRowsTest, WritesAreOrdinaryWritesUnderNoOrigin) {
  Sql("SELECT pg_replication_origin_create('tally_someone') WHERE NOT EXISTS "
      "(SELECT FROM pg_replication_origin WHERE roname = 'tally_someone')");
  ASSERT_TRUE(rows_->Put("public.users", {"1"}, R"({"name":"a"})").ok());
  EXPECT_EQ(Sql("SELECT (pg_xact_commit_timestamp_origin(xmin)).roident "
                "FROM users"),
            "0");
  EXPECT_TRUE(rows_->Holds("public.users"));
  EXPECT_FALSE(rows_->Holds("public.other"));
}

}  // namespace
}  // namespace node
}  // namespace tally
