// tallyd as a sidecar to real PostgreSQL servers (issue 10 §5), started as
// an operator starts it. First the bad input that only the sidecar's
// preparation sees (§5 test 7): each refusal exits 1 with one line naming
// the fix, before the node opens its store, and never shows the password.
//
// The fixture: a throwaway server per test (support/pg_cluster.h), tallyd
// processes on it, SQL as the superuser, and an md5 aggregate to compare a
// table across databases.
//
// A tallyd built without pg::Sidecar refuses --postgres ("built without the
// PostgreSQL sidecar"): these tests then skip, saying so, rather than
// assert what such a build cannot do.
#include <sys/wait.h>

#include <functional>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/pg_cluster.h"
#include "support/pg_test_macros.h"
#include "support/process.h"
#include "support/temp_dir.h"

namespace tally {
namespace {

using ::tally::testing::CommandResult;
using ::tally::testing::FreeLoopbackAddress;
using ::tally::testing::NodeProcess;
using ::tally::testing::PgCluster;
using ::tally::testing::PgClusterOptions;
using ::tally::testing::PostgresBinDir;
using ::tally::testing::RunCommand;
using ::tally::testing::RunTally;
using ::tally::testing::SpawnCommand;
using ::tally::testing::TallydPath;
using ::tally::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr absl::string_view kNoSidecar = "built without the PostgreSQL sidecar";

struct PeeredPair;

class PgSidecarTest : public ::testing::Test {
 protected:
  // Fills `pair`: two servers, a sidecar on each peering the other, both
  // following (fatal failures otherwise).
  void StartPeeredPair(PeeredPair* pair);

  // Starts a server with `settings` over the defaults, and a table `t` with a
  // primary key in database `postgres`.
  std::unique_ptr<PgCluster> StartCluster(PgClusterOptions options = {}) {
    absl::StatusOr<std::unique_ptr<PgCluster>> pg = PgCluster::Start(options);
    EXPECT_TRUE(pg.ok()) << pg.status();
    if (!pg.ok()) return nullptr;
    EXPECT_TRUE((*pg)
                    ->Execute("CREATE TABLE t (id bigint PRIMARY KEY, a int, "
                              "b text)")
                    .ok());
    return *std::move(pg);
  }

  // Runs tallyd on `conninfo` with `tables` until it exits (a refusal) or
  // the bound passes.
  CommandResult RunTallyd(const std::string& conninfo,
                          const std::vector<std::string>& tables) {
    std::vector<std::string> argv = {TallydPath(),  "--name",     "pg-a",
                                     "--data-dir",  dir_.path(),  "--listen",
                                     "127.0.0.1:0", "--postgres", conninfo};
    for (const std::string& table : tables) {
      argv.push_back("--table");
      argv.push_back(table);
    }
    return RunCommand(argv, absl::Seconds(30));
  }

  // The md5 of a table's rows in key order: equal tables, equal sums.
  static std::string TableMd5(PgCluster& pg, absl::string_view table) {
    absl::StatusOr<std::string> md5 = pg.Execute(
        absl::StrCat("SELECT coalesce(md5(string_agg(x::text, ',' ORDER BY "
                     "x.id)), 'empty') FROM ",
                     table, " x"));
    EXPECT_TRUE(md5.ok()) << md5.status();
    return md5.ok() ? *md5 : "";
  }

  // A refusal: exit 1, one line, before any store was made.
  void ExpectRefusal(const CommandResult& r) {
    EXPECT_EQ(r.exit_code, 1) << r.err;
    std::vector<std::string> lines =
        absl::StrSplit(absl::StripSuffix(r.err, "\n"), '\n');
    // The log lines before the refusal are tallyd's own (INFO ...); the
    // refusal is the one "tallyd: " line, and the last.
    ASSERT_FALSE(lines.empty());
    EXPECT_TRUE(absl::StartsWith(lines.back(), "tallyd: ")) << r.err;
  }

