#include "node/sidecar/mariadb_table_rows.h"

#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/mariadb_server.h"
#include "support/mariadb_test_macros.h"

namespace tally {
namespace node {
namespace {

using ::tally::testing::MariaDbServer;
using ::testing::HasSubstr;

// One server for the suite (a start costs seconds on a busy machine); each
// test makes its tables afresh.
class MariaDbTableRowsTest : public ::testing::Test {
 protected:
  static void TearDownTestSuite() { server_.reset(); }

  void SetUp() override {
    TALLY_SKIP_UNLESS_MARIADB();
    if (server_ == nullptr) {
      absl::StatusOr<std::unique_ptr<MariaDbServer>> db =
          MariaDbServer::Start();
      ASSERT_TRUE(db.ok()) << db.status();
      server_ = *std::move(db);
    }
    ASSERT_TRUE(server_
                    ->Execute("DROP DATABASE IF EXISTS db1; CREATE DATABASE "
                              "db1 DEFAULT CHARSET utf8mb4;"
                              "CREATE TABLE db1.users (id bigint PRIMARY KEY, "
                              "name varchar(8) NOT NULL, score int DEFAULT 7, "
                              "seen datetime(6), price decimal(10,2));"
                              "CREATE TABLE db1.items (order_id int, line int, "
                              "sku text, PRIMARY KEY (line, order_id));"
                              "CREATE TABLE db1.docs (id varbinary(8) PRIMARY "
                              "KEY, body blob, doc json);"
                              "CREATE TABLE db1.nokey (a int)")
                    .ok());
    absl::StatusOr<std::unique_ptr<TableRows>> rows = NewMariaDbTableRows(
        server_->Url("db1"),
        {"db1.users", "db1.items", "db1.docs", "db1.nokey"});
    ASSERT_TRUE(rows.ok()) << rows.status();
    rows_ = *std::move(rows);
  }

  std::string Sql(absl::string_view sql) {
    absl::StatusOr<std::string> out = server_->Execute(sql);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? *out : "";
  }

