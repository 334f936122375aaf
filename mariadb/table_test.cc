// A MariaDB table and a PostgreSQL table declared with the mapped types,
// holding the same rows, digest alike; their differences are found exactly;
// each side's rows written into the other make them equal. Real throwaway
// servers of both engines.
#include "mariadb/table.h"

#include <memory>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pg/table_diff/table_diff.h"
#include "pg/wire/connection.h"
#include "support/mariadb_test_macros.h"
#include "support/pg_test_macros.h"

namespace tally {
namespace mariadb {
namespace {

using ::testing::HasSubstr;
using testing::MariaDbServer;
using testing::PgCluster;

// The same table in both engines: every mapped type, a composite key with
// text (NO PAD binary collation on the MariaDB side).
constexpr char kPgTable[] = R"sql(
CREATE TABLE public.t (
  id bigint, tag varchar(20),
  i integer, s smallint, n numeric(20,6), f double precision, r real,
  v varchar(40), tx text, b bytea, d date, ts timestamp,
  tz timestamptz, tm time, c character(4), j json,
  PRIMARY KEY (id, tag))
)sql";
constexpr char kMariaTable[] = R"sql(
CREATE TABLE db1.t (
  id bigint, tag varchar(20) COLLATE utf8mb4_nopad_bin,
  i int, s smallint, n decimal(20,6), f double, r float,
  v varchar(40), tx mediumtext, b blob, d date, ts datetime(6),
  tz timestamp(6) NULL DEFAULT NULL, tm time(6), c char(4), j json,
  PRIMARY KEY (id, tag)) DEFAULT CHARSET utf8mb4
)sql";

// Rows both engines take as the same literals (timestamps in UTC).
const std::vector<std::string>& Rows() {
  static const auto* rows = new std::vector<std::string>{
      "(1, 'eu', 42, -7, 12.5, 1e23, 1.5, 'héllo', 'text', 'bytes', "
      "'2024-02-29', '2024-01-01 12:34:56.789012', '2024-01-01 "
      "12:00:00.5', '23:59:59.999999', 'ab', '{\"a\": [1, 2.5]}')",
      "(1, 'us', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
      "NULL, NULL, NULL, NULL, NULL)",
      "(2, '', 0, 0, 0, 0, 0, '', '', '', '1970-01-01', '1999-12-31 "
      "23:59:59', '1970-01-02 00:00:00', '00:00:00', '', '[]')",
      "(-3, 'ü ', -2147483648, -32768, -0.05, -2.5e-300, -3.25, 'x', "
      "'tab\tand\nnewline', 'a', '1000-01-01', '1000-01-01 00:00:00', "
      "'2038-01-19 03:14:07', '12:00:00', 'abcd', 'null')",
  };
  return *rows;
}

class MariaDbTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TALLY_SKIP_UNLESS_POSTGRES();
    TALLY_SKIP_UNLESS_MARIADB();
    absl::StatusOr<std::unique_ptr<MariaDbServer>> m = MariaDbServer::Start();
    ASSERT_TRUE(m.ok()) << m.status();
    maria_ = *std::move(m);
    absl::StatusOr<std::unique_ptr<PgCluster>> p = PgCluster::Start();
    ASSERT_TRUE(p.ok()) << p.status();
    pg_ = *std::move(p);
    ASSERT_TRUE(maria_->Execute("CREATE DATABASE db1").ok());
    ASSERT_TRUE(maria_->Execute(kMariaTable).ok());
    ASSERT_TRUE(pg_->Execute(kPgTable).ok());
    std::string values = absl::StrJoin(Rows(), ", ");
    // A large value on one row (several pages in both engines).
    absl::StatusOr<std::string> inserted = maria_->Execute(absl::StrCat(
        "SET time_zone = '+00:00'; INSERT INTO db1.t VALUES ", values,
        "; UPDATE db1.t SET tx = REPEAT('z', 100000) WHERE id = 2"));
    ASSERT_TRUE(inserted.ok()) << inserted.status();
    inserted = pg_->Execute(absl::StrCat(
        "SET TimeZone = 'UTC'; INSERT INTO public.t VALUES ", values,
        "; UPDATE public.t SET tx = repeat('z', 100000) WHERE id = 2"));
    ASSERT_TRUE(inserted.ok()) << inserted.status();
    absl::StatusOr<MariaDbTarget> target = ParseMariaDbUrl(maria_->Url("db1"));
    ASSERT_TRUE(target.ok());
    absl::StatusOr<std::unique_ptr<Connection>> c =
        Connection::Open(*target, absl::Seconds(30));
    ASSERT_TRUE(c.ok()) << c.status();
    conn_ = *std::move(c);
    absl::StatusOr<std::unique_ptr<pg::Connection>> pc =
        pg::Connection::Open(pg_->Uri(), pg::ConnectOptions{});
    ASSERT_TRUE(pc.ok()) << pc.status();
    pg_conn_ = *std::move(pc);
  }

  MariaDbTable ReadMaria() {
    absl::StatusOr<MariaDbTable> t = MariaDbTable::Read(*conn_, "db1.t");
    EXPECT_TRUE(t.ok()) << t.status();
    return *std::move(t);
  }
  pg::TableSchema ReadPg() {
    absl::StatusOr<pg::TableSchema> s =
        pg::TableSchema::Read(*pg_conn_, "public.t");
    EXPECT_TRUE(s.ok()) << s.status();
    return *std::move(s);
  }
  pg::TableScan ScanMaria(const MariaDbTable& t) {
    absl::StatusOr<pg::TableScan> s = t.Scan(*conn_, "t", "", nullptr);
    EXPECT_TRUE(s.ok()) << s.status();
    return *std::move(s);
  }
  pg::TableScan ScanPg(const pg::TableSchema& schema) {
    absl::StatusOr<pg::TableScan> s =
        pg::TableScan::Run(*pg_conn_, schema, "t");
    EXPECT_TRUE(s.ok()) << s.status();
    return *std::move(s);
  }
  std::vector<std::string> DifferingKeys(const pg::TableScan& a,
                                         const pg::TableScan& b) {
    std::vector<std::string> keys;
    for (const pg::RowDifference& d : pg::CompareScans(a, b)) {
      keys.push_back(d.key);
    }
    return keys;
  }
  std::string KeyText(const MariaDbTable& t, const std::string& key) {
    absl::StatusOr<std::vector<std::optional<std::string>>> texts =
        t.KeyTexts(key);
    EXPECT_TRUE(texts.ok()) << texts.status();
    std::vector<std::string> parts;
    for (const auto& p : *texts) parts.push_back(p.value_or("NULL"));
    return absl::StrJoin(parts, "/");
  }

  std::unique_ptr<MariaDbServer> maria_;
  std::unique_ptr<PgCluster> pg_;
  std::unique_ptr<Connection> conn_;
  std::unique_ptr<pg::Connection> pg_conn_;
};