  TempDir dir_;
};

// Skips the calling test when the tallyd under test has no sidecar.
#define SKIP_IF_NO_SIDECAR(result)                                 \
  do {                                                             \
    if (absl::StrContains((result).err, kNoSidecar)) {             \
      GTEST_SKIP() << "this tallyd has no PostgreSQL sidecar yet"; \
    }                                                              \
  } while (false)

TEST_F(PgSidecarTest, WalLevelReplicaIsRefusedNamingTheFix) {
  TALLY_SKIP_UNLESS_POSTGRES();
  PgClusterOptions options;
  options.settings = {"wal_level=replica"};
  std::unique_ptr<PgCluster> pg = StartCluster(options);
  ASSERT_NE(pg, nullptr);
  const CommandResult r = RunTallyd(pg->Uri(), {"public.t"});
  SKIP_IF_NO_SIDECAR(r);
  ExpectRefusal(r);
  EXPECT_THAT(r.err, AllOf(HasSubstr("wal_level"), HasSubstr("logical")));
}

TEST_F(PgSidecarTest, TrackCommitTimestampOffIsRefusedNamingTheFix) {
  TALLY_SKIP_UNLESS_POSTGRES();
  PgClusterOptions options;
  options.settings = {"track_commit_timestamp=off"};
  std::unique_ptr<PgCluster> pg = StartCluster(options);
  ASSERT_NE(pg, nullptr);
  const CommandResult r = RunTallyd(pg->Uri(), {"public.t"});
  SKIP_IF_NO_SIDECAR(r);
  ExpectRefusal(r);
  EXPECT_THAT(r.err, HasSubstr("track_commit_timestamp"));
}

TEST_F(PgSidecarTest, ARoleWithoutReplicationIsRefusedNamingTheFix) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg = StartCluster();
  ASSERT_NE(pg, nullptr);
  ASSERT_TRUE(pg->Execute("CREATE ROLE app LOGIN; GRANT ALL ON t TO app").ok());
  const CommandResult r = RunTallyd(pg->Uri("postgres", "app"), {"public.t"});
  SKIP_IF_NO_SIDECAR(r);
  ExpectRefusal(r);
  EXPECT_THAT(r.err, HasSubstr("REPLICATION"));
}

TEST_F(PgSidecarTest, ATableWithoutAPrimaryKeyIsRefusedNamingIt) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg = StartCluster();
  ASSERT_NE(pg, nullptr);
  ASSERT_TRUE(pg->Execute("CREATE TABLE loose (a int)").ok());
  const CommandResult r = RunTallyd(pg->Uri(), {"public.t", "public.loose"});
  SKIP_IF_NO_SIDECAR(r);
  ExpectRefusal(r);
  EXPECT_THAT(r.err,
              AllOf(HasSubstr("public.loose"), HasSubstr("primary key")));
}

TEST_F(PgSidecarTest, AWrongPasswordIsRefusedWithoutShowingIt) {
  TALLY_SKIP_UNLESS_POSTGRES();
  PgClusterOptions options;
  options.hba_lines = {"local all all trust",
                       "host all postgres 127.0.0.1/32 trust",
                       "host all all 127.0.0.1/32 scram-sha-256",
                       "host replication postgres 127.0.0.1/32 trust",
                       "host replication all 127.0.0.1/32 scram-sha-256"};
  std::unique_ptr<PgCluster> pg = StartCluster(options);
  ASSERT_NE(pg, nullptr);
  ASSERT_TRUE(
      pg->Execute("CREATE ROLE app LOGIN REPLICATION PASSWORD 'right-one'")
          .ok());
  const std::string uri = absl::StrCat(
      "postgresql://app:wrong-one@127.0.0.1:", pg->port(), "/postgres");
  const CommandResult r = RunTallyd(uri, {"public.t"});
  SKIP_IF_NO_SIDECAR(r);
  ExpectRefusal(r);
  EXPECT_THAT(r.err, AllOf(HasSubstr("password"), Not(HasSubstr("wrong-one")),
                           Not(HasSubstr("right-one"))));
}

TEST_F(PgSidecarTest, NoFreeReplicationSlotIsRefusedNamingTheSetting) {
  TALLY_SKIP_UNLESS_POSTGRES();
  PgClusterOptions options;
  options.settings = {"max_replication_slots=1"};
  std::unique_ptr<PgCluster> pg = StartCluster(options);
  ASSERT_NE(pg, nullptr);
  ASSERT_TRUE(pg->Execute("SELECT pg_create_logical_replication_slot("
                          "'someone_else', 'pgoutput')")
                  .ok());
  const CommandResult r = RunTallyd(pg->Uri(), {"public.t"});
  SKIP_IF_NO_SIDECAR(r);
  ExpectRefusal(r);
  EXPECT_THAT(r.err, HasSubstr("max_replication_slots"));
}

