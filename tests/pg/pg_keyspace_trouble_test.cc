// One keyspace in trouble must not stop the others: two sidecars on two
// real PostgreSQL servers keep tables t1 and t2, and t1's column is integer
// on one database and bigint on the other. The feed between them must keep
// bringing t2's changes within a few seconds, t1's trouble must show in
// `tally status --json`, /metrics and the log (keyspace and reason), and
// once the column is altered to match, t1 must converge by itself (equal
// md5 over ordered rows) and its trouble clear, with nothing restarted.
#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/pg_cluster.h"
#include "support/pg_test_macros.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "tests/node_metrics.h"
#include "tests/pg/pg_sidecar_helpers.h"

namespace tally {
namespace {

using ::tally::pgtest::Following;
using ::tally::pgtest::StatusJson;
using ::tally::pgtest::TableMd5;
using ::tally::pgtest::WaitFor;
using ::tally::testing::FreeLoopbackAddress;
using ::tally::testing::MetricsPort;
using ::tally::testing::NodeProcess;
using ::tally::testing::PgCluster;
using ::tally::testing::Scrape;
using ::tally::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr absl::string_view kNoSidecar = "built without the PostgreSQL sidecar";

// A server with t1 (its column v of `t1_type`) and t2.
std::unique_ptr<PgCluster> StartServer(absl::string_view t1_type) {
  absl::StatusOr<std::unique_ptr<PgCluster>> pg = PgCluster::Start();
  EXPECT_TRUE(pg.ok()) << pg.status();
  if (!pg.ok()) return nullptr;
  EXPECT_TRUE((*pg)
                  ->Execute(absl::StrCat(
                      "CREATE TABLE t1 (id bigint PRIMARY KEY, v ", t1_type,
                      "); CREATE TABLE t2 (id bigint PRIMARY KEY, v bigint)"))
                  .ok());
  return *std::move(pg);
}

// A sidecar keeping t1 and t2, peering `peer`. Sessions every 10 s: a
// change that came only through sessions would take seconds, not the
// feed's fraction of one.
std::unique_ptr<NodeProcess> StartSidecar(const std::string& name,
                                          const std::string& dir, PgCluster& pg,
                                          const std::string& listen,
                                          const std::string& peer) {
  absl::StatusOr<std::unique_ptr<NodeProcess>> node = NodeProcess::Start(
      name, dir,
      {"--postgres", pg.Uri(), "--table", "public.t1", "--table", "public.t2",
       "--peer", peer, "--sync-interval", "10s", "--pg-schema-check-interval",
       "1s", "--metrics-listen", "127.0.0.1:0"},
      listen);
  EXPECT_TRUE(node.ok()) << node.status();
  return node.ok() ? *std::move(node) : nullptr;
}

// Whether the node's status lists t1 in trouble (or, with `in_trouble`
// false, listed and flowing again).
bool T1Trouble(const std::string& json, bool in_trouble) {
  const size_t listed = json.find(R"("keyspace_trouble":[)");
  if (listed == std::string::npos) return false;
  // The entry's fields, in nlohmann's sorted order, around its keyspace.
  const size_t entry = json.find(R"("keyspace":"public.t1")", listed);
  if (entry == std::string::npos) return false;
  const size_t begin = json.rfind('{', entry);
  const size_t end = json.find('}', entry);
  const std::string fields = json.substr(begin, end - begin);
  return absl::StrContains(
      fields, in_trouble ? R"("in_trouble":true)" : R"("in_trouble":false)");
}

TEST(PgKeyspaceTrouble, OtherTablesFlowAndTheTroubledOneHealsByItself) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg_a = StartServer("integer");
  std::unique_ptr<PgCluster> pg_b = StartServer("bigint");
  ASSERT_NE(pg_a, nullptr);
  ASSERT_NE(pg_b, nullptr);
  TempDir dir_a, dir_b;
  const std::string addr_a = FreeLoopbackAddress();
  const std::string addr_b = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> a =
      StartSidecar("side-a", dir_a.path(), *pg_a, addr_a, addr_b);
  ASSERT_NE(a, nullptr);
  if (absl::StrContains(a->Log(), kNoSidecar)) GTEST_SKIP() << kNoSidecar;
  std::unique_ptr<NodeProcess> b =
      StartSidecar("side-b", dir_b.path(), *pg_b, addr_b, addr_a);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(WaitFor([&] { return Following(addr_a) && Following(addr_b); },
                      absl::Seconds(20)))
      << a->Log() << b->Log();