TEST_F(MariaDbTableTest, SameRowsInBothEnginesDigestAlike) {
  const MariaDbTable maria = ReadMaria();
  const pg::TableSchema pg_schema = ReadPg();
  EXPECT_EQ(maria.schema().description(), pg_schema.description());
  EXPECT_EQ(maria.schema().fingerprint(), pg_schema.fingerprint());
  const pg::TableScan a = ScanMaria(maria);
  const pg::TableScan b = ScanPg(pg_schema);
  EXPECT_EQ(a.rows(), Rows().size());
  EXPECT_EQ(a.rows(), b.rows());
  EXPECT_EQ(a.root(), b.root());
  EXPECT_TRUE(pg::CompareScans(a, b).empty());
}

TEST_F(MariaDbTableTest, FindsExactlyTheKeysThatDiffer) {
  ASSERT_TRUE(maria_
                  ->Execute("UPDATE db1.t SET n = 12.500001 WHERE id = 1 AND "
                            "tag = 'eu'; DELETE FROM db1.t WHERE id = -3; "
                            "INSERT INTO db1.t (id, tag) VALUES (9, 'new'); "
                            "UPDATE db1.t SET c = '  ' WHERE id = 2")
                  .ok());
  const MariaDbTable maria = ReadMaria();
  std::vector<std::string> texts;
  for (const std::string& key :
       DifferingKeys(ScanMaria(maria), ScanPg(ReadPg()))) {
    texts.push_back(KeyText(maria, key));
  }
  // char(4) '  ' is '' padded: the same value, not a difference.
  EXPECT_THAT(texts, ::testing::UnorderedElementsAre("1/eu", "-3/ü ", "9/new"));
}