// The fixture's md5 aggregate tells equal tables from different ones (the
// later tests compare databases with it).
TEST_F(PgSidecarTest, TheTableChecksumSeesEveryDifference) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg = StartCluster();
  ASSERT_NE(pg, nullptr);
  ASSERT_TRUE(pg->Execute("CREATE TABLE u (LIKE t INCLUDING ALL);"
                          "INSERT INTO t SELECT g, g, 'x' || g FROM "
                          "generate_series(1, 100) g;"
                          "INSERT INTO u SELECT * FROM t")
                  .ok());
  EXPECT_EQ(TableMd5(*pg, "t"), TableMd5(*pg, "u"));
  ASSERT_TRUE(pg->Execute("UPDATE u SET b = NULL WHERE id = 50").ok());
  EXPECT_NE(TableMd5(*pg, "t"), TableMd5(*pg, "u"));
  ASSERT_TRUE(pg->Execute("DELETE FROM t; DELETE FROM u").ok());
  EXPECT_EQ(TableMd5(*pg, "t"), "empty");
}

// Polls `done` every 100 ms until it holds or `timeout` passes.
bool WaitFor(const std::function<bool()>& done, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return done();
}

// A sidecar on `pg`'s table t, listening on `listen`, peering `peers`.
std::unique_ptr<NodeProcess> StartSidecar(
    const std::string& name, const std::string& data_dir, PgCluster& pg,
    const std::string& listen, const std::vector<std::string>& peers) {
  std::vector<std::string> extra = {"--postgres", pg.Uri(),          "--table",
                                    "public.t",   "--sync-interval", "1s"};
  for (const std::string& peer : peers) {
    extra.push_back("--peer");
    extra.push_back(peer);
  }
  absl::StatusOr<std::unique_ptr<NodeProcess>> node =
      NodeProcess::Start(name, data_dir, extra, listen);
  EXPECT_TRUE(node.ok()) << node.status();
  return node.ok() ? *std::move(node) : nullptr;
}

// The sidecar's `tally status --json` block, or "" when the call fails.
std::string StatusJson(const std::string& address) {
  const CommandResult r =
      RunTally({"status", "--node", address, "--json"}, absl::Seconds(10));
  return r.exit_code == 0 ? r.out : "";
}

bool Following(const std::string& address) {
  return absl::StrContains(StatusJson(address), R"("phase":"following")");
}

// The sidecar's slot lag in bytes (-1 when status does not show it).
long long SlotLagBytes(const std::string& json) {
  std::smatch m;
  static const std::regex kLag(R"re("slot_lag_bytes":(\d+))re");
  if (!std::regex_search(json, m, kLag)) return -1;
  return std::stoll(m[1]);
}

// Statements run as one psql -c: each BEGIN ... COMMIT its own transaction.
absl::Status RunStatements(PgCluster& pg,
                           const std::vector<std::string>& statements,
                           size_t per_transaction = 20) {
  for (size_t i = 0; i < statements.size(); i += 200) {
    std::string sql;
    for (size_t j = i; j < statements.size() && j < i + 200; ++j) {
      if ((j - i) % per_transaction == 0) absl::StrAppend(&sql, "BEGIN;");
      absl::StrAppend(&sql, statements[j], ";");
      if ((j - i) % per_transaction == per_transaction - 1 ||
          j + 1 == statements.size() || j + 1 == i + 200) {
        absl::StrAppend(&sql, "COMMIT;");
      }
    }
    absl::StatusOr<std::string> r = pg.Execute(sql);
    if (!r.ok()) return r.status();
  }
  return absl::OkStatus();
}

// ~1,000 writes on one side: inserts of [first, first+400), updates of the
// odd ones, deletes of every tenth, and upserts of the shared keys
// [50001, 50200) with `tag`.
std::vector<std::string> Writes(long long first, const std::string& tag) {
  std::vector<std::string> out;
  for (long long i = first; i < first + 400; ++i) {
    out.push_back(absl::StrCat("INSERT INTO t VALUES (", i, ", ", i, ", '", tag,
                               "-", i, "')"));
  }
  for (long long i = 50001; i < 50200; ++i) {
    out.push_back(absl::StrCat("INSERT INTO t VALUES (", i, ", 1, '", tag,
                               "') ON CONFLICT (id) DO UPDATE SET a = t.a + 1, "
                               "b = excluded.b"));
  }
  for (long long i = first; i < first + 400; i += 2) {
    out.push_back(absl::StrCat("UPDATE t SET a = a + 1000, b = '", tag,
                               "-upd' WHERE id = ", i + 1));
  }
  for (long long i = first; i < first + 400; i += 10) {
    out.push_back(absl::StrCat("DELETE FROM t WHERE id = ", i));
  }
  for (long long i = 50001; i < 50200; i += 3) {
    out.push_back(
        absl::StrCat("UPDATE t SET b = '", tag, "-last' WHERE id = ", i));
  }
  return out;
}

