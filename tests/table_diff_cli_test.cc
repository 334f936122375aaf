// `tally diff URL URL` and `tally repair URL URL` through the real CLI,
// against throwaway PostgreSQL servers: exit codes, output, and the
// one-line trouble messages an operator sees.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/pg_cluster.h"
#include "support/pg_test_macros.h"
#include "support/process.h"
#include "support/tcp_proxy.h"
#include "support/temp_dir.h"

namespace tally {
namespace {

using ::tally::testing::CommandResult;
using ::tally::testing::PgCluster;
using ::tally::testing::PgClusterOptions;
using ::tally::testing::RunCommand;
using ::tally::testing::RunTally;
using ::tally::testing::TallyPath;
using ::tally::testing::TcpProxy;
using ::tally::testing::TempDir;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::Not;

std::unique_ptr<PgCluster> StartCluster(PgClusterOptions options = {}) {
  absl::StatusOr<std::unique_ptr<PgCluster>> pg = PgCluster::Start(options);
  EXPECT_TRUE(pg.ok()) << pg.status();
  return pg.ok() ? *std::move(pg) : nullptr;
}

std::string Sql(PgCluster& pg, const std::string& sql) {
  absl::StatusOr<std::string> r = pg.Execute(sql);
  EXPECT_TRUE(r.ok()) << r.status() << "\n" << sql;
  return r.ok() ? *r : "";
}

// Exactly one line on stderr, "tally: ...".
void ExpectOneTroubleLine(const CommandResult& r) {
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_TRUE(absl::StartsWith(r.err, "tally: ")) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

class TableDiffCli : public ::testing::Test {
 protected:
  void SetUp() override {
    TALLY_SKIP_UNLESS_POSTGRES();
    a_ = StartCluster();
    b_ = StartCluster();
    ASSERT_TRUE(a_ && b_);
    for (PgCluster* pg : {a_.get(), b_.get()}) {
      Sql(*pg,
          "CREATE TABLE t (id bigint PRIMARY KEY, a int, b text, c "
          "timestamptz); INSERT INTO t SELECT g, g, md5(g::text), "
          "'2026-01-01Z' FROM generate_series(1, 500) g");
    }
  }
  std::string UrlA(const std::string& query = "?table=public.t") {
    return a_->Uri() + query;
  }
  std::string UrlB(const std::string& query = "") { return b_->Uri() + query; }

  std::unique_ptr<PgCluster> a_;
  std::unique_ptr<PgCluster> b_;
};

TEST_F(TableDiffCli, EqualTablesExitZero) {
  const CommandResult r = RunTally({"diff", UrlA(), UrlB()});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("equal: table public.t"));
  EXPECT_THAT(r.out, HasSubstr("500 rows"));
}

TEST_F(TableDiffCli, DifferentTablesListTheKeysAndExitOne) {
  Sql(*b_,
      "UPDATE t SET a = 0 WHERE id = 42; DELETE FROM t WHERE id = 7; "
      "INSERT INTO t VALUES (9001, 1, 'x', now())");
  const CommandResult r = RunTally({"diff", UrlA(), UrlB()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("42  differs\n"));
  EXPECT_THAT(r.out, HasSubstr("7  only in a\n"));
  EXPECT_THAT(r.out, HasSubstr("9001  only in b\n"));
  EXPECT_THAT(r.out, HasSubstr("3 keys differ: table public.t"));

  const CommandResult j = RunTally({"diff", "--json", UrlA(), UrlB()});
  EXPECT_EQ(j.exit_code, 1) << j.err;
  EXPECT_THAT(j.out, HasSubstr(R"({"table":"public.t","key":"7","a":true,)"
                               R"("b":false})"));
  EXPECT_THAT(j.out, HasSubstr(R"("differences":3)"));
  const std::vector<std::string> lines =
      absl::StrSplit(j.out, '\n', absl::SkipEmpty());
  EXPECT_EQ(lines.size(), 4u);
}

// --transfer=hashes lists the same keys as reading every row, says how it
// compared and what it read, and a repair with it makes the tables equal
// (md5 over the ordered rows on each side).
TEST_F(TableDiffCli, BlockHashesListTheSameKeysAndRepair) {
  Sql(*b_,
      "UPDATE t SET a = 0 WHERE id = 42; DELETE FROM t WHERE id = 7; "
      "INSERT INTO t VALUES (9001, 1, 'x', now()); "
      "UPDATE t SET b = NULL WHERE id = 300");
  const CommandResult r =
      RunTally({"diff", "--transfer=hashes", UrlA(), UrlB()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("42  differs\n"));
  EXPECT_THAT(r.out, HasSubstr("300  differs\n"));
  EXPECT_THAT(r.out, HasSubstr("7  only in a\n"));
  EXPECT_THAT(r.out, HasSubstr("9001  only in b\n"));
  EXPECT_THAT(r.out, HasSubstr("4 keys differ: table public.t"));
  EXPECT_THAT(r.out, HasSubstr("(block hashes: 4 of 16384 buckets differ)"));
  const CommandResult j =
      RunTally({"diff", "--json", "--transfer=hashes", UrlA(), UrlB()});
  EXPECT_EQ(j.exit_code, 1) << j.err;
  EXPECT_THAT(j.out, HasSubstr(R"("transfer":"hashes")"));
  EXPECT_THAT(j.out, HasSubstr(R"("buckets_differing":4)"));
  const CommandResult rows = RunTally({"diff", "--json", UrlA(), UrlB()});
  EXPECT_THAT(rows.out, HasSubstr(R"("transfer":"rows")"));
  EXPECT_THAT(rows.out, HasSubstr(R"("rows_read_a":500)"));

  const CommandResult bad =
      RunTally({"diff", "--transfer=fast", UrlA(), UrlB()});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--transfer=fast"));

  const CommandResult repair =
      RunTally({"repair", "--source=A", "--transfer=hashes", UrlA(), UrlB()});
  EXPECT_EQ(repair.exit_code, 0) << repair.out << repair.err;
  EXPECT_THAT(repair.out, HasSubstr("re-read of the 4 keys: all equal"));
  EXPECT_EQ(RunTally({"diff", "--transfer=hashes", UrlA(), UrlB()}).exit_code,
            0);
  EXPECT_EQ(
      Sql(*a_, "SELECT md5(string_agg(t::text, ',' ORDER BY id)) FROM t"),
      Sql(*b_, "SELECT md5(string_agg(t::text, ',' ORDER BY id)) FROM t"));
}

// Without --transfer the tool measures each link and the table, and says
// what it chose and why: the same tables read whole on loopback, and by
// block hashes when b is behind a far, narrow link (10 ms, 2 MB/s).
TEST_F(TableDiffCli, TheTransferIsChosenByTheLinkAndSaid) {
  for (PgCluster* pg : {a_.get(), b_.get()}) {
    Sql(*pg,
        "INSERT INTO t SELECT g, g, md5(g::text), '2026-01-01Z' FROM "
        "generate_series(501, 100000) g");
  }
  Sql(*b_, "UPDATE t SET a = 0 WHERE id = 4242");
  const CommandResult near = RunTally({"diff", UrlA(), UrlB()});
  EXPECT_EQ(near.exit_code, 1) << near.out << near.err;
  EXPECT_THAT(near.out, HasSubstr("4242  differs\n"));
  // Loopback is fast enough that reading every row is usually cheaper; on a
  // machine busy enough that a measured link is slow (22-32 MB/s under a
  // CI run's load, to a or to b), hashes are, and the tool is right to
  // choose them. Each choice says why; the far link below proves the
  // choice follows it.
  EXPECT_THAT(near.out, AnyOf(HasSubstr("(every row read); rows chosen: "),
                              HasSubstr("hashes chosen: a "),
                              HasSubstr("hashes chosen: b ")));

  absl::StatusOr<std::unique_ptr<TcpProxy>> link = TcpProxy::Start(
      absl::StrCat("127.0.0.1:", b_->port()), absl::Milliseconds(10), 2e6);
  ASSERT_TRUE(link.ok()) << link.status();
  const std::string far_b =
      absl::StrCat("postgresql://postgres@", (*link)->address(), "/postgres");
  const CommandResult far = RunTally({"diff", UrlA(), far_b});
  EXPECT_EQ(far.exit_code, 1) << far.out << far.err;
  EXPECT_THAT(far.out, HasSubstr("4242  differs\n"));
  EXPECT_THAT(far.out, HasSubstr("hashes chosen: b 2"));
  const CommandResult json = RunTally({"diff", "--json", UrlA(), far_b});
  EXPECT_THAT(json.out, HasSubstr(R"("transfer":"hashes")"));
  EXPECT_THAT(json.out, HasSubstr(R"("transfer_chosen_because":"b )"));
  // Given, it is not chosen. Reading every row through the narrow link
  // takes seconds: --json shows the progress once a second meanwhile.
  const CommandResult given =
      RunTally({"diff", "--json", "--transfer=rows", UrlA(), far_b});
  EXPECT_THAT(given.out, HasSubstr(R"("transfer_chosen_because":null)"));
  EXPECT_THAT(given.out, HasSubstr(R"({"progress":{)"));
  EXPECT_THAT(given.out, HasSubstr(R"("step":"reading")"));
  EXPECT_THAT(given.out, HasSubstr(R"("table":"public.t")"));
}

TEST_F(TableDiffCli, DryRunChangesNothingAndRepairMakesThemEqual) {
  Sql(*b_,
      "UPDATE t SET b = 'changed' WHERE id <= 10; DELETE FROM t WHERE id > "
      "490; INSERT INTO t SELECT g, 0, '', now() FROM generate_series(600, "
      "604) g");
  const std::string before = Sql(*b_,
                                 "SELECT md5(string_agg(t::text, ',' "
                                 "ORDER BY id)) FROM t");
  const CommandResult dry =
      RunTally({"repair", "--source=A", "--dry-run", UrlA(), UrlB()});
  EXPECT_EQ(dry.exit_code, 1) << dry.out << dry.err;
  EXPECT_THAT(dry.out, HasSubstr("would upsert 3 into b"));
  EXPECT_THAT(dry.out, HasSubstr("would delete 600 from b"));
  EXPECT_THAT(dry.out, HasSubstr("would upsert 20 rows into b and delete 5"));
  EXPECT_EQ(Sql(*b_, "SELECT md5(string_agg(t::text, ',' ORDER BY id)) FROM t"),
            before);

  const CommandResult repair =
      RunTally({"repair", "--source=A", UrlA(), UrlB()});
  EXPECT_EQ(repair.exit_code, 0) << repair.out << repair.err;
  EXPECT_THAT(repair.out, HasSubstr("20 rows upserted into b, 5 deleted"));
  EXPECT_THAT(repair.out, HasSubstr("re-read of the 25 keys: all equal"));
  EXPECT_EQ(RunTally({"diff", UrlA(), UrlB()}).exit_code, 0);
  EXPECT_EQ(
      Sql(*a_, "SELECT md5(string_agg(t::text, ',' ORDER BY id)) FROM t"),
      Sql(*b_, "SELECT md5(string_agg(t::text, ',' ORDER BY id)) FROM t"));
}

// A column each database fills by itself (`updated_at DEFAULT now()`, here
// `c` set per database) made every key "differ" (1,001 of 1,000 keys in
// an operator's trial). --exclude-columns / --columns leave it out, --where
// restricts the rows, and a repair writes only the compared columns.
TEST_F(TableDiffCli, ColumnsAndWhereChooseWhatIsComparedAndRepaired) {
  Sql(*b_, "UPDATE t SET c = '2030-01-01Z'");  // every row: c differs
  Sql(*b_, "UPDATE t SET b = 'changed' WHERE id IN (5, 450)");
  const CommandResult all = RunTally({"diff", UrlA(), UrlB()});
  EXPECT_EQ(all.exit_code, 1) << all.err;
  EXPECT_THAT(all.out, HasSubstr("500 keys differ"));

  for (const std::vector<std::string>& scope :
       {std::vector<std::string>{"--exclude-columns=c"},
        std::vector<std::string>{"--columns=a,b"}}) {
    std::vector<std::string> args = {"diff"};
    args.insert(args.end(), scope.begin(), scope.end());
    args.push_back(UrlA());
    args.push_back(UrlB());
    const CommandResult r = RunTally(args);
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("5  differs\n"));
    EXPECT_THAT(r.out, HasSubstr("450  differs\n"));
    EXPECT_THAT(r.out, HasSubstr("2 keys differ")) << r.out;
  }
  const CommandResult where = RunTally(
      {"diff", "--exclude-columns=c", "--where=id > 100", UrlA(), UrlB()});
  EXPECT_EQ(where.exit_code, 1) << where.out << where.err;
  EXPECT_THAT(where.out, HasSubstr("450  differs\n"));
  EXPECT_THAT(where.out, Not(HasSubstr("5  differs")));
  EXPECT_THAT(where.out, HasSubstr("1 key differs")) << where.out;

  // Mistakes are refused, naming what is wrong; nothing widens to "all".
  ExpectOneTroubleLine(
      RunTally({"diff", "--exclude-columns=nope", UrlA(), UrlB()}));
  ExpectOneTroubleLine(
      RunTally({"diff", "--exclude-columns=id", UrlA(), UrlB()}));
  ExpectOneTroubleLine(RunTally({"diff", "--where=", UrlA(), UrlB()}));
  ExpectOneTroubleLine(
      RunTally({"diff", "--where=true; DROP TABLE t", UrlA(), UrlB()}));
  ExpectOneTroubleLine(
      RunTally({"diff", "--where=no_such_col = 1", UrlA(), UrlB()}));

  // A repair of the compared columns: b is mended, c on b stays its own.
  const CommandResult repair =
      RunTally({"repair", "--source=A", "--exclude-columns=c", UrlA(), UrlB()});
  EXPECT_EQ(repair.exit_code, 0) << repair.out << repair.err;
  EXPECT_THAT(repair.out, HasSubstr("2 rows upserted into b"));
  const std::string compared =
      "SELECT md5(string_agg(id || ',' || a || ',' || b, ';' ORDER BY id)) "
      "FROM t";
  EXPECT_EQ(Sql(*a_, compared), Sql(*b_, compared));
  EXPECT_EQ(Sql(*b_, "SELECT count(*) FROM t WHERE c = '2030-01-01Z'"), "500");
  EXPECT_EQ(RunTally({"diff", "--exclude-columns=c", UrlA(), UrlB()}).exit_code,
            0);
}

// `diff --values` between two databases names the columns that differ,
// with both values (pgEdge ACE's table-diff shows as much), and prints a
// row present on one side only; floats exactly, times in UTC whatever the
// servers' own TimeZone.
TEST_F(TableDiffCli, ValuesNameTheColumnsThatDifferWithBothValues) {
  Sql(*a_, "ALTER DATABASE postgres SET TimeZone = 'Asia/Tokyo'");
  Sql(*b_,
      "UPDATE t SET a = 0, c = '2026-01-01 00:00:00.5Z' WHERE id = 42; "
      "UPDATE t SET b = NULL WHERE id = 43; DELETE FROM t WHERE id = 7");
  const CommandResult r = RunTally({"diff", "--values", UrlA(), UrlB()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("42  differs\n"
                               "    a: '42' on a, '0' on b\n"
                               "    c: '2026-01-01 00:00:00+00' on a, "
                               "'2026-01-01 00:00:00.5+00' on b\n"));
  EXPECT_THAT(r.out, HasSubstr("43  differs\n    b: '"));
  EXPECT_THAT(r.out, HasSubstr("' on a, NULL on b\n"));
  EXPECT_THAT(r.out, HasSubstr("7  only in a\n    on a: id='7', a='7', b='"));
  EXPECT_THAT(r.out, HasSubstr("3 keys differ"));

  const CommandResult j =
      RunTally({"diff", "--values", "--json", UrlA(), UrlB()});
  EXPECT_EQ(j.exit_code, 1) << j.err;
  EXPECT_THAT(j.out, HasSubstr(R"("columns_differ":["a","c"])"));
  EXPECT_THAT(j.out, HasSubstr(R"("a":{"a":"42","b":"0"})"));
  EXPECT_THAT(j.out, HasSubstr(R"("b":{"a":)"));
  EXPECT_THAT(j.out, HasSubstr(R"(,"b":null})"));
  EXPECT_THAT(j.out, HasSubstr(R"("row_a":{)"));
}

TEST_F(TableDiffCli, RepairFromBChangesA) {
  Sql(*b_, "DELETE FROM t WHERE id = 1");
  const CommandResult repair =
      RunTally({"repair", "--source=B", UrlA(), UrlB()});
  EXPECT_EQ(repair.exit_code, 0) << repair.out << repair.err;
  EXPECT_EQ(Sql(*a_, "SELECT count(*) FROM t WHERE id = 1"), "0");
  // Without --source there is nothing to decide a two-way repair by.
  ExpectOneTroubleLine(RunTally({"repair", UrlA(), UrlB()}));
}

TEST_F(TableDiffCli, WithoutTablesEveryTableWithAPrimaryKeyIsCompared) {
  for (PgCluster* pg : {a_.get(), b_.get()}) {
    Sql(*pg,
        "CREATE TABLE u (k text PRIMARY KEY); CREATE TABLE nokey (x "
        "int); INSERT INTO u VALUES ('x')");
  }
  Sql(*b_, "UPDATE u SET k = 'y'");
  const CommandResult r = RunTally({"diff", UrlA(""), UrlB()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("equal: table public.t"));
  EXPECT_THAT(r.out, HasSubstr("2 keys differ: table public.u"));
  EXPECT_THAT(r.out, Not(HasSubstr("nokey")));
  EXPECT_EQ(RunTally({"diff", "--table=public.t", UrlA(""), UrlB()}).exit_code,
            0);
  // A repeated --table adds tables (absl alone would keep the last).
  const CommandResult both = RunTally(
      {"diff", "--table", "public.u", UrlA(""), "--table=public.t", UrlB()});
  EXPECT_EQ(both.exit_code, 1) << both.err;
  EXPECT_THAT(both.out, HasSubstr("equal: table public.t"));
  EXPECT_THAT(both.out, HasSubstr("2 keys differ: table public.u"));
  // A table on one side only is named.
  Sql(*a_, "CREATE TABLE extra (id int PRIMARY KEY)");
  const CommandResult extra = RunTally({"diff", UrlA(""), UrlB()});
  ExpectOneTroubleLine(extra);
  EXPECT_THAT(extra.err, HasSubstr("only in a: public.extra"));
}

TEST_F(TableDiffCli, DifferentColumnTypesExitTwoNamingTheColumn) {
  Sql(*b_, "ALTER TABLE t ALTER COLUMN a TYPE bigint");
  const CommandResult r = RunTally({"diff", UrlA(), UrlB()});
  ExpectOneTroubleLine(r);
  EXPECT_THAT(r.err, HasSubstr("column a: integer in a, bigint in b"));
}

TEST_F(TableDiffCli, TroubleIsOneLineWithoutThePassword) {
  // A missing table.
  const CommandResult missing =
      RunTally({"diff", UrlA("?table=public.nope"), UrlB()});
  ExpectOneTroubleLine(missing);
  EXPECT_THAT(missing.err, HasSubstr("public.nope"));
  // A URL libpq cannot read.
  const CommandResult bad = RunTally(
      {"diff", "postgresql://u:pw@127.0.0.1:notaport/x?table=a.b", UrlB()});
  ExpectOneTroubleLine(bad);
  EXPECT_THAT(bad.err, Not(HasSubstr("pw")));
  // A URL next to a node address.
  ExpectOneTroubleLine(RunTally({"diff", UrlA(), "127.0.0.1:7400"}));
  // Nothing listens.
  ExpectOneTroubleLine(RunTally(
      {"diff", "postgresql://postgres@127.0.0.1:1/postgres?table=public.t",
       UrlB()}));
}

TEST(TableDiffCliPassword, AWrongPasswordIsOneLineWithoutIt) {
  TALLY_SKIP_UNLESS_POSTGRES();
  PgClusterOptions options;
  options.hba_lines = {"local all all trust",
                       "host all postgres 127.0.0.1/32 trust",
                       "host all all 127.0.0.1/32 scram-sha-256"};
  std::unique_ptr<PgCluster> pg = StartCluster(options);
  ASSERT_TRUE(pg);
  ASSERT_TRUE(pg->Execute("CREATE ROLE app LOGIN PASSWORD 'right'; CREATE "
                          "TABLE t (id int PRIMARY KEY); GRANT SELECT ON t "
                          "TO app")
                  .ok());
  auto url = [&](const std::string& password) {
    return absl::StrCat("postgresql://app:", password,
                        "@127.0.0.1:", pg->port(), "/postgres?table=public.t");
  };
  const std::string right = url("right");
  EXPECT_EQ(RunTally({"diff", right, right}).exit_code, 0);
  const CommandResult r = RunTally({"diff", url("wrongpw"), right});
  ExpectOneTroubleLine(r);
  EXPECT_THAT(r.err, HasSubstr("password"));
  EXPECT_THAT(r.err, Not(HasSubstr("wrongpw")));
}

// The URL commands run in tally-pg, found beside tally: a tally copied
// alone says what is missing, in one line, exit 2; the node commands do
// not need it (nor libpq, which only tally-pg loads).
TEST(TableDiffCliHelper, ATallyWithoutTallyPgBesideItSaysSo) {
  TempDir dir;
  const std::string alone = dir.path() + "/tally";
  std::filesystem::copy_file(TallyPath(), alone);
  std::filesystem::permissions(alone, std::filesystem::perms::owner_all);
  const CommandResult r =
      RunCommand({alone, "diff", "postgresql://u@127.0.0.1:1/x?table=public.t",
                  "postgresql://u@127.0.0.1:1/x"});
  ExpectOneTroubleLine(r);
  EXPECT_THAT(r.err, HasSubstr(dir.path() + "/tally-pg"));
  EXPECT_EQ(RunCommand({alone, "--help"}).exit_code, 0);
  const CommandResult maps = RunCommand(
      {"/bin/sh", "-c", "ldd " + alone + " | grep -c libpq || true"});
  EXPECT_EQ(maps.out, "0\n") << maps.out;
}

}  // namespace
}  // namespace tally