TEST_F(MariaDbTableTest, RowsWrittenEachWayMakeTheTablesEqual) {
  ASSERT_TRUE(maria_
                  ->Execute("UPDATE db1.t SET v = 'changed', b = 0x00ff WHERE "
                            "id = 1; DELETE FROM db1.t WHERE id = 2; INSERT "
                            "INTO db1.t (id, tag, n) VALUES (7, 'x', 1.5)")
                  .ok());
  const MariaDbTable maria = ReadMaria();
  const pg::TableSchema pg_schema = ReadPg();
  const std::vector<std::string> keys =
      DifferingKeys(ScanMaria(maria), ScanPg(pg_schema));
  ASSERT_EQ(keys.size(), 4u);
  // PostgreSQL's rows into MariaDB.
  absl::StatusOr<std::vector<pg::CanonicalRow>> pg_rows =
      pg::ReadRowsByKey(*pg_conn_, pg_schema, keys);
  ASSERT_TRUE(pg_rows.ok()) << pg_rows.status();
  absl::StatusOr<MariaDbTable::WriteCounts> wrote =
      maria.WriteRows(*conn_, keys, *pg_rows);
  ASSERT_TRUE(wrote.ok()) << wrote.status();
  EXPECT_EQ(wrote->upserted, 3u);
  EXPECT_EQ(wrote->deleted, 1u);
  EXPECT_EQ(ScanMaria(maria).root(), ScanPg(pg_schema).root());
  // And MariaDB's changed rows back into PostgreSQL.
  ASSERT_TRUE(maria_
                  ->Execute("SET time_zone = '+00:00'; UPDATE db1.t SET tz = "
                            "'2030-06-01 10:00:00.25', "
                            "f = 0.1 WHERE id = -3")
                  .ok());
  const std::vector<std::string> changed =
      DifferingKeys(ScanMaria(maria), ScanPg(pg_schema));
  ASSERT_EQ(changed.size(), 1u);
  absl::StatusOr<std::vector<pg::CanonicalRow>> maria_rows =
      maria.ReadRowsByKey(*conn_, changed);
  ASSERT_TRUE(maria_rows.ok()) << maria_rows.status();
  ASSERT_EQ(maria_rows->size(), 1u);
  absl::StatusOr<pg::RepairCounts> back =
      pg::WriteRows(*pg_conn_, pg_schema, changed, *maria_rows);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ScanMaria(maria).root(), ScanPg(pg_schema).root());
  absl::StatusOr<std::string> pg_tz = pg_->Execute(
      "SELECT tz AT TIME ZONE 'UTC', f FROM public.t WHERE id = -3");
  ASSERT_TRUE(pg_tz.ok());
  EXPECT_EQ(*pg_tz, "2030-06-01 10:00:00.25|0.1");
}

