// A sidecar whose index is lost (its data directory deleted) while the
// application went on writing its database (pg/sidecar/bootstrap.h "Index
// lost", pg/sidecar/build_marker.h): real tallyd processes on two real
// PostgreSQL servers, peered.
//
//  - A first start of two identical databases moves no row: every row gets
//    the bootstrap version on both, and the marker that the index was built
//    is not mistaken for a loss.
//  - Sidecar A stopped, its database written by the application (updates
//    of rows B wrote last, of rows A wrote last, of rows nobody changed
//    since the first build; inserts; deletes), its data directory deleted,
//    A restarted: A's writes survive on BOTH databases, B's write made
//    meanwhile to another row reaches A, and A's deletes — found in A's
//    old slot before the rebuild replaced it (pg/sidecar/lost_deletes.h) —
//    delete B's rows too.
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "support/pg_cluster.h"
#include "support/pg_test_macros.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "tests/pg/pg_sidecar_helpers.h"

namespace tally {
namespace {

using ::tally::pgtest::CountByOrigin;
using ::tally::pgtest::Following;
using ::tally::pgtest::JsonNumber;
using ::tally::pgtest::StartSidecar;
using ::tally::pgtest::StartTableCluster;
using ::tally::pgtest::StatusJson;
using ::tally::pgtest::TableMd5;
using ::tally::pgtest::WaitFor;
using ::tally::testing::FreeLoopbackAddress;
using ::tally::testing::NodeProcess;
using ::tally::testing::PgCluster;
using ::tally::testing::TempDir;

// The same 100 rows in both databases, written before any sidecar starts.
void Seed(PgCluster& pg) {
  ASSERT_TRUE(pg.Execute("INSERT INTO t SELECT g, g, 'seed' FROM "
                         "generate_series(1, 100) g")
                  .ok());
}

// Rows of t with b = `b` (and id in [lo, hi]).
std::string CountB(PgCluster& pg, absl::string_view b, long long lo,
                   long long hi) {
  absl::StatusOr<std::string> n =
      pg.Execute(absl::StrCat("SELECT count(*) FROM t WHERE b = '", b,
                              "' AND id BETWEEN ", lo, " AND ", hi));
  EXPECT_TRUE(n.ok()) << n.status();
  return n.ok() ? *n : "?";
}

// Number of sessions the node completed with its peers.
long long SessionsOk(const std::string& address) {
  return JsonNumber(StatusJson(address), "sessions_ok");
}

TEST(PgIndexLoss, FirstStartOfIdenticalDatabasesMovesNoRow) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg_a = StartTableCluster();
  std::unique_ptr<PgCluster> pg_b = StartTableCluster();
  ASSERT_NE(pg_a, nullptr);
  ASSERT_NE(pg_b, nullptr);
  ASSERT_NO_FATAL_FAILURE(Seed(*pg_a));
  ASSERT_NO_FATAL_FAILURE(Seed(*pg_b));
  TempDir dir_a, dir_b;
  const std::string addr_a = FreeLoopbackAddress();
  const std::string addr_b = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> side_a =
      StartSidecar("loss-a", dir_a.path(), *pg_a, addr_a, {addr_b});
  std::unique_ptr<NodeProcess> side_b =
      StartSidecar("loss-b", dir_b.path(), *pg_b, addr_b, {addr_a});
  ASSERT_NE(side_a, nullptr);
  ASSERT_NE(side_b, nullptr);
  // Both follow and have completed sessions with each other since.
  ASSERT_TRUE(WaitFor(
      [&] {
        return Following(addr_a) && Following(addr_b) &&
               SessionsOk(addr_a) >= 3 && SessionsOk(addr_b) >= 3;
      },
      absl::Seconds(60)))
      << StatusJson(addr_a) << side_a->Log() << side_b->Log();

  for (const std::string& addr : {addr_a, addr_b}) {
    const std::string json = StatusJson(addr);
    EXPECT_EQ(JsonNumber(json, "rows_applied"), 0) << json;
    EXPECT_TRUE(absl::StrContains(json, R"("index_lost":false)")) << json;
  }
  EXPECT_EQ(CountByOrigin(*pg_a, 1, 100, /*tally=*/true), "0");
  EXPECT_EQ(CountByOrigin(*pg_b, 1, 100, /*tally=*/true), "0");
  EXPECT_FALSE(absl::StrContains(side_a->Log(), "index lost")) << side_a->Log();

