// PostgreSQL sidecars and large (TOASTed) values: rows up to the store's
// value limit replicate whole; a row over it (3 MB) is not indexed and
// refuses its keyspace alone — named in the status, kept across a restart
// — while the other table goes on replicating, until the row fits again.
// Real tallyd and PostgreSQL; equality by each database's md5.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "support/pg_cluster.h"
#include "support/pg_test_macros.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "tests/pg/pg_sidecar_helpers.h"

namespace tally {
namespace {

using ::tally::pgtest::Following;
using ::tally::pgtest::StartSidecar;
using ::tally::pgtest::StartTableCluster;
using ::tally::pgtest::StatusJson;
using ::tally::pgtest::TableMd5;
using ::tally::pgtest::WaitFor;
using ::tally::testing::CommandResult;
using ::tally::testing::FreeLoopbackAddress;
using ::tally::testing::NodeProcess;
using ::tally::testing::PgCluster;
using ::tally::testing::RunTally;
using ::tally::testing::TempDir;

bool Refused(const std::string& address) {
  return absl::StrContains(StatusJson(address), R"("state":"refused")");
}

TEST(PgLargeValues, AnOversizeRowRefusesItsKeyspaceAloneUntilItFits) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg_a = StartTableCluster();
  std::unique_ptr<PgCluster> pg_b = StartTableCluster();
  ASSERT_NE(pg_a, nullptr);
  ASSERT_NE(pg_b, nullptr);
  for (PgCluster* pg : {pg_a.get(), pg_b.get()}) {
    ASSERT_TRUE(
        pg->Execute("CREATE TABLE big (id bigint PRIMARY KEY, v text)").ok());
  }
  TempDir dir_a, dir_b;
  const std::string addr_a = FreeLoopbackAddress();
  const std::string addr_b = FreeLoopbackAddress();
  const std::vector<std::string> big = {"--table", "public.big"};
  std::unique_ptr<NodeProcess> side_a =
      StartSidecar("big-a", dir_a.path(), *pg_a, addr_a, {addr_b}, big);
  std::unique_ptr<NodeProcess> side_b =
      StartSidecar("big-b", dir_b.path(), *pg_b, addr_b, {addr_a}, big);
  ASSERT_NE(side_a, nullptr);
  ASSERT_NE(side_b, nullptr);
  ASSERT_TRUE(WaitFor([&] { return Following(addr_a) && Following(addr_b); },
                      absl::Seconds(30)))
      << side_a->Log() << side_b->Log();

  // Under the limit: a 900 kB row and 50 of 200 kB in one transaction.
  ASSERT_TRUE(pg_a->Execute("INSERT INTO big VALUES (1, repeat('x', 900000)); "
                            "INSERT INTO big SELECT g, repeat(chr(65 + g % "
                            "26), 200000) FROM generate_series(10, 59) g")
                  .ok());
  ASSERT_TRUE(
      WaitFor([&] { return TableMd5(*pg_a, "big") == TableMd5(*pg_b, "big"); },
              absl::Seconds(60)))
      << side_a->Log() << side_b->Log();

  // A 3 MB row: big is refused on A, t is not.
  ASSERT_TRUE(
      pg_a->Execute("INSERT INTO big VALUES (100, repeat('y', 3000000))").ok());
  ASSERT_TRUE(WaitFor([&] { return Refused(addr_a); }, absl::Seconds(30)))
      << StatusJson(addr_a) << side_a->Log();
  EXPECT_TRUE(absl::StrContains(StatusJson(addr_a), "over the value limit"));
  EXPECT_TRUE(Following(addr_a)) << StatusJson(addr_a);
  ASSERT_TRUE(pg_a->Execute("INSERT INTO t VALUES (7, 7, 'still')").ok());
  EXPECT_TRUE(
      WaitFor([&] { return TableMd5(*pg_a, "t") == TableMd5(*pg_b, "t"); },
              absl::Seconds(30)))
      << side_a->Log() << side_b->Log();

  // Restarted, A rebuilds big and refuses it again.
  EXPECT_EQ(side_a->Stop(), 0) << side_a->Log();
  side_a = StartSidecar("big-a", dir_a.path(), *pg_a, addr_a, {addr_b}, big);
  ASSERT_NE(side_a, nullptr);
  ASSERT_TRUE(WaitFor([&] { return Following(addr_a) && Refused(addr_a); },
                      absl::Seconds(30)))
      << StatusJson(addr_a) << side_a->Log();
  EXPECT_TRUE(absl::StrContains(side_a->Log(), "over the value limit"))
      << side_a->Log();

  // The row shrinks: big takes rows again and converges.
  ASSERT_TRUE(pg_a->Execute("UPDATE big SET v = 'small' WHERE id = 100").ok());
  ASSERT_TRUE(
      WaitFor([&] { return TableMd5(*pg_a, "big") == TableMd5(*pg_b, "big"); },
              absl::Seconds(60)))
      << side_a->Log() << side_b->Log();
  EXPECT_FALSE(Refused(addr_a)) << StatusJson(addr_a);
  EXPECT_EQ(*pg_b->Execute("SELECT count(*) FROM big"), "52");
  for (const std::string& a : {addr_a, addr_b}) {
    const CommandResult v = RunTally({"verify", "--node", a});
    EXPECT_EQ(v.exit_code, 0) << v.out << v.err;
  }
  EXPECT_EQ(side_a->Stop(), 0) << side_a->Log();
  EXPECT_EQ(side_b->Stop(), 0) << side_b->Log();
}

}  // namespace
}  // namespace tally