TEST_F(MariaDbTableTest, AValueMariaDbCannotHoldFailsTheWholeWrite) {
  ASSERT_TRUE(pg_->Execute("UPDATE public.t SET f = 'NaN' WHERE id = 2; "
                           "UPDATE public.t SET v = 'pg' WHERE id = 1")
                  .ok());
  const MariaDbTable maria = ReadMaria();
  const pg::TableSchema pg_schema = ReadPg();
  const pg::TableScan before = ScanMaria(maria);
  const std::vector<std::string> keys =
      DifferingKeys(before, ScanPg(pg_schema));
  ASSERT_EQ(keys.size(), 3u);
  absl::StatusOr<std::vector<pg::CanonicalRow>> rows =
      pg::ReadRowsByKey(*pg_conn_, pg_schema, keys);
  ASSERT_TRUE(rows.ok()) << rows.status();
  absl::StatusOr<MariaDbTable::WriteCounts> wrote =
      maria.WriteRows(*conn_, keys, *rows);
  ASSERT_FALSE(wrote.ok());
  EXPECT_EQ(wrote.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(wrote.status().message(), HasSubstr("column f"));
  EXPECT_THAT(wrote.status().message(), HasSubstr("NaN"));
  EXPECT_EQ(ScanMaria(maria).root(), before.root());
}

TEST_F(MariaDbTableTest, ARowPostgresCannotHoldIsRefusedNamingTheColumn) {
  ASSERT_TRUE(maria_
                  ->Execute("SET SESSION sql_mode = ''; INSERT INTO db1.t "
                            "(id, tag, d) VALUES (5, 'zero', '0000-00-00')")
                  .ok());
  const MariaDbTable maria = ReadMaria();
  absl::StatusOr<pg::TableScan> s = maria.Scan(*conn_, "t", "", nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(s.status().message(), HasSubstr("column d"));
  EXPECT_THAT(s.status().message(), HasSubstr("zero date"));
}

TEST_F(MariaDbTableTest, ColumnsThatDoNotMapAreAllNamed) {
  ASSERT_TRUE(maria_
                  ->Execute("CREATE TABLE db1.bad (k varchar(10) PRIMARY KEY, "
                            "e enum('a','b'), u bigint unsigned, ok int) "
                            "DEFAULT CHARSET utf8mb4 COLLATE "
                            "utf8mb4_general_ci; CREATE TABLE db1.nokey (a "
                            "int)")
                  .ok());
  absl::StatusOr<MariaDbTable> bad = MariaDbTable::Read(*conn_, "db1.bad");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition);
  for (const char* named : {"`k`", "utf8mb4_general_ci", "`e`", "enum", "`u`",
                            "bigint(20) unsigned"}) {
    EXPECT_THAT(bad.status().message(), HasSubstr(named));
  }
  EXPECT_THAT(bad.status().message(), ::testing::Not(HasSubstr("`ok`")));
  absl::StatusOr<MariaDbTable> nokey = MariaDbTable::Read(*conn_, "db1.nokey");
  ASSERT_FALSE(nokey.ok());
  EXPECT_THAT(nokey.status().message(), HasSubstr("no primary key"));
  absl::StatusOr<MariaDbTable> missing =
      MariaDbTable::Read(*conn_, "db1.missing");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(MariaDbTableTest, TableWithOnlyKeyColumnsIsRepairedToo) {
  ASSERT_TRUE(maria_
                  ->Execute("CREATE TABLE db1.k (id bigint PRIMARY KEY); "
                            "INSERT INTO db1.k VALUES (1), (2)")
                  .ok());
  absl::StatusOr<MariaDbTable> t = MariaDbTable::Read(*conn_, "db1.k");
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<std::vector<pg::CanonicalRow>> rows = t->ReadRowsByKey(
      *conn_, {std::string("\0\0\0\x08\0\0\0\0\0\0\0\x01", 12)});
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 1u);
  absl::StatusOr<MariaDbTable::WriteCounts> w =
      t->WriteRows(*conn_, {rows->at(0).key}, *rows);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(*maria_->Execute("SELECT COUNT(*) FROM db1.k"), "2");
}

}  // namespace
}  // namespace mariadb
}  // namespace tally
