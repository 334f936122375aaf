// tallyd's PostgreSQL settings as an operator meets them: refused
// combinations exit 2 with one line naming the fix, the password never
// appears in what tallyd prints, and --help documents the settings.
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/node_server.h"
#include "node/sidecar/postgres_sidecar.h"
#include "storage/row_backend.h"
#include "support/pg_cluster.h"
#include "support/pg_test_macros.h"
#include "support/process.h"
#include "support/temp_dir.h"

namespace tally {
namespace {

using ::tally::testing::CommandResult;
using ::tally::testing::PgCluster;
using ::tally::testing::RunCommand;
using ::tally::testing::RunTally;
using ::tally::testing::TallydPath;
using ::tally::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

CommandResult Tallyd(const TempDir& dir, std::vector<std::string> extra) {
  std::vector<std::string> argv = {TallydPath(), "--name",   "pg-a",
                                   "--data-dir", dir.path(), "--listen",
                                   "127.0.0.1:0"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return RunCommand(argv, absl::Seconds(30));
}

int Lines(const std::string& text) {
  std::vector<std::string> lines =
      absl::StrSplit(absl::StripSuffix(text, "\n"), '\n');
  return static_cast<int>(lines.size());
}

TEST(TallydPostgres, PostgresWithoutATableIsRefusedWithThePasswordMasked) {
  TempDir dir;
  const CommandResult r =
      Tallyd(dir, {"--postgres", "postgresql://tally:s3cret@127.0.0.1:1/app"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("--table SCHEMA.TABLE"),
                           HasSubstr("tally:********@127.0.0.1:1/app"),
                           Not(HasSubstr("s3cret"))));
  EXPECT_EQ(Lines(r.err), 1) << r.err;
}

TEST(TallydPostgres, ATableWithoutPostgresOrABadNameIsRefused) {
  TempDir dir;
  const CommandResult alone = Tallyd(dir, {"--table", "public.users"});
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_THAT(alone.err, HasSubstr("needs --postgres"));
  const CommandResult bad =
      Tallyd(dir, {"--postgres", "dbname=app", "--table", "users"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, AllOf(HasSubstr("--table"), HasSubstr("SCHEMA.TABLE")));
  const CommandResult twice =
      Tallyd(dir, {"--postgres", "dbname=app", "--table", "public.t", "--table",
                   "public.t"});
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_THAT(twice.err, HasSubstr("given twice"));
  const CommandResult unparsable = Tallyd(
      dir, {"--postgres", "password=s3cret host='open", "--table", "public.t"});
  EXPECT_EQ(unparsable.exit_code, 2);
  EXPECT_THAT(unparsable.err,
              AllOf(HasSubstr("--postgres"), Not(HasSubstr("s3cret"))));
}

TEST(TallydPostgres, HelpDocumentsPostgresAndTable) {
  const CommandResult r = RunCommand({TallydPath(), "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(
      r.out,
      AllOf(HasSubstr("--postgres URL"), HasSubstr("--table SCHEMA.TABLE"),
            HasSubstr("wal_level=logical"), HasSubstr("REPLICATION")));
}

// A sidecar that only gives the node a backend: the rows `tally put/get/del`
// reach are the table's (node/sidecar/table_rows.h), whatever captures them.
class BackendOnlySidecar final : public node::PostgresSidecar {
 public:
  std::shared_ptr<storage::RowBackend> backend() override { return backend_; }
  absl::Status Start(storage::Store*) override { return absl::OkStatus(); }
  void Stop() override {}
  v1::PostgresStatus status() const override { return {}; }
  absl::StatusOr<v1::VerifyTablesResponse> VerifyTables(
      const v1::VerifyTablesRequest&) override {
    return absl::UnimplementedError("this test's sidecar captures nothing");
  }

 private:
  const std::shared_ptr<storage::RowBackend> backend_ =
      storage::NewEmbeddedBackend();
};

// The operator's commands on a PostgreSQL table, through the tally binary:
// the key as text (one value per key column), the row as JSON, exit 1 for
// an absent row, exit 2 naming a bad argument.
TEST(TallyPostgresRows, PutGetDelReadAndWriteTheTableByItsKeyAsText) {
  TALLY_SKIP_UNLESS_POSTGRES();
  auto pg = PgCluster::Start();
  ASSERT_TRUE(pg.ok()) << pg.status();
  ASSERT_TRUE((*pg)
                  ->Execute("CREATE TABLE items (order_id int, line int, "
                            "sku text NOT NULL, PRIMARY KEY (order_id, "
                            "line))")
                  .ok());
  TempDir dir;
  node::NodeConfig config;
  config.name = "pg-cli";
  config.data_dir = dir.path();
  config.listen = "127.0.0.1:0";
  config.sync_writes = false;
  config.postgres = (*pg)->Uri();
  config.tables = {"public.items"};
  auto node = node::NodeServer::Start(
      config,
      [](const node::NodeConfig&)
          -> absl::StatusOr<std::unique_ptr<node::PostgresSidecar>> {
        return std::make_unique<BackendOnlySidecar>();
      });
  ASSERT_TRUE(node.ok()) << node.status();
  const std::string at = "--node=" + (*node)->listen_address();
  const std::string ks = "--keyspace=public.items";
  // This node's sidecar is a backend only, with no status: a real one lists
  // its tables there, which tally put takes as existing keyspaces. Here the
  // writes say so themselves.
  const std::string create = "--create-keyspace";

  const CommandResult put =
      RunTally({at, ks, create, "put", "7", "3", R"({"sku":"A-1"})"});
  EXPECT_EQ(put.exit_code, 0) << put.err;
  EXPECT_THAT(put.out, HasSubstr("put (7, 3) in table public.items"));
  EXPECT_EQ(*(*pg)->Execute("SELECT sku FROM items WHERE order_id = 7 AND "
                            "line = 3"),
            "A-1");

  const CommandResult get = RunTally({at, ks, "get", "7", "3"});
  EXPECT_EQ(get.exit_code, 0) << get.err;
  EXPECT_THAT(get.out, HasSubstr(R"("sku" : "A-1")"));
  const CommandResult json = RunTally({at, ks, "--json", "get", "7", "3"});
  EXPECT_EQ(json.exit_code, 0) << json.err;
  EXPECT_THAT(json.out, HasSubstr(R"("key":["7","3"])"));
  EXPECT_THAT(json.out,
              HasSubstr(R"("row":{"order_id":"7","line":"3","sku":"A-1"})"));

  const CommandResult one_value = RunTally({at, ks, "get", "7"});
  EXPECT_EQ(one_value.exit_code, 2);
  EXPECT_THAT(one_value.err, HasSubstr("(order_id, line): give 2 key values"));
  const CommandResult typo =
      RunTally({at, ks, create, "put", "7", "3", R"({"skus":"x"})"});
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_THAT(typo.err, HasSubstr("no column 'skus'"));

  const CommandResult del = RunTally({at, ks, create, "del", "7", "3"});
  EXPECT_EQ(del.exit_code, 0) << del.err;
  EXPECT_EQ(*(*pg)->Execute("SELECT count(*) FROM items"), "0");
  const CommandResult absent = RunTally({at, ks, "get", "7", "3"});
  EXPECT_EQ(absent.exit_code, 1);
  EXPECT_THAT(absent.err, HasSubstr("no row with key (7, 3) in public.items"));
}

}  // namespace
}  // namespace tally