  // A restart with the index in place is no loss either.
  EXPECT_EQ(side_a->Stop(), 0) << side_a->Log();
  side_a = StartSidecar("loss-a", dir_a.path(), *pg_a, addr_a, {addr_b});
  ASSERT_NE(side_a, nullptr);
  ASSERT_TRUE(WaitFor([&] { return Following(addr_a); }, absl::Seconds(30)))
      << side_a->Log();
  EXPECT_FALSE(absl::StrContains(side_a->Log(), "building the index"))
      << side_a->Log();
  EXPECT_EQ(side_a->Stop(), 0) << side_a->Log();

  // The stopped sidecar's store is an index of its tables: an offline
  // verify or recover, which would judge its rows by values it does not
  // hold (recover used to remove every row), refuses it and says what to
  // do; the store is left as it was.
  for (const char* command : {"verify", "recover"}) {
    const ::tally::testing::CommandResult r =
        ::tally::testing::RunTally({command, "--data-dir", dir_a.path()});
    EXPECT_EQ(r.exit_code, 2) << command << ": " << r.out << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, "PostgreSQL sidecar's index"))
        << command << ": " << r.err;
  }
  side_a = StartSidecar("loss-a", dir_a.path(), *pg_a, addr_a, {addr_b});
  ASSERT_NE(side_a, nullptr);
  ASSERT_TRUE(WaitFor([&] { return Following(addr_a); }, absl::Seconds(30)))
      << side_a->Log();
  EXPECT_FALSE(absl::StrContains(side_a->Log(), "index lost")) << side_a->Log();
  EXPECT_EQ(side_a->Stop(), 0) << side_a->Log();
  EXPECT_EQ(side_b->Stop(), 0) << side_b->Log();
}