// The rows Writes(first, tag) leaves in [first, first+400), as a SELECT.
std::string ExpectedRows(long long first, const std::string& tag) {
  return absl::StrCat(
      "SELECT g::bigint AS id, CASE WHEN (g - ", first,
      ") % 2 = 1 THEN g + 1000 ELSE g END::int AS a, CASE WHEN (g - ", first,
      ") % 2 = 1 THEN '", tag, "-upd' ELSE '", tag,
      "-' || g END AS b FROM generate_series(", first, ", ", first + 399,
      ") g WHERE (g - ", first, ") % 10 <> 0");
}

std::string RangeMd5(PgCluster& pg, const std::string& from) {
  absl::StatusOr<std::string> md5 = pg.Execute(
      absl::StrCat("SELECT coalesce(md5(string_agg(x::text, ',' ORDER BY "
                   "x.id)), 'empty') FROM (",
                   from, ") x"));
  EXPECT_TRUE(md5.ok()) << md5.status();
  return md5.ok() ? *md5 : "";
}

// Rows of t in [lo, hi] whose last commit came through a replication origin
// (`tally`), or not (`local`).
std::string CountByOrigin(PgCluster& pg, long long lo, long long hi,
                          bool tally) {
  absl::StatusOr<std::string> n = pg.Execute(
      absl::StrCat("SELECT count(*) FROM t WHERE id BETWEEN ", lo, " AND ", hi,
                   " AND (pg_xact_commit_timestamp_origin(xmin)).roident ",
                   tally ? "<> 0" : "= 0"));
  EXPECT_TRUE(n.ok()) << n.status();
  return n.ok() ? *n : "?";
}

// Two databases, a sidecar on each peering the other, both following.
struct PeeredPair {
  std::unique_ptr<PgCluster> pg_a, pg_b;
  TempDir dir_a, dir_b;
  std::string addr_a = FreeLoopbackAddress();
  std::string addr_b = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> side_a, side_b;
};

void PgSidecarTest::StartPeeredPair(PeeredPair* p) {
  p->pg_a = StartCluster();
  p->pg_b = StartCluster();
  ASSERT_NE(p->pg_a, nullptr);
  ASSERT_NE(p->pg_b, nullptr);
  p->side_a =
      StartSidecar("side-a", p->dir_a.path(), *p->pg_a, p->addr_a, {p->addr_b});
  p->side_b =
      StartSidecar("side-b", p->dir_b.path(), *p->pg_b, p->addr_b, {p->addr_a});
  ASSERT_NE(p->side_a, nullptr);
  ASSERT_NE(p->side_b, nullptr);
  ASSERT_TRUE(
      WaitFor([&] { return Following(p->addr_a) && Following(p->addr_b); },
              absl::Seconds(20)))
      << StatusJson(p->addr_a) << "\n"
      << StatusJson(p->addr_b) << "\n"
      << p->side_a->Log() << p->side_b->Log();
}