  static std::unique_ptr<MariaDbServer> server_;
  std::unique_ptr<TableRows> rows_;
};

std::unique_ptr<MariaDbServer> MariaDbTableRowsTest::server_;

TEST_F(MariaDbTableRowsTest, PutInsertsThenUpdatesOnlyTheNamedColumns) {
  ASSERT_TRUE(rows_->Put("db1.users", {"42"}, R"({"name":"Ada"})").ok());
  // A new row gets the defaults of the columns the JSON leaves out.
  EXPECT_EQ(Sql("SELECT CONCAT(name, ',', score) FROM db1.users WHERE id = "
                "42"),
            "Ada,7");
  ASSERT_TRUE(rows_->Put("db1.users", {"42"}, R"({"score":"9"})").ok());
  EXPECT_EQ(Sql("SELECT CONCAT(name, ',', score) FROM db1.users WHERE id = "
                "42"),
            "Ada,9");
  // The key in the JSON may repeat the key values ("042" is 42), and
  // numbers are taken as the digits written.
  ASSERT_TRUE(rows_
                  ->Put("db1.users", {"42"},
                        R"({"id":"042","score":1,"price":12345678.91})")
                  .ok());
  EXPECT_EQ(Sql("SELECT CONCAT(count(*), ',', max(score), ',', max(price)) "
                "FROM db1.users"),
            "1,1,12345678.91");
}

TEST_F(MariaDbTableRowsTest, GetAnswersTheRowAsJsonThatPutTakesBack) {
  Sql("INSERT INTO db1.users VALUES (5, 'Gr\"a\\\\ce', NULL, "
      "'2024-01-02 03:04:05.250000', -1.5)");
  absl::StatusOr<std::string> row = rows_->Get("db1.users", {"5"});
  ASSERT_TRUE(row.ok()) << row.status();
  EXPECT_THAT(*row, HasSubstr(R"("id" : "5")"));
  EXPECT_THAT(*row, HasSubstr(R"("name" : "Gr\"a\\ce")"));
  EXPECT_THAT(*row, HasSubstr(R"("score" : null)"));
  EXPECT_THAT(*row, HasSubstr(R"("seen" : "2024-01-02 03:04:05.250000")"));
  const std::string before =
      Sql("SELECT MD5(CONCAT_WS('|', id, name, COALESCE(score, 'NULL'), seen, "
          "price)) FROM db1.users");
  // Its id says 5.
  EXPECT_EQ(rows_->Put("db1.users", {"6"}, *row).code(),
            absl::StatusCode::kInvalidArgument);
  Sql("DELETE FROM db1.users");
  ASSERT_TRUE(rows_->Put("db1.users", {"5"}, *row).ok()) << *row;
  EXPECT_EQ(Sql("SELECT MD5(CONCAT_WS('|', id, name, COALESCE(score, "
                "'NULL'), seen, price)) FROM db1.users"),
            before);
  const absl::Status absent = rows_->Get("db1.users", {"6"}).status();
  EXPECT_EQ(absent.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(absent.message()),
              HasSubstr("no row with key (6) in db1.users"));
}

TEST_F(MariaDbTableRowsTest, BinaryAndJsonGoBackInAsTheyCameOut) {
  Sql("INSERT INTO db1.docs VALUES (X'00ff41', X'0a0b0c00', "
      "'{\"k\": [1, \"two\"]}')");
  absl::StatusOr<std::string> row = rows_->Get("db1.docs", {"\\x00FF41"});
  ASSERT_TRUE(row.ok()) << row.status();
  EXPECT_THAT(*row, HasSubstr(R"("id" : "\\x00ff41")"));
  EXPECT_THAT(*row, HasSubstr(R"("body" : "\\x0a0b0c00")"));
  EXPECT_THAT(*row, HasSubstr(R"("doc" : {"k": [1, "two"]})"));
  const std::string before =
      Sql("SELECT MD5(CONCAT_WS('|', HEX(id), HEX(body), doc)) FROM db1.docs");
  Sql("DELETE FROM db1.docs");
  ASSERT_TRUE(rows_->Put("db1.docs", {"\\x00ff41"}, *row).ok()) << *row;
  EXPECT_EQ(
      Sql("SELECT MD5(CONCAT_WS('|', HEX(id), HEX(body), doc)) FROM db1.docs"),
      before);
  const absl::Status not_hex =
      rows_->Put("db1.docs", {"\\x00ff41"}, R"({"body":"abc"})");
  EXPECT_EQ(not_hex.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(not_hex.message()), HasSubstr("is binary"));
}

TEST_F(MariaDbTableRowsTest, CompositeKeysTakeOneValuePerColumnInKeyOrder) {
  // The key is (line, order_id): key order, not table order.
  ASSERT_TRUE(rows_->Put("db1.items", {"2", "100"}, R"({"sku":"x"})").ok());
  EXPECT_EQ(Sql("SELECT CONCAT(order_id, '/', line) FROM db1.items"), "100/2");
  absl::StatusOr<std::string> row = rows_->Get("db1.items", {"2", "100"});
  ASSERT_TRUE(row.ok()) << row.status();
  EXPECT_THAT(*row, HasSubstr(R"("sku" : "x")"));
  const absl::Status one = rows_->Get("db1.items", {"2"}).status();
  EXPECT_EQ(one.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(one.message()),
              HasSubstr("primary key of db1.items is (line, order_id): "
                        "give 2 key values"));
  ASSERT_TRUE(rows_->Delete("db1.items", {"2", "100"}).ok());
  EXPECT_EQ(Sql("SELECT count(*) FROM db1.items"), "0");
  EXPECT_EQ(rows_->Delete("db1.items", {"2", "100"}).code(),
            absl::StatusCode::kNotFound);
}

// The server would take '12abc' as 12 and 'many' as 0 with a warning, and
// cut a long string to fit: each would write or delete a row nobody named.
TEST_F(MariaDbTableRowsTest, RefusesBadArgumentsNamingThemAndWritesNothing) {
  Sql("INSERT INTO db1.users (id, name) VALUES (12, 'keep')");
  const absl::Status unknown =
      rows_->Put("db1.users", {"1"}, R"({"nmae":"Ada"})");
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unknown.message()), HasSubstr("no column 'nmae'"));
  EXPECT_THAT(std::string(rows_->Put("db1.users", {"1"}, "[1,2]").message()),
              HasSubstr("must be a JSON object"));
  EXPECT_EQ(rows_->Put("db1.users", {"1"}, "{not json").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rows_->Get("db1.users", {"12abc"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rows_->Delete("db1.users", {"12abc"}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rows_->Put("db1.users", {"1"}, R"({"score":"many"})").code(),
            absl::StatusCode::kInvalidArgument);
  // Too long for varchar(8), and a new row without its NOT NULL name: the
  // server's own refusal, nothing written.
  const absl::Status long_name =
      rows_->Put("db1.users", {"1"}, R"({"name":"much too long"})");
  EXPECT_EQ(long_name.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(long_name.message()), HasSubstr("db1.users"));
  EXPECT_EQ(rows_->Put("db1.users", {"1"}, R"({"score":3})").code(),
            absl::StatusCode::kInvalidArgument);
  const absl::Status mismatch =
      rows_->Put("db1.users", {"1"}, R"({"id":2,"name":"x"})");
  EXPECT_THAT(std::string(mismatch.message()),
              HasSubstr("key column id is '2' in the JSON but the key says "
                        "'1'"));
  EXPECT_EQ(rows_->Get("db1.nokey", {"1"}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Sql("SELECT GROUP_CONCAT(CONCAT(id, name)) FROM db1.users"),
            "12keep");
  EXPECT_TRUE(rows_->Holds("db1.users"));
  EXPECT_FALSE(rows_->Holds("db1.other"));
}

}  // namespace
}  // namespace node
}  // namespace tally
