// `tally diff URL URL` and `tally repair URL URL` with MariaDB URLs, through
// the real CLI, against throwaway MariaDB and PostgreSQL servers: a
// PostgreSQL table and a MariaDB table holding the same rows diff equal,
// their differences are listed exactly, and either repairs the other —
// equality checked by each database's own md5 over its ordered rows, not
// by tally alone.
#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/mariadb_server.h"
#include "support/mariadb_test_macros.h"
#include "support/pg_cluster.h"
#include "support/pg_test_macros.h"
#include "support/process.h"

namespace tally {
namespace {

using ::tally::testing::CommandResult;
using ::tally::testing::MariaDbServer;
using ::tally::testing::MariaDbServerOptions;
using ::tally::testing::PgCluster;
using ::tally::testing::RunTally;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

// The table in both engines, with the rows 1..kRows.
constexpr int kRows = 2000;
constexpr char kPgTable[] =
    "CREATE TABLE public.t (id bigint PRIMARY KEY, name varchar(40), "
    "price numeric(12,2), note text, at timestamp); INSERT INTO public.t "
    "SELECT g, 'n' || g, g * 1.25, CASE WHEN g % 7 = 0 THEN NULL ELSE "
    "repeat('x', g % 50) END, timestamp '2026-01-01' + g * interval '1 "
    "second' FROM generate_series(1, 2000) g";
constexpr char kMariaTable[] =
    "CREATE DATABASE db1; CREATE TABLE db1.t (id bigint PRIMARY KEY, name "
    "varchar(40), price decimal(12,2), note text, at datetime(6)) DEFAULT "
    "CHARSET utf8mb4; INSERT INTO db1.t SELECT seq, CONCAT('n', seq), seq * "
    "1.25, IF(seq % 7 = 0, NULL, REPEAT('x', seq % 50)), TIMESTAMP "
    "'2026-01-01 00:00:00' + INTERVAL seq SECOND FROM db1.seq_1_to_2000";

// md5 over the ordered rows, the same text in both engines.
constexpr char kPgMd5[] =
    "SELECT md5(string_agg(concat_ws('|', id, name, price, coalesce(note, "
    "'NULL'), to_char(at, 'YYYY-MM-DD HH24:MI:SS')), ',' ORDER BY id)) FROM "
    "public.t";
constexpr char kMariaMd5[] =
    "SET SESSION group_concat_max_len = 1 << 30; SELECT "
    "MD5(GROUP_CONCAT(CONCAT_WS('|', id, name, price, COALESCE(note, "
    "'NULL'), DATE_FORMAT(at, '%Y-%m-%d %H:%i:%s')) ORDER BY id SEPARATOR "
    "',')) FROM db1.t";

// Exactly one line on stderr, "tally: ...".
void ExpectOneTroubleLine(const CommandResult& r) {
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_TRUE(absl::StartsWith(r.err, "tally: ")) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// The key column of each "KEY  kind" line of a diff's output.
std::vector<std::string> DifferenceLines(const std::string& out) {
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    if (absl::StrContains(line, "  only in ") ||
        absl::EndsWith(line, "  differs")) {
      lines.emplace_back(line);
    }
  }
  return lines;
}

class MariaDbDiffCli : public ::testing::Test {
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
    absl::StatusOr<std::string> made = maria_->Execute(kMariaTable);
    ASSERT_TRUE(made.ok()) << made.status();
    made = pg_->Execute(kPgTable);
    ASSERT_TRUE(made.ok()) << made.status();
  }
  std::string Maria(const std::string& sql) {
    absl::StatusOr<std::string> r = maria_->Execute(sql);
    EXPECT_TRUE(r.ok()) << r.status() << "\n" << sql;
    return r.ok() ? *r : "";
  }
  std::string Pg(const std::string& sql) {
    absl::StatusOr<std::string> r = pg_->Execute(sql);
    EXPECT_TRUE(r.ok()) << r.status() << "\n" << sql;
    return r.ok() ? *r : "";
  }
  std::string MariaUrl() { return maria_->Url("db1") + "?table=db1.t"; }
  std::string PgUrl() { return pg_->Uri() + "?table=public.t"; }