  // Writes on both tables of both databases; each t2 row written on A is
  // timed until it is in B's table.
  constexpr int kRounds = 8;
  absl::Duration max_lag;
  for (int i = 1; i <= kRounds; ++i) {
    ASSERT_TRUE(
        pg_a->Execute(absl::StrCat("INSERT INTO t1 VALUES (", i, ", ", i, ")"))
            .ok());
    ASSERT_TRUE(pg_b->Execute(absl::StrCat("INSERT INTO t1 VALUES (", 100 + i,
                                           ", ", i, ")"))
                    .ok());
    ASSERT_TRUE(pg_b->Execute(absl::StrCat("INSERT INTO t2 VALUES (", 100 + i,
                                           ", ", i, ")"))
                    .ok());
    const absl::Time written = absl::Now();
    ASSERT_TRUE(pg_a->Execute(absl::StrCat("INSERT INTO t2 VALUES (", i, ", ",
                                           absl::ToUnixMillis(written), ")"))
                    .ok());
    const bool arrived = WaitFor(
        [&] {
          absl::StatusOr<std::string> n = pg_b->Execute(
              absl::StrCat("SELECT count(*) FROM t2 WHERE id = ", i));
          return n.ok() && *n == "1";
        },
        absl::Seconds(5));
    const absl::Duration lag = absl::Now() - written;
    max_lag = std::max(max_lag, lag);
    ASSERT_TRUE(arrived) << "t2 row " << i << " written on A is not on B after "
                         << lag << ": the feed stalls on t1's trouble\n"
                         << StatusJson(addr_b) << "\n"
                         << StatusJson(addr_a) << "\n"
                         << b->Log() << "\n--- side-a\n"
                         << a->Log();
    absl::SleepFor(absl::Milliseconds(250));
  }
  std::cout << "t2 feed lag A->B over " << kRounds
            << " writes while t1 is in trouble: max " << max_lag << "\n";
  EXPECT_LT(max_lag, absl::Seconds(3));
  // B's own t2 rows reached A the same way.
  ASSERT_TRUE(
      WaitFor([&] { return TableMd5(*pg_a, "t2") == TableMd5(*pg_b, "t2"); },
              absl::Seconds(5)));

  // t1's trouble is visible: status, metrics, log, the table's state and
  // the sidecar's phase.
  ASSERT_TRUE(WaitFor([&] { return T1Trouble(StatusJson(addr_b), true); },
                      absl::Seconds(5)))
      << StatusJson(addr_b);
  const std::string json = StatusJson(addr_b);
  EXPECT_THAT(json, HasSubstr(R"("reason":"schema")"));
  EXPECT_THAT(json, HasSubstr(R"("keyspaces_in_trouble":["public.t1"])"));
  EXPECT_THAT(json, HasSubstr("column v"));  // the differing column named
  const std::string text = ::tally::testing::RunTally(
                               {"status", "--node", addr_b}, absl::Seconds(10))
                               .out;
  std::cout << "tally status of side-b while t1 is in trouble:\n"
            << text << "\n";
  EXPECT_THAT(text, HasSubstr("1 keyspace(s) in trouble: public.t1"));
  EXPECT_THAT(text, HasSubstr("ready, IN TROUBLE"));
  const std::string metrics = Scrape(MetricsPort(*b));
  EXPECT_THAT(
      metrics,
      HasSubstr(R"(tally_keyspace_in_trouble{keyspace="public.t1"} 1)"));
  EXPECT_THAT(metrics, HasSubstr(R"(tally_keyspace_rows_rejected_total{)"
                                 R"(keyspace="public.t1",reason="schema"})"));
  // t2 was never in trouble.
  EXPECT_THAT(
      metrics,
      Not(HasSubstr(R"(tally_keyspace_in_trouble{keyspace="public.t2")")));
  EXPECT_THAT(b->Log(), HasSubstr("keyspace in trouble"));
  EXPECT_THAT(b->Log(), HasSubstr("keyspace=public.t1"));
  EXPECT_THAT(b->Log(), HasSubstr("reason=schema"));

  // The cause goes: A's column becomes bigint too. Nothing is restarted.
  const absl::Time fixed = absl::Now();
  ASSERT_TRUE(pg_a->Execute("ALTER TABLE t1 ALTER COLUMN v TYPE bigint").ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        absl::StatusOr<std::string> n =
            pg_a->Execute("SELECT count(*) FROM t1");
        return n.ok() && *n == absl::StrCat(2 * kRounds) &&
               TableMd5(*pg_a, "t1") == TableMd5(*pg_b, "t1");
      },
      absl::Seconds(40)))
      << pg_a->Execute("SELECT id, v FROM t1 ORDER BY id").value_or("?")
      << "\n--\n"
      << pg_b->Execute("SELECT id, v FROM t1 ORDER BY id").value_or("?") << "\n"
      << StatusJson(addr_b) << a->Log() << b->Log();
  std::cout << "t1 converged " << absl::Now() - fixed << " after the ALTER\n";
  EXPECT_EQ(TableMd5(*pg_a, "t2"), TableMd5(*pg_b, "t2"));
  // And its trouble clears (the session that repaired it says it flows).
  ASSERT_TRUE(WaitFor([&] { return T1Trouble(StatusJson(addr_b), false); },
                      absl::Seconds(30)))
      << StatusJson(addr_b);
  EXPECT_THAT(
      Scrape(MetricsPort(*b)),
      HasSubstr(R"(tally_keyspace_in_trouble{keyspace="public.t1"} 0)"));
  EXPECT_THAT(b->Log(), HasSubstr("keyspace flows again"));
  EXPECT_EQ(a->Stop(), 0);
  EXPECT_EQ(b->Stop(), 0);
}

}  // namespace
}  // namespace tally
