// `tally verify` of a running sidecar (Admin.VerifyTables):
// the index against its table, through the CLI and a real tallyd on a real
// PostgreSQL server.
#include <memory>
#include <regex>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
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
using ::tally::pgtest::WaitFor;
using ::tally::testing::CommandResult;
using ::tally::testing::FreeLoopbackAddress;
using ::tally::testing::NodeProcess;
using ::tally::testing::PgCluster;
using ::tally::testing::RunTally;
using ::tally::testing::TempDir;
using ::testing::HasSubstr;

std::string OriginOf(const std::string& status_json) {
  std::smatch m;
  const std::regex origin("\"origin\":\"(tally_[^\"]+)\"");
  return std::regex_search(status_json, m, origin) ? m[1].str() : "";
}

TEST(TallyVerifySidecar, ASoundIndexExitsZeroAndAMissedWriteIsNamed) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg = StartTableCluster();
  ASSERT_NE(pg, nullptr);
  ASSERT_TRUE(pg->Execute("INSERT INTO t SELECT g, g, 'v' || g FROM "
                          "generate_series(1, 100) g")
                  .ok());
  TempDir dir;
  const std::string listen = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> a =
      StartSidecar("verify-a", dir.path(), *pg, listen, {});
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(
      WaitFor([&] { return Following(a->address()); }, absl::Seconds(30)))
      << a->Log();
  // Changes made after the build: verify catches up with them first.
  ASSERT_TRUE(pg->Execute("UPDATE t SET a = -a WHERE id <= 10; "
                          "DELETE FROM t WHERE id > 95")
                  .ok());
  CommandResult sound = RunTally({"verify", "--node", a->address()});
  EXPECT_EQ(sound.exit_code, 0) << sound.out << sound.err;
  EXPECT_THAT(sound.out,
              HasSubstr("sound: public.t: 95 rows in the table, 95 in the "
                        "index"));
  CommandResult json = RunTally({"verify", "--node", a->address(), "--json"});
  EXPECT_EQ(json.exit_code, 0) << json.err;
  EXPECT_THAT(json.out, HasSubstr("\"ok\":true"));

  // Bad input: a table the node does not keep, exit 2 in one line.
  CommandResult unknown =
      RunTally({"verify", "--node", a->address(), "--table", "public.nope"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("not a table this node keeps"));

  // A write made under the node's own replication origin without its
  // tally.apply message (someone else using tally's origin) is no change
  // the capture indexes: the index misses it, and verify names the key.
  const std::string origin = OriginOf(StatusJson(a->address()));
  ASSERT_FALSE(origin.empty());
  a->Kill();  // the origin is free once its apply connection is gone
  ASSERT_TRUE(WaitFor(
      [&] {
        return pg
            ->Execute(absl::StrCat(
                "SELECT pg_replication_origin_session_setup('", origin,
                "'); UPDATE t SET b = 'behind tally' "
                "WHERE id = 42"))
            .ok();
      },
      absl::Seconds(10)));
  a = StartSidecar("verify-a", dir.path(), *pg, listen, {});
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(
      WaitFor([&] { return Following(a->address()); }, absl::Seconds(30)))
      << a->Log();
  CommandResult different = RunTally({"verify", "--node", a->address()});
  EXPECT_EQ(different.exit_code, 1) << different.out << different.err;
  EXPECT_THAT(different.out, HasSubstr("different: public.t"));
  EXPECT_THAT(different.out, HasSubstr("1 with another value"));
  EXPECT_THAT(different.out, HasSubstr("another value: "));
  json = RunTally({"verify", "--node", a->address(), "--json"});
  EXPECT_EQ(json.exit_code, 1);
  EXPECT_THAT(json.out, HasSubstr("\"mismatched\":1"));
  EXPECT_THAT(json.out, HasSubstr("\"ok\":false"));
}

TEST(TallyVerifySidecar, ANodeWithItsOwnRowsIsSentToTheOfflineVerify) {
  TempDir dir;
  auto node = NodeProcess::Start("verify-e", dir.path(), {});
  ASSERT_TRUE(node.ok()) << node.status();
  CommandResult r = RunTally({"verify", "--node", (*node)->address()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("keeps its own rows"));
  EXPECT_THAT(r.err, HasSubstr("--data-dir"));
}

}  // namespace
}  // namespace tally