  std::unique_ptr<MariaDbServer> maria_;
  std::unique_ptr<PgCluster> pg_;
};

TEST_F(MariaDbDiffCli, SameRowsInBothEnginesAreEqual) {
  ASSERT_EQ(Pg(kPgMd5), Maria(kMariaMd5));  // the test's own premise
  CommandResult r = RunTally({"diff", PgUrl(), MariaUrl()});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("equal: table public.t vs db1.t"));
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("(", kRows, " rows, root")));
  // Either order, and JSON.
  r = RunTally({"diff", MariaUrl(), PgUrl(), "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"differences\":0"));
  EXPECT_THAT(r.out, HasSubstr("\"transfer\":\"rows\""));
}

TEST_F(MariaDbDiffCli, ListsExactlyTheDifferingKeysThenRepairsEachWay) {
  Maria(
      "UPDATE db1.t SET price = price + 0.01 WHERE id = 10; DELETE FROM "
      "db1.t WHERE id = 20; INSERT INTO db1.t (id, name) VALUES (5000, "
      "'new'); UPDATE db1.t SET note = NULL WHERE id = 30");
  Pg("UPDATE public.t SET at = at + interval '1 microsecond' WHERE id = 40");
  CommandResult r = RunTally({"diff", PgUrl(), MariaUrl()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(
      DifferenceLines(r.out),
      UnorderedElementsAre("10  differs", "20  only in a", "5000  only in b",
                           "30  differs", "40  differs"));
  EXPECT_THAT(r.out, HasSubstr("5 keys differ"));

  // PostgreSQL's rows into MariaDB: the databases' own md5s then agree.
  r = RunTally({"repair", PgUrl(), MariaUrl(), "--source=A"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("4 rows upserted into b, 1 deleted"));
  EXPECT_THAT(r.out, HasSubstr("all equal"));
  EXPECT_EQ(Pg(kPgMd5), Maria(kMariaMd5));
  EXPECT_EQ(RunTally({"diff", PgUrl(), MariaUrl()}).exit_code, 0);

  // And MariaDB's into PostgreSQL.
  Maria(
      "UPDATE db1.t SET name = 'renamed', at = '2030-01-01 00:00:00.5' "
      "WHERE id = 7; INSERT INTO db1.t VALUES (6000, 'x', 1.5, 'é', NULL)");
  r = RunTally({"repair", PgUrl(), MariaUrl(), "--source=B"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("2 rows upserted into a, 0 deleted"));
  EXPECT_EQ(Pg("SELECT name, at FROM public.t WHERE id = 7"),
            "renamed|2030-01-01 00:00:00.5");
  EXPECT_EQ(Pg(kPgMd5), Maria(kMariaMd5));
}

TEST_F(MariaDbDiffCli, TwoMariaDbDatabasesDiffAndRepair) {
  absl::StatusOr<std::unique_ptr<MariaDbServer>> other = MariaDbServer::Start();
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_TRUE((*other)->Execute(kMariaTable).ok());
  ASSERT_TRUE(
      (*other)->Execute("DELETE FROM db1.t WHERE id BETWEEN 100 AND 199").ok());
  // No table named: every table with a primary key in the URLs' databases.
  CommandResult r =
      RunTally({"diff", maria_->Url("db1"), (*other)->Url("db1")});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(DifferenceLines(r.out).size(), 100u);
  r = RunTally(
      {"repair", maria_->Url("db1"), (*other)->Url("db1"), "--source=a"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  // MariaDB's own check: CHECKSUM TABLE of both.
  const std::string sum = "CHECKSUM TABLE db1.t";
  EXPECT_EQ(Maria(sum), *(*other)->Execute(sum));
}

TEST_F(MariaDbDiffCli, DryRunChangesNothing) {
  Maria("DELETE FROM db1.t WHERE id <= 3");
  const std::string before = Maria(kMariaMd5);
  CommandResult r =
      RunTally({"repair", PgUrl(), MariaUrl(), "--source=A", "--dry-run"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("would upsert 3 rows into b"));
  EXPECT_EQ(Maria(kMariaMd5), before);
}

TEST_F(MariaDbDiffCli, TypesThatDoNotMapAreNamedWithTheFix) {
  Maria(
      "CREATE TABLE db1.u (id bigint PRIMARY KEY, mood enum('ok','sad'), "
      "big bigint unsigned)");
  Pg("CREATE TABLE public.u (id bigint PRIMARY KEY, mood text, big numeric)");
  CommandResult r = RunTally({"diff", pg_->Uri() + "?table=public.u",
                              maria_->Url("db1") + "?table=db1.u"});
  ExpectOneTroubleLine(r);
  EXPECT_THAT(r.err, HasSubstr("b (mariadb://root@127.0.0.1:"));
  EXPECT_THAT(r.err, HasSubstr("column `mood`"));
  EXPECT_THAT(r.err, HasSubstr("column `big`"));
  EXPECT_THAT(r.err, HasSubstr("use varchar"));
}

TEST_F(MariaDbDiffCli, SchemasThatDifferAreNamedByColumn) {
  Maria("ALTER TABLE db1.t MODIFY price decimal(14,2)");
  CommandResult r = RunTally({"diff", PgUrl(), MariaUrl()});
  ExpectOneTroubleLine(r);
  EXPECT_THAT(r.err, HasSubstr("column price:"));
  EXPECT_THAT(r.err, HasSubstr("numeric(12,2) in a"));
  EXPECT_THAT(r.err, HasSubstr("numeric(14,2) in b"));
}

TEST_F(MariaDbDiffCli, ARowTheTargetRefusesChangesNothing) {
  // PostgreSQL holds a price MariaDB's CHECK refuses; another row differs
  // too. A repair that cannot write every row writes none.
  Pg("UPDATE public.t SET price = 9999999999.99 WHERE id = 1; UPDATE "
     "public.t SET name = 'changed' WHERE id = 2");
  Maria("ALTER TABLE db1.t ADD CONSTRAINT small CHECK (price < 1000000)");
  const std::string before = Maria(kMariaMd5);
  CommandResult r = RunTally({"repair", PgUrl(), MariaUrl(), "--source=A"});
  ExpectOneTroubleLine(r);
  EXPECT_THAT(r.err, HasSubstr("b unchanged"));
  EXPECT_THAT(r.err, HasSubstr("small"));
  EXPECT_EQ(Maria(kMariaMd5), before);
}

TEST_F(MariaDbDiffCli,
       BadCredentialsAndDeadServersAreOneLineWithoutThePassword) {
  Maria(
      "CREATE USER 'tally'@'127.0.0.1' IDENTIFIED BY 'right-secret'; "
      "GRANT SELECT ON db1.* TO 'tally'@'127.0.0.1'");
  CommandResult r =
      RunTally({"diff", PgUrl(),
                maria_->Url("db1", "tally", "wrong-secret") + "?table=db1.t"});
  ExpectOneTroubleLine(r);
  EXPECT_THAT(r.err, HasSubstr("Access denied"));
  EXPECT_THAT(r.err, Not(HasSubstr("wrong-secret")));
  // SELECT only: the diff works, the repair names the missing privilege.
  const std::string reader =
      maria_->Url("db1", "tally", "right-secret") + "?table=db1.t";
  Maria("DELETE FROM db1.t WHERE id = 1");
  EXPECT_EQ(RunTally({"diff", PgUrl(), reader}).exit_code, 1);
  r = RunTally({"repair", PgUrl(), reader, "--source=A"});
  ExpectOneTroubleLine(r);
  EXPECT_THAT(r.err, HasSubstr("command denied"));
  EXPECT_THAT(r.err, Not(HasSubstr("right-secret")));
  ASSERT_TRUE(maria_->Kill().ok());
  r = RunTally({"diff", PgUrl(), MariaUrl()});
  ExpectOneTroubleLine(r);
  EXPECT_THAT(r.err, HasSubstr("cannot connect"));
}

TEST_F(MariaDbDiffCli, ServerKilledMidScanIsTroubleNotEqual) {
  // Two MariaDB servers, each row read after a 1 ms sleep (the condition):
  // the scans take two seconds, and one server dies half a second in.
  absl::StatusOr<std::unique_ptr<MariaDbServer>> other = MariaDbServer::Start();
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_TRUE((*other)->Execute(kMariaTable).ok());
  std::thread killer([&] {
    absl::SleepFor(absl::Milliseconds(500));
    (void)maria_->Kill();
  });
  CommandResult r = RunTally({"diff", (*other)->Url("db1") + "?table=db1.t",
                              MariaUrl(), "--where", "SLEEP(0.001) = 0"});
  killer.join();
  ExpectOneTroubleLine(r);
  EXPECT_THAT(r.err, HasSubstr("b (mariadb://"));
  EXPECT_THAT(r.err, HasSubstr("connection"));
  EXPECT_THAT(r.err, Not(HasSubstr("(error 0)")));
  EXPECT_THAT(r.out, Not(HasSubstr("equal")));
}

}  // namespace
}  // namespace tally