// Two databases, a sidecar on each peering the other, ~1,000 application
// writes on each: the tables converge and stay equal, each key written on
// one side only holds that side's value, nothing comes back to where it was
// written, and the sidecars end following with a small slot lag.
TEST_F(PgSidecarTest, TwoDatabasesConverge) {
  TALLY_SKIP_UNLESS_POSTGRES();
  PeeredPair pair;
  ASSERT_NO_FATAL_FAILURE(StartPeeredPair(&pair));
  std::unique_ptr<PgCluster>& pg_a = pair.pg_a;
  std::unique_ptr<PgCluster>& pg_b = pair.pg_b;
  const std::string& addr_a = pair.addr_a;
  const std::string& addr_b = pair.addr_b;
  std::unique_ptr<NodeProcess>& side_a = pair.side_a;
  std::unique_ptr<NodeProcess>& side_b = pair.side_b;

  ASSERT_TRUE(RunStatements(*pg_a, Writes(1, "a")).ok());
  ASSERT_TRUE(RunStatements(*pg_b, Writes(10001, "b")).ok());

  ASSERT_TRUE(WaitFor(
      [&] {
        const std::string a = TableMd5(*pg_a, "t");
        return a == TableMd5(*pg_b, "t") && a != "empty";
      },
      absl::Seconds(20)))
      << "rows a " << *pg_a->Execute("SELECT count(*) FROM t") << " rows b "
      << *pg_b->Execute("SELECT count(*) FROM t") << "\n"
      << side_a->Log() << side_b->Log();
  // And they stay equal over three sync intervals (no echo rewrites a row).
  const std::string sum = TableMd5(*pg_a, "t");
  const absl::Time until = absl::Now() + absl::Seconds(3);
  while (absl::Now() < until) {
    ASSERT_EQ(TableMd5(*pg_a, "t"), sum);
    ASSERT_EQ(TableMd5(*pg_b, "t"), sum);
    absl::SleepFor(absl::Milliseconds(250));
  }

  for (PgCluster* pg : {pg_a.get(), pg_b.get()}) {
    // Keys written on one side only hold that side's last value.
    EXPECT_EQ(RangeMd5(*pg, "SELECT * FROM t WHERE id BETWEEN 1 AND 400"),
              RangeMd5(*pg, ExpectedRows(1, "a")));
    EXPECT_EQ(RangeMd5(*pg, "SELECT * FROM t WHERE id BETWEEN 10001 AND 10400"),
              RangeMd5(*pg, ExpectedRows(10001, "b")));
    EXPECT_EQ(*pg->Execute("SELECT count(*) FROM t WHERE id > 50000"), "199");
  }
  // Local rows are local; the other side's rows came through tally's
  // origin (none of a database's own writes came back to it).
  EXPECT_EQ(CountByOrigin(*pg_a, 1, 400, /*tally=*/true), "0");
  EXPECT_EQ(CountByOrigin(*pg_a, 1, 400, /*tally=*/false), "360");
  EXPECT_EQ(CountByOrigin(*pg_a, 10001, 10400, /*tally=*/false), "0");
  EXPECT_EQ(CountByOrigin(*pg_a, 10001, 10400, /*tally=*/true), "360");
  EXPECT_EQ(CountByOrigin(*pg_b, 10001, 10400, /*tally=*/true), "0");
  EXPECT_EQ(CountByOrigin(*pg_b, 10001, 10400, /*tally=*/false), "360");
  EXPECT_EQ(CountByOrigin(*pg_b, 1, 400, /*tally=*/false), "0");
  EXPECT_EQ(CountByOrigin(*pg_b, 1, 400, /*tally=*/true), "360");

  // Both sidecars follow, their slots caught up.
  for (const std::string& addr : {addr_a, addr_b}) {
    std::string json;
    EXPECT_TRUE(WaitFor(
        [&] {
          json = StatusJson(addr);
          const long long lag = SlotLagBytes(json);
          return absl::StrContains(json, R"("phase":"following")") &&
                 lag >= 0 && lag < 64 * 1024;
        },
        absl::Seconds(10)))
        << addr << ": " << json;
  }
}

// A chain A - B - C (A peers B, B peers C, no A - C link): a write on A
// reaches C, and a write on C reaches A.
TEST_F(PgSidecarTest, ChainOfThree) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg_a = StartCluster();
  std::unique_ptr<PgCluster> pg_b = StartCluster();
  std::unique_ptr<PgCluster> pg_c = StartCluster();
  ASSERT_NE(pg_a, nullptr);
  ASSERT_NE(pg_b, nullptr);
  ASSERT_NE(pg_c, nullptr);
  TempDir dir_a, dir_b, dir_c;
  std::unique_ptr<NodeProcess> side_c =
      StartSidecar("side-c", dir_c.path(), *pg_c, FreeLoopbackAddress(), {});
  ASSERT_NE(side_c, nullptr);
  std::unique_ptr<NodeProcess> side_b =
      StartSidecar("side-b", dir_b.path(), *pg_b, FreeLoopbackAddress(),
                   {side_c->address()});
  ASSERT_NE(side_b, nullptr);
  std::unique_ptr<NodeProcess> side_a =
      StartSidecar("side-a", dir_a.path(), *pg_a, FreeLoopbackAddress(),
                   {side_b->address()});
  ASSERT_NE(side_a, nullptr);
  ASSERT_TRUE(WaitFor(
      [&] {
        return Following(side_a->address()) && Following(side_b->address()) &&
               Following(side_c->address());
      },
      absl::Seconds(20)))
      << side_a->Log() << side_b->Log() << side_c->Log();

  ASSERT_TRUE(pg_a->Execute("INSERT INTO t VALUES (1, 10, 'from-a')").ok());
  ASSERT_TRUE(pg_c->Execute("INSERT INTO t VALUES (2, 20, 'from-c')").ok());
  EXPECT_TRUE(WaitFor(
      [&] {
        return *pg_c->Execute("SELECT b FROM t WHERE id = 1") == "from-a";
      },
      absl::Seconds(15)))
      << side_a->Log() << side_b->Log() << side_c->Log();
  EXPECT_TRUE(WaitFor(
      [&] {
        return *pg_a->Execute("SELECT b FROM t WHERE id = 2") == "from-c";
      },
      absl::Seconds(15)))
      << side_a->Log() << side_b->Log() << side_c->Log();
  EXPECT_TRUE(WaitFor(
      [&] {
        const std::string a = TableMd5(*pg_a, "t");
        return a == TableMd5(*pg_b, "t") && a == TableMd5(*pg_c, "t");
      },
      absl::Seconds(10)));
}