TEST(PgIndexLoss, LocalWritesMadeWhileDownSurviveALostIndex) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg_a = StartTableCluster();
  std::unique_ptr<PgCluster> pg_b = StartTableCluster();
  ASSERT_NE(pg_a, nullptr);
  ASSERT_NE(pg_b, nullptr);
  ASSERT_NO_FATAL_FAILURE(Seed(*pg_a));
  ASSERT_NO_FATAL_FAILURE(Seed(*pg_b));
  TempDir dir_a, dir_b;
  const std::string addr_a = FreeLoopbackAddress();
  const std::string addr_b = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> side_a =
      StartSidecar("loss-a", dir_a.path(), *pg_a, addr_a, {addr_b});
  std::unique_ptr<NodeProcess> side_b =
      StartSidecar("loss-b", dir_b.path(), *pg_b, addr_b, {addr_a});
  ASSERT_NE(side_a, nullptr);
  ASSERT_NE(side_b, nullptr);
  ASSERT_TRUE(WaitFor([&] { return Following(addr_a) && Following(addr_b); },
                      absl::Seconds(30)))
      << side_a->Log() << side_b->Log();

  // B writes rows 1-10 and A rows 11-20; each reaches the other, so the
  // peers hold captured (non-bootstrap) versions of them.
  ASSERT_TRUE(pg_b->Execute("UPDATE t SET b = 'b1' WHERE id <= 10").ok());
  ASSERT_TRUE(
      pg_a->Execute("UPDATE t SET b = 'a1' WHERE id BETWEEN 11 AND 20").ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        return CountB(*pg_a, "b1", 1, 10) == "10" &&
               CountB(*pg_b, "a1", 11, 20) == "10";
      },
      absl::Seconds(30)))
      << side_a->Log() << side_b->Log();
  ASSERT_EQ(TableMd5(*pg_a, "t"), TableMd5(*pg_b, "t"));

  // A stops; its application goes on: updates of rows B wrote last (1-5),
  // of rows A wrote last (11-15), of rows nobody wrote since the first
  // build (21-25); inserts; deletes. B's application changes other rows.
  EXPECT_EQ(side_a->Stop(), 0) << side_a->Log();
  ASSERT_TRUE(pg_a->Execute("UPDATE t SET b = 'a-down' WHERE id <= 5 OR id "
                            "BETWEEN 11 AND 15 OR id BETWEEN 21 AND 25")
                  .ok());
  ASSERT_TRUE(pg_a->Execute("INSERT INTO t SELECT g, g, 'a-new' FROM "
                            "generate_series(1001, 1010) g")
                  .ok());
  ASSERT_TRUE(pg_a->Execute("DELETE FROM t WHERE id BETWEEN 31 AND 35").ok());
  ASSERT_TRUE(
      pg_b->Execute("UPDATE t SET b = 'b-down' WHERE id BETWEEN 41 AND 45")
          .ok());

  // A's index is lost.
  std::filesystem::remove_all(dir_a.path());
  std::filesystem::create_directories(dir_a.path());
  side_a = StartSidecar("loss-a", dir_a.path(), *pg_a, addr_a, {addr_b});
  ASSERT_NE(side_a, nullptr);

  // The databases converge on A's writes.
  auto summary = [&] {
    return absl::StrCat("a: a-down ", CountB(*pg_a, "a-down", 1, 100),
                        ", a-new ", CountB(*pg_a, "a-new", 1001, 1010),
                        "; b: a-down ", CountB(*pg_b, "a-down", 1, 100),
                        ", a-new ", CountB(*pg_b, "a-new", 1001, 1010), "\n");
  };
  ASSERT_TRUE(WaitFor(
      [&] {
        return Following(addr_a) && CountB(*pg_b, "a-down", 1, 100) == "15" &&
               CountB(*pg_b, "a-new", 1001, 1010) == "10" &&
               CountB(*pg_a, "b-down", 41, 45) == "5" &&
               TableMd5(*pg_a, "t") == TableMd5(*pg_b, "t");
      },
      absl::Seconds(60)))
      << summary() << side_a->Log() << side_b->Log();
  // ... and stay there over a few more sessions.
  const long long sessions = SessionsOk(addr_a);
  ASSERT_TRUE(WaitFor([&] { return SessionsOk(addr_a) >= sessions + 3; },
                      absl::Seconds(30)))
      << StatusJson(addr_a);
  const std::string sum = TableMd5(*pg_a, "t");
  EXPECT_EQ(TableMd5(*pg_b, "t"), sum);
  for (PgCluster* pg : {pg_a.get(), pg_b.get()}) {
    EXPECT_EQ(CountB(*pg, "a-down", 1, 5), "5");
    EXPECT_EQ(CountB(*pg, "a-down", 11, 15), "5");
    EXPECT_EQ(CountB(*pg, "a-down", 21, 25), "5");
    EXPECT_EQ(CountB(*pg, "b1", 6, 10), "5");
    EXPECT_EQ(CountB(*pg, "a1", 16, 20), "5");
    EXPECT_EQ(CountB(*pg, "a-new", 1001, 1010), "10");
    EXPECT_EQ(CountB(*pg, "b-down", 41, 45), "5");
    // A's deletes, read from its old slot, won over B's live rows.
    EXPECT_EQ(CountB(*pg, "seed", 31, 35), "0");
    EXPECT_EQ(CountB(*pg, "seed", 36, 40), "5");
  }

  // The loss was told apart from a first start, logged and shown: rows
  // 1-5, 11-20, 21-25 and 1001-1010 were last written by A's application
  // since the first build; the seed rows (before it) and rows 6-10 (B's,
  // applied by tally) kept the bootstrap version.
  EXPECT_TRUE(
      absl::StrContains(side_a->Log(),
                        "index lost: table public.t: 30 of 105 rows were last "
                        "written here and got fresh versions (the rest kept "
                        "the bootstrap version); 5 rows deleted here got "
                        "tombstones"))
      << side_a->Log();
  const std::string json = StatusJson(addr_a);
  EXPECT_TRUE(absl::StrContains(json, R"("index_lost":true)")) << json;
  EXPECT_EQ(JsonNumber(json, "index_loss_fresh_rows"), 30) << json;
  EXPECT_EQ(side_a->Stop(), 0) << side_a->Log();
  EXPECT_EQ(side_b->Stop(), 0) << side_b->Log();
}

}  // namespace
}  // namespace tally