// The application holds a row lock (BEGIN; UPDATE; sleep; COMMIT) while the
// peer's older version of that row arrives: afterwards both databases hold
// the application's write.
TEST_F(PgSidecarTest, AnApplicationLockOutlastsAnOlderPeerVersion) {
  TALLY_SKIP_UNLESS_POSTGRES();
  PeeredPair pair;
  ASSERT_NO_FATAL_FAILURE(StartPeeredPair(&pair));
  std::unique_ptr<PgCluster>& pg_a = pair.pg_a;
  std::unique_ptr<PgCluster>& pg_b = pair.pg_b;
  std::unique_ptr<NodeProcess>& side_a = pair.side_a;
  std::unique_ptr<NodeProcess>& side_b = pair.side_b;
  ASSERT_TRUE(pg_a->Execute("INSERT INTO t VALUES (7, 0, 'first')").ok());
  ASSERT_TRUE(WaitFor(
      [&] { return *pg_b->Execute("SELECT b FROM t WHERE id = 7") == "first"; },
      absl::Seconds(15)))
      << side_a->Log() << side_b->Log();

  // The application on A takes the row's lock and keeps it 4 s; the peer's
  // write commits on B just after the lock is taken (older than the
  // application's commit), and reaches A's sidecar while the lock is held.
  TempDir out;
  const pid_t app = SpawnCommand(
      {PostgresBinDir() + "/psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1",
       "-h", "127.0.0.1", "-p", absl::StrCat(pg_a->port()), "-U", "postgres",
       "-d", "postgres", "-c",
       "BEGIN; UPDATE t SET a = 1, b = 'app' WHERE id = 7; "
       "SELECT pg_sleep(4); COMMIT"},
      out.path() + "/app.out");
  ASSERT_GT(app, 0);
  ASSERT_TRUE(WaitFor(
      [&] {
        return *pg_a->Execute(
                   "SELECT count(*) FROM pg_locks l JOIN "
                   "pg_stat_activity s USING (pid) WHERE "
                   "s.query LIKE 'BEGIN; UPDATE t%' AND "
                   "l.locktype = 'transactionid'") != "0";
      },
      absl::Seconds(10)));
  ASSERT_TRUE(
      pg_b->Execute("UPDATE t SET a = 2, b = 'peer' WHERE id = 7").ok());
  int wstatus = 0;
  ASSERT_EQ(waitpid(app, &wstatus, 0), app);
  ASSERT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);

  EXPECT_TRUE(WaitFor(
      [&] {
        return *pg_a->Execute("SELECT a || b FROM t WHERE id = 7") == "1app" &&
               *pg_b->Execute("SELECT a || b FROM t WHERE id = 7") == "1app";
      },
      absl::Seconds(15)))
      << "a: " << *pg_a->Execute("SELECT a || b FROM t WHERE id = 7")
      << " b: " << *pg_b->Execute("SELECT a || b FROM t WHERE id = 7") << "\n"
      << side_a->Log() << side_b->Log();
  // And they stay so over three sync intervals.
  const absl::Time until = absl::Now() + absl::Seconds(3);
  while (absl::Now() < until) {
    ASSERT_EQ(*pg_a->Execute("SELECT a || b FROM t WHERE id = 7"), "1app");
    ASSERT_EQ(*pg_b->Execute("SELECT a || b FROM t WHERE id = 7"), "1app");
    absl::SleepFor(absl::Milliseconds(250));
  }
}

}  // namespace
}  // namespace tally
