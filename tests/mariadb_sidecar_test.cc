// tallyd --mariadb, as operators run it: real tallyd processes, each next to
// a real throwaway MariaDB server (and one next to PostgreSQL), peered over
// loopback. Applications write on every side at once; the tests prove the
// tables equal with each database's own md5 over its rows in key order, and
// the index equal to its table with `tally verify` — not with tally's diff.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "mariadb/connection.h"
#include "mariadb/url.h"
#include "support/mariadb_server.h"
#include "support/mariadb_test_macros.h"
#include "support/pg_cluster.h"
#include "support/pg_test_macros.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "tests/pg/pg_sidecar_helpers.h"

namespace tally {
namespace {

using ::tally::pgtest::ExpectDiedAt;
using ::tally::pgtest::ExpectLogSettlesAt;
using ::tally::pgtest::Following;
using ::tally::pgtest::JsonNumber;
using ::tally::pgtest::SourceNumber;
using ::tally::pgtest::StatusJson;
using ::tally::pgtest::WaitFor;
using ::tally::testing::CommandResult;
using ::tally::testing::FreeLoopbackAddress;
using ::tally::testing::MariaDbServer;
using ::tally::testing::NodeProcess;
using ::tally::testing::PgCluster;
using ::tally::testing::RunTally;
using ::tally::testing::TempDir;

// A server with database `public` (so that its table's keyspace,
// public.t, is a PostgreSQL sidecar's too) and t (id bigint PRIMARY KEY,
// a int, b text) holding `rows` rows.
std::unique_ptr<MariaDbServer> StartServerWithTable(int rows) {
  absl::StatusOr<std::unique_ptr<MariaDbServer>> m = MariaDbServer::Start();
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return nullptr;
  // The user docs/mariadb.md's quick start creates, with exactly its
  // privileges: the sidecars run as it.
  std::string sql =
      "CREATE DATABASE public; USE public; CREATE TABLE t (id bigint "
      "PRIMARY KEY, a int, b text) DEFAULT CHARSET utf8mb4; "
      "CREATE USER tally@'127.0.0.1' IDENTIFIED BY 'secret'; "
      "GRANT SELECT, INSERT, UPDATE, DELETE ON public.* TO "
      "tally@'127.0.0.1'; GRANT CREATE, SELECT, INSERT, UPDATE ON tally.* "
      "TO tally@'127.0.0.1'; GRANT REPLICATION SLAVE, BINLOG MONITOR, "
      "BINLOG REPLAY ON *.* TO tally@'127.0.0.1';";
  if (rows > 0) {
    absl::StrAppend(&sql, "INSERT INTO t SELECT seq, seq, CONCAT('v', seq) ",
                    "FROM seq_1_to_", rows, ";");
  }
  absl::StatusOr<std::string> made = (*m)->Execute(sql);
  EXPECT_TRUE(made.ok()) << made.status();
  return *std::move(m);
}

std::unique_ptr<mariadb::Connection> Connect(MariaDbServer& server) {
  absl::StatusOr<mariadb::MariaDbTarget> target =
      mariadb::ParseMariaDbUrl(server.Url("public"));
  EXPECT_TRUE(target.ok());
  absl::StatusOr<std::unique_ptr<mariadb::Connection>> c =
      mariadb::Connection::Open(*target, absl::Seconds(30));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

// The md5 of t's rows in key order (t of `database`), written the same way
// on both engines: "id,a,b" per row (\N for NULL), ';' between rows.
std::string MariaDbMd5(MariaDbServer& server,
                       const std::string& database = "public") {
  absl::StatusOr<std::string> md5 = server.Execute(
      "SET SESSION group_concat_max_len = 1073741824; SELECT "
      "IFNULL(MD5(GROUP_CONCAT(CONCAT_WS(',', id, IFNULL(a, '\\\\N'), "
      "IFNULL(b, '\\\\N')) ORDER BY id SEPARATOR ';')), 'empty') FROM t",
      database);
  EXPECT_TRUE(md5.ok()) << md5.status();
  return md5.ok() ? *md5 : "?";
}
std::string PgMd5(PgCluster& pg) {
  absl::StatusOr<std::string> md5 = pg.Execute(
      "SELECT coalesce(md5(string_agg(concat_ws(',', id, coalesce(a::text, "
      "'\\N'), coalesce(b, '\\N')), ';' ORDER BY id)), 'empty') FROM t");
  EXPECT_TRUE(md5.ok()) << md5.status();
  return md5.ok() ? *md5 : "?";
}

// `extra`: more flags (a fault point).
std::unique_ptr<NodeProcess> StartMariaDbSidecar(
    const std::string& name, const std::string& data_dir, MariaDbServer& server,
    const std::string& listen, const std::vector<std::string>& peers,
    const std::vector<std::string>& extra = {}) {
  std::vector<std::string> flags = {
      "--mariadb",       server.Url("public", "tally", "secret"),
      "--table",         "public.t",
      "--sync-interval", "1s"};
  for (const std::string& peer : peers) {
    flags.push_back("--peer");
    flags.push_back(peer);
  }
  flags.insert(flags.end(), extra.begin(), extra.end());
  absl::StatusOr<std::unique_ptr<NodeProcess>> node =
      NodeProcess::Start(name, data_dir, flags, listen);
  EXPECT_TRUE(node.ok()) << node.status();
  return node.ok() ? *std::move(node) : nullptr;
}

// `tally verify` of the node: its index describes its table exactly.
void ExpectVerified(const std::string& address) {
  const CommandResult r =
      RunTally({"verify", "--node", address}, absl::Seconds(120));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
}

// `count` single-row transactions on `server`, each an UPDATE (or an INSERT
// of a new key) of t, with values naming `writer` and the step.
void Write(MariaDbServer& server, const std::string& writer, int first_id,
           int ids, int count) {
  std::unique_ptr<mariadb::Connection> c = Connect(server);
  ASSERT_NE(c, nullptr);
  for (int i = 0; i < count; ++i) {
    const int id = first_id + (i * 7919) % ids;
    const absl::Status s = c->Exec(absl::StrCat(
        "INSERT INTO t VALUES (", id, ", ", i, ", '", writer, "-", i,
        "') ON DUPLICATE KEY UPDATE a = VALUES(a), b = VALUES(b)"));
    ASSERT_TRUE(s.ok()) << s;
  }
}

TEST(MariaDbSidecarTest, TwoSidecarsConvergeUnderWritesOnBothSides) {
  TALLY_SKIP_UNLESS_MARIADB();
  std::unique_ptr<MariaDbServer> m1 = StartServerWithTable(3000);
  std::unique_ptr<MariaDbServer> m2 = StartServerWithTable(0);
  ASSERT_NE(m1, nullptr);
  ASSERT_NE(m2, nullptr);
  TempDir d1, d2;
  const std::string a1 = FreeLoopbackAddress();
  const std::string a2 = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> n1 =
      StartMariaDbSidecar("m-1", d1.path(), *m1, a1, {a2});
  std::unique_ptr<NodeProcess> n2 =
      StartMariaDbSidecar("m-2", d2.path(), *m2, a2, {a1});
  ASSERT_NE(n1, nullptr);
  ASSERT_NE(n2, nullptr);
  ASSERT_TRUE(WaitFor([&] { return Following(a1) && Following(a2); },
                      absl::Seconds(60)))
      << n1->Log() << n2->Log();
  // The second server starts empty: the first's rows reach it.
  ASSERT_TRUE(WaitFor([&] { return MariaDbMd5(*m1) == MariaDbMd5(*m2); },
                      absl::Seconds(60)))
      << n2->Log();

  // 5,000 transactions on each side at once: each side's own keys, and
  // 100 keys both write.
  std::thread w1([&] { Write(*m1, "one", 1, 2000, 4000); });
  std::thread w2([&] { Write(*m2, "two", 2001, 2000, 4000); });
  std::thread h1([&] { Write(*m1, "hot1", 5001, 100, 1000); });
  std::thread h2([&] { Write(*m2, "hot2", 5001, 100, 1000); });
  w1.join();
  w2.join();
  h1.join();
  h2.join();
  ASSERT_TRUE(WaitFor([&] { return MariaDbMd5(*m1) == MariaDbMd5(*m2); },
                      absl::Seconds(120)))
      << n1->Log() << n2->Log();
  // Each side's own keys hold its last write on both servers.
  for (MariaDbServer* m : {m1.get(), m2.get()}) {
    absl::StatusOr<std::string> mine = m->Execute(
        "SELECT count(*) FROM t WHERE (id BETWEEN 1 AND 2000 AND b NOT LIKE "
        "'one-%') OR (id BETWEEN 2001 AND 4000 AND b NOT LIKE 'two-%')",
        "public");
    ASSERT_TRUE(mine.ok());
    EXPECT_EQ(*mine, "0");
  }
  ExpectVerified(a1);
  ExpectVerified(a2);
  // No echo: once converged, nothing moves. Each node captured its own
  // transactions (and replayed the other's applies as its own), and the
  // counts stay still.
  const std::string s1 = StatusJson(a1);
  const long long captured1 = JsonNumber(s1, "transactions_captured");
  const long long own1 = JsonNumber(s1, "own_transactions_replayed");
  EXPECT_GT(own1, 0) << s1;
  // The applications' 5,000, and none of the peer's echoed back as local.
  EXPECT_LE(captured1, 5000 + 5) << s1;
  absl::SleepFor(absl::Seconds(4));
  EXPECT_EQ(JsonNumber(StatusJson(a1), "transactions_captured"), captured1);
  EXPECT_EQ(MariaDbMd5(*m1), MariaDbMd5(*m2));
  // The text view speaks of the MariaDB side: server id, GTID position.
  const CommandResult text =
      RunTally({"status", "--node", a1}, absl::Seconds(10));
  EXPECT_EQ(text.exit_code, 0) << text.err;
  for (const char* want :
       {"mariadb://tally@", "following", "server id", "indexed GTID 0-",
        "1 (last: no index position stored (a first start))"}) {
    EXPECT_TRUE(absl::StrContains(text.out, want)) << want << "\n" << text.out;
  }
  EXPECT_FALSE(absl::StrContains(text.out, "OTHER NUMBER")) << text.out;
  EXPECT_TRUE(absl::StrContains(StatusJson(a1), R"("engine":"mariadb")"));
}

TEST(MariaDbSidecarTest, PostgresAndMariaDbSidecarsReplicateIntoEachOther) {
  TALLY_SKIP_UNLESS_MARIADB();
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<MariaDbServer> m = StartServerWithTable(2000);
  ASSERT_NE(m, nullptr);
  std::unique_ptr<PgCluster> pg = pgtest::StartTableCluster();
  ASSERT_NE(pg, nullptr);
  TempDir dm, dp;
  const std::string am = FreeLoopbackAddress();
  const std::string ap = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> nm =
      StartMariaDbSidecar("maria", dm.path(), *m, am, {ap});
  std::unique_ptr<NodeProcess> np =
      pgtest::StartSidecar("pg", dp.path(), *pg, ap, {am});
  ASSERT_NE(nm, nullptr);
  ASSERT_NE(np, nullptr);
  ASSERT_TRUE(WaitFor([&] { return Following(am) && Following(ap); },
                      absl::Seconds(60)))
      << nm->Log() << np->Log();
  ASSERT_TRUE(
      WaitFor([&] { return MariaDbMd5(*m) == PgMd5(*pg); }, absl::Seconds(60)))
      << nm->Log() << np->Log();
  // Writes on both engines: each reaches the other once.
  ASSERT_TRUE(pg->Execute("INSERT INTO t SELECT g, g, 'pg-' || g FROM "
                          "generate_series(10001, 10500) g; UPDATE t SET b = "
                          "'pg-upd' WHERE id <= 100; DELETE FROM t WHERE id "
                          "BETWEEN 101 AND 150")
                  .ok());
  ASSERT_TRUE(m->Execute("INSERT INTO t SELECT seq, seq, CONCAT('m-', seq) "
                         "FROM seq_20001_to_20500; UPDATE t SET b = NULL "
                         "WHERE id BETWEEN 1001 AND 1100; DELETE FROM t WHERE "
                         "id BETWEEN 1500 AND 1550",
                         "public")
                  .ok());
  ASSERT_TRUE(
      WaitFor([&] { return MariaDbMd5(*m) == PgMd5(*pg); }, absl::Seconds(60)))
      << nm->Log() << np->Log();
  absl::StatusOr<std::string> count = m->Execute(
      "SELECT count(*) FROM t WHERE b = 'pg-upd' OR b LIKE 'pg-%'", "public");
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(*count, "600");
  ExpectVerified(am);
  ExpectVerified(ap);
  // No echo: the MariaDB node captured only its own application's
  // transactions (3 statements), and nothing moves once converged.
  const long long captured =
      JsonNumber(StatusJson(am), "transactions_captured");
  EXPECT_LE(captured, 3 + 3);
  absl::SleepFor(absl::Seconds(4));
  EXPECT_EQ(JsonNumber(StatusJson(am), "transactions_captured"), captured);
}

TEST(MariaDbSidecarTest, RingOfThreeCarriesEveryWriteAroundWithoutEchoes) {
  TALLY_SKIP_UNLESS_MARIADB();
  std::vector<std::unique_ptr<MariaDbServer>> servers;
  std::vector<std::unique_ptr<TempDir>> dirs;
  std::vector<std::string> addresses;
  for (int i = 0; i < 3; ++i) {
    servers.push_back(StartServerWithTable(i == 0 ? 1000 : 0));
    ASSERT_NE(servers.back(), nullptr);
    dirs.push_back(std::make_unique<TempDir>());
    addresses.push_back(FreeLoopbackAddress());
  }
  // Each node peers only the next: a change reaches the third through the
  // second's feed.
  std::vector<std::unique_ptr<NodeProcess>> nodes;
  for (int i = 0; i < 3; ++i) {
    nodes.push_back(StartMariaDbSidecar(absl::StrCat("r-", i), dirs[i]->path(),
                                        *servers[i], addresses[i],
                                        {addresses[(i + 1) % 3]}));
    ASSERT_NE(nodes.back(), nullptr);
  }
  auto all_equal = [&] {
    const std::string md5 = MariaDbMd5(*servers[0]);
    return md5 == MariaDbMd5(*servers[1]) && md5 == MariaDbMd5(*servers[2]);
  };
  ASSERT_TRUE(WaitFor(all_equal, absl::Seconds(60)))
      << nodes[0]->Log() << nodes[1]->Log() << nodes[2]->Log();
  std::vector<std::thread> writers;
  for (int i = 0; i < 3; ++i) {
    writers.emplace_back([&, i] {
      Write(*servers[i], absl::StrCat("w", i), 2000 + 1000 * i, 500, 1000);
    });
  }
  for (std::thread& w : writers) w.join();
  ASSERT_TRUE(WaitFor(all_equal, absl::Seconds(90)))
      << nodes[0]->Log() << nodes[1]->Log() << nodes[2]->Log();
  for (int i = 0; i < 3; ++i) {
    ExpectVerified(addresses[i]);
    const std::string status = StatusJson(addresses[i]);
    // Its own 1,000, nothing of the others' captured as its own.
    EXPECT_LE(JsonNumber(status, "transactions_captured"), 1000 + 2) << status;
  }
}

TEST(MariaDbSidecarTest, KilledMidStreamResumesWithNothingLostOrTwice) {
  TALLY_SKIP_UNLESS_MARIADB();
  std::unique_ptr<MariaDbServer> m1 = StartServerWithTable(2000);
  std::unique_ptr<MariaDbServer> m2 = StartServerWithTable(2000);
  ASSERT_NE(m1, nullptr);
  ASSERT_NE(m2, nullptr);
  TempDir d1, d2;
  const std::string a1 = FreeLoopbackAddress();
  const std::string a2 = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> n1 =
      StartMariaDbSidecar("k-1", d1.path(), *m1, a1, {a2});
  std::unique_ptr<NodeProcess> n2 =
      StartMariaDbSidecar("k-2", d2.path(), *m2, a2, {a1});
  ASSERT_TRUE(WaitFor([&] { return Following(a1) && Following(a2); },
                      absl::Seconds(60)));
  // SIGKILL the first node while both servers take writes, then start it
  // again on the same store: it resumes from its stored GTID state.
  std::thread w1([&] { Write(*m1, "one", 1, 1000, 3000); });
  std::thread w2([&] { Write(*m2, "two", 1001, 1000, 3000); });
  absl::SleepFor(absl::Milliseconds(700));
  n1->Kill();
  w1.join();
  w2.join();
  n1 = StartMariaDbSidecar("k-1", d1.path(), *m1, a1, {a2});
  ASSERT_NE(n1, nullptr);
  ASSERT_TRUE(WaitFor([&] { return MariaDbMd5(*m1) == MariaDbMd5(*m2); },
                      absl::Seconds(120)))
      << n1->Log() << n2->Log();
  ExpectVerified(a1);
  ExpectVerified(a2);
  // Resumed, not rebuilt (no "building the index" after the restart).
  EXPECT_EQ(JsonNumber(StatusJson(a1), "builds"), 0) << n1->Log();
}

TEST(MariaDbSidecarTest, ServerKilledMidStreamIsFollowedAgainOnceBack) {
  TALLY_SKIP_UNLESS_MARIADB();
  std::unique_ptr<MariaDbServer> m1 = StartServerWithTable(2000);
  std::unique_ptr<MariaDbServer> m2 = StartServerWithTable(2000);
  ASSERT_NE(m1, nullptr);
  ASSERT_NE(m2, nullptr);
  TempDir d1, d2;
  const std::string a1 = FreeLoopbackAddress();
  const std::string a2 = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> n1 =
      StartMariaDbSidecar("s-1", d1.path(), *m1, a1, {a2});
  std::unique_ptr<NodeProcess> n2 =
      StartMariaDbSidecar("s-2", d2.path(), *m2, a2, {a1});
  ASSERT_TRUE(WaitFor([&] { return Following(a1) && Following(a2); },
                      absl::Seconds(60)));
  // The first server crashes while the second's writes arrive to be
  // applied to it; it comes back, and its own writes resume too.
  std::thread w2([&] { Write(*m2, "two", 1001, 1000, 2000); });
  absl::SleepFor(absl::Milliseconds(300));
  ASSERT_TRUE(m1->Kill().ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        return absl::StrContains(StatusJson(a1), R"("phase":"reconnecting")");
      },
      absl::Seconds(30)))
      << StatusJson(a1);
  w2.join();
  ASSERT_TRUE(m1->Restart().ok());
  Write(*m1, "one", 1, 1000, 1000);
  ASSERT_TRUE(WaitFor([&] { return MariaDbMd5(*m1) == MariaDbMd5(*m2); },
                      absl::Seconds(120)))
      << n1->Log() << n2->Log();
  EXPECT_TRUE(Following(a1));
  ExpectVerified(a1);
  ExpectVerified(a2);
}

// `txns` transactions of `rows` new keys each from `first` (b =
// 'tag-id'), `gap` apart, so that the sidecar stores (or applies) them in
// several writes.
void InsertTransactions(MariaDbServer& server, long long first, int txns,
                        int rows, absl::string_view tag, absl::Duration gap) {
  for (int i = 0; i < txns; ++i) {
    const long long lo = first + static_cast<long long>(i) * rows;
    absl::StatusOr<std::string> r = server.Execute(
        absl::StrCat("INSERT INTO t SELECT seq, seq, CONCAT('", tag,
                     "-', seq) FROM seq_", lo, "_to_", lo + rows - 1),
        "public");
    ASSERT_TRUE(r.ok()) << r.status();
    absl::SleepFor(gap);
  }
}

// Two servers with `rows` rows each and a sidecar on each peering the
// other (A with `extra_a` flags too), both following.
struct PeeredPair {
  std::unique_ptr<MariaDbServer> ma, mb;
  TempDir da, db;
  std::string aa = FreeLoopbackAddress();
  std::string ab = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> na, nb;
};
void StartPeeredPair(const std::string& prefix, int rows, PeeredPair* p,
                     const std::vector<std::string>& extra_a = {}) {
  p->ma = StartServerWithTable(rows);
  p->mb = StartServerWithTable(rows);
  ASSERT_NE(p->ma, nullptr);
  ASSERT_NE(p->mb, nullptr);
  p->na = StartMariaDbSidecar(prefix + "-a", p->da.path(), *p->ma, p->aa,
                              {p->ab}, extra_a);
  p->nb =
      StartMariaDbSidecar(prefix + "-b", p->db.path(), *p->mb, p->ab, {p->aa});
  ASSERT_NE(p->na, nullptr);
  ASSERT_NE(p->nb, nullptr);
  ASSERT_TRUE(WaitFor([&] { return Following(p->aa) && Following(p->ab); },
                      absl::Seconds(60)))
      << p->na->Log() << p->nb->Log();
}

// tallyd dies after a store write of captured rows, while the application
// goes on writing; restarted, it resumes from the GTID state it stored
// with them. First after the 3rd of 12 small transactions; then in the
// middle of one 25,000-row transaction, stored in parts of 10,000 (the
// GTID state goes with the last part only, so the restart reads the whole
// transaction again and must not index its first parts twice).
TEST(MariaDbSidecarTest, CaptureKilledAfterAStoreWriteIndexesEachChangeOnce) {
  TALLY_SKIP_UNLESS_MARIADB();
  std::unique_ptr<MariaDbServer> m = StartServerWithTable(0);
  ASSERT_NE(m, nullptr);
  TempDir d;
  const std::string a = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> n = StartMariaDbSidecar(
      "crash-c", d.path(), *m, a, {},
      {"--test-fault-point", "capture-after-index-commit:3"});
  ASSERT_NE(n, nullptr);
  ASSERT_TRUE(WaitFor([&] { return Following(a); }, absl::Seconds(60)))
      << n->Log();
  ASSERT_NO_FATAL_FAILURE(
      InsertTransactions(*m, 1, 12, 10, "a", absl::Milliseconds(150)));
  ASSERT_NO_FATAL_FAILURE(ExpectDiedAt(*n, "capture-after-index-commit"));
  // While it is down: 50 updates, 20 deletes.
  ASSERT_TRUE(m->Execute("UPDATE t SET a = a + 1000 WHERE id <= 50; DELETE "
                         "FROM t WHERE id BETWEEN 101 AND 120",
                         "public")
                  .ok());
  n = StartMariaDbSidecar(
      "crash-c", d.path(), *m, a, {},
      {"--test-fault-point", "capture-after-index-commit:2"});
  ASSERT_NE(n, nullptr);
  // Its first store write is what it missed; the second, a part of this.
  ASSERT_TRUE(WaitFor([&] { return Following(a); }, absl::Seconds(60)))
      << n->Log();
  ASSERT_NO_FATAL_FAILURE(
      InsertTransactions(*m, 1001, 1, 25000, "big", absl::ZeroDuration()));
  ASSERT_NO_FATAL_FAILURE(ExpectDiedAt(*n, "capture-after-index-commit"));

  n = StartMariaDbSidecar("crash-c", d.path(), *m, a, {});
  ASSERT_NE(n, nullptr);
  // 120 inserts + 50 updates + 20 deletes + 25,000 inserts, one log entry
  // each.
  ASSERT_NO_FATAL_FAILURE(ExpectLogSettlesAt(a, 25190, *n));
  ExpectVerified(a);
  EXPECT_EQ(JsonNumber(StatusJson(a), "builds"), 0) << n->Log();
}

// Two MariaDB sidecars peering each other; tallyd A is killed in an apply
// of B's rows at a fault point — the 7th apply, of updates, which A makes
// under the compare-and-swap — then restarted without it.
class MariaDbApplyCrash : public ::testing::TestWithParam<const char*> {};

TEST_P(MariaDbApplyCrash, AppliesEveryPeerRowOnceWithoutEcho) {
  TALLY_SKIP_UNLESS_MARIADB();
  const std::string point = GetParam();
  PeeredPair p;
  ASSERT_NO_FATAL_FAILURE(StartPeeredPair(
      "crash", 0, &p, {"--test-fault-point", absl::StrCat(point, ":7")}));
  MariaDbServer& ma = *p.ma;
  MariaDbServer& mb = *p.mb;
  const std::string& aa = p.aa;
  const std::string& ab = p.ab;
  std::unique_ptr<NodeProcess>& na = p.na;
  std::unique_ptr<NodeProcess>& nb = p.nb;
  // B's application: 5 transactions of inserts, then 5 of updates of those
  // rows, each reaching A in an apply of its own; B goes on while A is
  // down.
  ASSERT_NO_FATAL_FAILURE(
      InsertTransactions(mb, 1001, 5, 10, "b", absl::Milliseconds(300)));
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(mb.Execute(absl::StrCat("UPDATE t SET a = a + 1, b = "
                                        "'b-upd' WHERE id BETWEEN ",
                                        1001 + i * 10, " AND ", 1010 + i * 10),
                           "public")
                    .ok());
    absl::SleepFor(absl::Milliseconds(300));
  }
  ASSERT_NO_FATAL_FAILURE(ExpectDiedAt(*na, point));
  ASSERT_NO_FATAL_FAILURE(
      InsertTransactions(mb, 1051, 2, 10, "b", absl::ZeroDuration()));

  na = StartMariaDbSidecar("crash-a", p.da.path(), ma, aa, {ab});
  ASSERT_NE(na, nullptr);
  ASSERT_TRUE(WaitFor([&] { return MariaDbMd5(ma) == MariaDbMd5(mb); },
                      absl::Seconds(60)))
      << na->Log() << nb->Log();
  // Each of B's 70 inserts and 50 updates is one change in each log:
  // applied once on A (a second apply, or A's capture taking its own apply
  // for a local change, would add entries), nothing echoed to B.
  ASSERT_NO_FATAL_FAILURE(ExpectLogSettlesAt(aa, 120, *na));
  ASSERT_NO_FATAL_FAILURE(ExpectLogSettlesAt(ab, 120, *nb));
  EXPECT_EQ(MariaDbMd5(ma), MariaDbMd5(mb));
  EXPECT_EQ(*ma.Execute("SELECT count(*) FROM t WHERE b = 'b-upd'", "public"),
            "50");
  EXPECT_EQ(JsonNumber(StatusJson(ab), "rows_applied"), 0) << StatusJson(ab);
  ExpectVerified(aa);
  ExpectVerified(ab);
}

INSTANTIATE_TEST_SUITE_P(FaultPoints, MariaDbApplyCrash,
                         ::testing::Values("apply-before-db-commit",
                                           "apply-after-db-commit",
                                           "apply-after-store-commit"),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           std::string name;
                           for (const char* c = p.param; *c != '\0'; ++c) {
                             if (*c != '-') name.push_back(*c);
                           }
                           return name;
                         });

// The application on A holds a row's lock for 4 s, writing it; the peer's
// write of that row commits on B just after (older than the application's
// commit) and reaches A's sidecar while the lock is held. The apply never
// waits the application out or breaks its transaction, and the
// application's write, the last, ends on both servers.
TEST(MariaDbSidecarTest, AnApplicationHoldingARowLockWinsOverAnOlderPeerWrite) {
  TALLY_SKIP_UNLESS_MARIADB();
  PeeredPair p;
  ASSERT_NO_FATAL_FAILURE(StartPeeredPair("lock", 10, &p));
  MariaDbServer& ma = *p.ma;
  MariaDbServer& mb = *p.mb;
  std::unique_ptr<mariadb::Connection> app = Connect(ma);
  ASSERT_NE(app, nullptr);
  ASSERT_TRUE(app->Exec("START TRANSACTION").ok());
  ASSERT_TRUE(app->Exec("UPDATE t SET a = 1, b = 'app' WHERE id = 7").ok());
  ASSERT_TRUE(
      mb.Execute("UPDATE t SET a = 2, b = 'peer' WHERE id = 7", "public").ok());
  absl::SleepFor(absl::Seconds(4));
  const absl::Status committed = app->Exec("COMMIT");
  ASSERT_TRUE(committed.ok()) << committed;
  auto row = [](MariaDbServer& m) {
    absl::StatusOr<std::string> r =
        m.Execute("SELECT CONCAT(a, b) FROM t WHERE id = 7", "public");
    return r.ok() ? *r : r.status().ToString();
  };
  EXPECT_TRUE(WaitFor([&] { return row(ma) == "1app" && row(mb) == "1app"; },
                      absl::Seconds(20)))
      << "a: " << row(ma) << " b: " << row(mb) << "\n"
      << p.na->Log() << p.nb->Log();
  // And they stay so over three sync intervals.
  const absl::Time until = absl::Now() + absl::Seconds(3);
  while (absl::Now() < until) {
    ASSERT_EQ(row(ma), "1app");
    ASSERT_EQ(row(mb), "1app");
    absl::SleepFor(absl::Milliseconds(250));
  }
  EXPECT_EQ(MariaDbMd5(ma), MariaDbMd5(mb));
}

// Rows of t with b = `b` and id in [lo, hi], as text.
std::string CountB(MariaDbServer& server, const std::string& b, int lo,
                   int hi) {
  absl::StatusOr<std::string> n =
      server.Execute(absl::StrCat("SELECT COUNT(*) FROM t WHERE b = '", b,
                                  "' AND id BETWEEN ", lo, " AND ", hi),
                     "public");
  return n.ok() ? *n : n.status().ToString();
}

// A's store is deleted while its application writes; the server's index
// marker tells the loss from a first start, and the rows A's application
// wrote since the first build (read from the binary log) win over the
// peer's older versions instead of being replaced by them.
TEST(MariaDbSidecarTest, LocalWritesMadeWhileDownSurviveALostIndex) {
  TALLY_SKIP_UNLESS_MARIADB();
  PeeredPair p;
  ASSERT_NO_FATAL_FAILURE(StartPeeredPair("loss", 100, &p));
  MariaDbServer& ma = *p.ma;
  MariaDbServer& mb = *p.mb;
  auto exec = [](MariaDbServer& m, const std::string& sql) {
    absl::StatusOr<std::string> r = m.Execute(sql, "public");
    ASSERT_TRUE(r.ok()) << r.status();
  };
  // B writes rows 1-10 and A rows 11-20; each reaches the other, so the
  // peers hold captured (non-bootstrap) versions of them.
  exec(mb, "UPDATE t SET b = 'b1' WHERE id <= 10");
  exec(ma, "UPDATE t SET b = 'a1' WHERE id BETWEEN 11 AND 20");
  ASSERT_TRUE(WaitFor(
      [&] {
        return CountB(ma, "b1", 1, 10) == "10" &&
               CountB(mb, "a1", 11, 20) == "10";
      },
      absl::Seconds(30)))
      << p.na->Log() << p.nb->Log();
  ASSERT_EQ(MariaDbMd5(ma), MariaDbMd5(mb));

  // A stops; its application goes on: updates of rows B wrote last (1-5),
  // of rows A wrote last (11-15), of rows nobody wrote since the first
  // build (21-25); inserts; deletes. B's application changes other rows.
  EXPECT_EQ(p.na->Stop(), 0) << p.na->Log();
  exec(ma,
       "UPDATE t SET b = 'a-down' WHERE id <= 5 OR id BETWEEN 11 AND 15 OR id "
       "BETWEEN 21 AND 25");
  exec(ma, "INSERT INTO t SELECT seq, seq, 'a-new' FROM seq_1001_to_1010");
  exec(ma, "DELETE FROM t WHERE id BETWEEN 31 AND 35");
  exec(mb, "UPDATE t SET b = 'b-down' WHERE id BETWEEN 41 AND 45");

  // A's index is lost.
  std::filesystem::remove_all(p.da.path());
  std::filesystem::create_directories(p.da.path());
  p.na = StartMariaDbSidecar("loss-a", p.da.path(), ma, p.aa, {p.ab});
  ASSERT_NE(p.na, nullptr);
  auto summary = [&] {
    return absl::StrCat("a: a-down ", CountB(ma, "a-down", 1, 100), ", a-new ",
                        CountB(ma, "a-new", 1001, 1010), "; b: a-down ",
                        CountB(mb, "a-down", 1, 100), ", a-new ",
                        CountB(mb, "a-new", 1001, 1010), "\n");
  };
  ASSERT_TRUE(WaitFor(
      [&] {
        return Following(p.aa) && CountB(mb, "a-down", 1, 100) == "15" &&
               CountB(mb, "a-new", 1001, 1010) == "10" &&
               CountB(ma, "b-down", 41, 45) == "5" &&
               MariaDbMd5(ma) == MariaDbMd5(mb);
      },
      absl::Seconds(60)))
      << summary() << p.na->Log() << p.nb->Log();
  // ... and stay there over three sync intervals.
  absl::SleepFor(absl::Seconds(3));
  EXPECT_EQ(MariaDbMd5(ma), MariaDbMd5(mb));
  for (MariaDbServer* m : {&ma, &mb}) {
    EXPECT_EQ(CountB(*m, "a-down", 1, 5), "5");
    EXPECT_EQ(CountB(*m, "a-down", 11, 15), "5");
    EXPECT_EQ(CountB(*m, "a-down", 21, 25), "5");
    EXPECT_EQ(CountB(*m, "b1", 6, 10), "5");
    EXPECT_EQ(CountB(*m, "a1", 16, 20), "5");
    EXPECT_EQ(CountB(*m, "a-new", 1001, 1010), "10");
    EXPECT_EQ(CountB(*m, "b-down", 41, 45), "5");
    // A's deletes won over B's live rows.
    absl::StatusOr<std::string> gone = m->Execute(
        "SELECT COUNT(*) FROM t WHERE id BETWEEN 31 AND 36", "public");
    EXPECT_EQ(gone.ok() ? *gone : gone.status().ToString(), "1");
  }
  ExpectVerified(p.aa);
  ExpectVerified(p.ab);

  // The loss was told apart from a first start, logged and shown: rows
  // 1-5, 11-20, 21-25 and 1001-1010 were last written by A's application
  // since the first build; the others (the seed, B's rows 6-10 applied by
  // tally) kept the bootstrap version.
  EXPECT_TRUE(
      absl::StrContains(p.na->Log(),
                        "index lost: table public.t: 30 of 105 rows were last "
                        "written here and got fresh versions (the rest kept "
                        "the bootstrap version); 5 rows deleted here got "
                        "tombstones"))
      << p.na->Log();
  const std::string json = StatusJson(p.aa);
  EXPECT_TRUE(absl::StrContains(json, R"("index_lost":true)")) << json;
  EXPECT_EQ(JsonNumber(json, "index_loss_fresh_rows"), 30) << json;
  EXPECT_FALSE(absl::StrContains(p.nb->Log(), "index lost")) << p.nb->Log();
}

// A MariaDB sidecar kept equal to a master it may only query: a MariaDB
// one (its `shop.t`) and a PostgreSQL one (its `public.t`). The replica
// starts as an older copy with rows of its own; the master moves on while
// the sidecar runs. Each side's own md5 proves the copy exact.
TEST(MariaDbSidecarTest, AMariaDbSidecarCopiesAMariaDbMaster) {
  TALLY_SKIP_UNLESS_MARIADB();
  std::unique_ptr<MariaDbServer> replica = StartServerWithTable(4000);
  ASSERT_NE(replica, nullptr);
  absl::StatusOr<std::unique_ptr<MariaDbServer>> m = MariaDbServer::Start();
  ASSERT_TRUE(m.ok()) << m.status();
  MariaDbServer& master = **m;
  ASSERT_TRUE(
      master
          .Execute(
              "CREATE DATABASE shop; USE shop; CREATE TABLE t (id bigint "
              "PRIMARY KEY, a int, b text) DEFAULT CHARSET utf8mb4; INSERT "
              "INTO t SELECT seq, seq, CONCAT('v', seq) FROM seq_1_to_5000; "
              "UPDATE t SET b = REPEAT('x', 60000) WHERE id = 8; UPDATE t "
              "SET a = NULL WHERE id = 9; CREATE USER reader@'127.0.0.1' "
              "IDENTIFIED BY 's3cret-pw'; GRANT SELECT ON shop.t TO "
              "reader@'127.0.0.1'")
          .ok());
  ASSERT_TRUE(replica
                  ->Execute("UPDATE t SET a = -a WHERE id % 97 = 0; INSERT "
                            "INTO t VALUES (90001, 1, 'only here')",
                            "public")
                  .ok());
  ASSERT_NE(MariaDbMd5(*replica), MariaDbMd5(master, "shop"));
  TempDir dir;
  const std::string address = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> node = StartMariaDbSidecar(
      "copy", dir.path(), *replica, address,
      {absl::StrCat("mariadb://reader:s3cret-pw@127.0.0.1:", master.port(),
                    "/shop,role=source")});
  ASSERT_NE(node, nullptr);
  ASSERT_TRUE(WaitFor(
      [&] { return MariaDbMd5(*replica) == MariaDbMd5(master, "shop"); },
      absl::Seconds(60)))
      << node->Log() << StatusJson(address);
  std::string status = StatusJson(address);
  EXPECT_FALSE(absl::StrContains(status, "s3cret-pw")) << status;
  EXPECT_GE(SourceNumber(status, "rows_copied"), 1000 + 40) << status;
  EXPECT_GE(SourceNumber(status, "rows_deleted"), 1) << status;

  ASSERT_TRUE(master
                  .Execute("UPDATE t SET b = 'changed' WHERE id <= 50; DELETE "
                           "FROM t WHERE id BETWEEN 100 AND 120; INSERT INTO t "
                           "VALUES (30000, 3, 'new')",
                           "shop")
                  .ok());
  ASSERT_TRUE(WaitFor(
      [&] { return MariaDbMd5(*replica) == MariaDbMd5(master, "shop"); },
      absl::Seconds(60)))
      << node->Log() << StatusJson(address);
  ExpectVerified(address);
  // The copies went through the apply: none was captured as the replica's
  // own application's write.
  EXPECT_LE(JsonNumber(StatusJson(address), "transactions_captured"), 2)
      << StatusJson(address);
}

TEST(MariaDbSidecarTest, AMariaDbSidecarCopiesAPostgresMaster) {
  TALLY_SKIP_UNLESS_MARIADB();
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<MariaDbServer> replica = StartServerWithTable(2000);
  ASSERT_NE(replica, nullptr);
  std::unique_ptr<PgCluster> master = pgtest::StartTableCluster();
  ASSERT_NE(master, nullptr);
  ASSERT_TRUE(master
                  ->Execute("INSERT INTO t SELECT g, g, 'pg-' || g FROM "
                            "generate_series(1, 3000) g; UPDATE t SET b = NULL "
                            "WHERE id = 5; CREATE ROLE reader LOGIN PASSWORD "
                            "'s3cret-pw'; GRANT SELECT ON t TO reader")
                  .ok());
  TempDir dir;
  const std::string address = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> node = StartMariaDbSidecar(
      "copy", dir.path(), *replica, address,
      {absl::StrCat("postgresql://reader:s3cret-pw@127.0.0.1:", master->port(),
                    "/postgres,role=source")});
  ASSERT_NE(node, nullptr);
  ASSERT_TRUE(WaitFor([&] { return MariaDbMd5(*replica) == PgMd5(*master); },
                      absl::Seconds(60)))
      << node->Log() << StatusJson(address);
  ASSERT_TRUE(master
                  ->Execute("UPDATE t SET a = -a WHERE id <= 30; DELETE FROM t "
                            "WHERE id > 2990")
                  .ok());
  ASSERT_TRUE(WaitFor([&] { return MariaDbMd5(*replica) == PgMd5(*master); },
                      absl::Seconds(60)))
      << node->Log() << StatusJson(address);
  EXPECT_FALSE(absl::StrContains(StatusJson(address), "s3cret-pw"));
  ExpectVerified(address);
}

// sysbench's oltp_read_write (an outside workload: hot rows, index and
// non-index updates, deletes then inserts of the same key, range reads)
// against `server`'s sbtest.sbtest1, as root; `command` is prepare or run.
CommandResult Sysbench(MariaDbServer& server, const std::string& command,
                       const std::vector<std::string>& extra) {
  // Debian's sysbench (scripts/install-deps.sh installs it).
  std::vector<std::string> argv = {"/usr/bin/sysbench",
                                   "oltp_read_write",
                                   "--db-driver=mysql",
                                   "--mysql-host=127.0.0.1",
                                   absl::StrCat("--mysql-port=", server.port()),
                                   "--mysql-user=root",
                                   "--mysql-db=sbtest",
                                   "--tables=1"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back(command);
  return testing::RunCommand(argv, absl::Seconds(120));
}

std::string SbtestMd5(MariaDbServer& server) {
  absl::StatusOr<std::string> md5 = server.Execute(
      "SET SESSION group_concat_max_len = 1073741824; SELECT "
      "IFNULL(MD5(GROUP_CONCAT(CONCAT_WS(',', id, k, c, pad) ORDER BY id "
      "SEPARATOR ';')), 'empty') FROM sbtest.sbtest1");
  EXPECT_TRUE(md5.ok()) << md5.status();
  return md5.ok() ? *md5 : "?";
}

// Two sidecars peered, sysbench running on both servers at once over the
// same 2,000 keys (its threads' own deadlocks, which it retries, happen
// without tally too: 8-14 in 10 s on one server alone), and once it stops
// the tables are equal by each server's own md5 and each index equal to
// its table.
TEST(MariaDbSidecarTest, SysbenchOnBothSidesConverges) {
  TALLY_SKIP_UNLESS_MARIADB();
  std::unique_ptr<MariaDbServer> ma = StartServerWithTable(0);
  std::unique_ptr<MariaDbServer> mb = StartServerWithTable(0);
  ASSERT_NE(ma, nullptr);
  ASSERT_NE(mb, nullptr);
  for (MariaDbServer* m : {ma.get(), mb.get()}) {
    ASSERT_TRUE(m->Execute("CREATE DATABASE sbtest DEFAULT CHARSET utf8mb4; "
                           "GRANT SELECT, INSERT, UPDATE, DELETE ON sbtest.* "
                           "TO tally@'127.0.0.1'")
                    .ok());
  }
  // A's rows; B's table empty: the first sessions copy them over.
  CommandResult prepared = Sysbench(*ma, "prepare", {"--table-size=2000"});
  ASSERT_EQ(prepared.exit_code, 0) << prepared.out << prepared.err;
  prepared = Sysbench(*mb, "prepare", {"--table-size=0"});
  ASSERT_EQ(prepared.exit_code, 0) << prepared.out << prepared.err;
  TempDir da, db;
  const std::string aa = FreeLoopbackAddress();
  const std::string ab = FreeLoopbackAddress();
  const std::vector<std::string> table = {"--table", "sbtest.sbtest1"};
  std::unique_ptr<NodeProcess> na =
      StartMariaDbSidecar("sb-a", da.path(), *ma, aa, {ab}, table);
  std::unique_ptr<NodeProcess> nb =
      StartMariaDbSidecar("sb-b", db.path(), *mb, ab, {aa}, table);
  ASSERT_NE(na, nullptr);
  ASSERT_NE(nb, nullptr);
  ASSERT_TRUE(WaitFor([&] { return SbtestMd5(*ma) == SbtestMd5(*mb); },
                      absl::Seconds(60)))
      << na->Log() << nb->Log();

  CommandResult run_a, run_b;
  const std::vector<std::string> run = {"--time=10", "--threads=2",
                                        "--table-size=2000"};
  std::thread on_b([&] { run_b = Sysbench(*mb, "run", run); });
  run_a = Sysbench(*ma, "run", run);
  on_b.join();
  for (const CommandResult* r : {&run_a, &run_b}) {
    ASSERT_EQ(r->exit_code, 0) << r->out << r->err;
    EXPECT_TRUE(absl::StrContains(r->out, "transactions:")) << r->out;
    // The figures, for the test's log.
    for (absl::string_view line : absl::StrSplit(r->out, '\n')) {
      if (absl::StrContains(line, "transactions:") ||
          absl::StrContains(line, "ignored errors:")) {
        std::printf("sysbench: %s\n", std::string(line).c_str());
      }
    }
  }
  ASSERT_TRUE(WaitFor([&] { return SbtestMd5(*ma) == SbtestMd5(*mb); },
                      absl::Seconds(90)))
      << na->Log() << nb->Log();
  ExpectVerified(aa);
  ExpectVerified(ab);
  // And they stay equal: nothing bounces back and forth.
  const std::string sum = SbtestMd5(*ma);
  absl::SleepFor(absl::Seconds(3));
  EXPECT_EQ(SbtestMd5(*ma), sum);
  EXPECT_EQ(SbtestMd5(*mb), sum);
}

// Large values reach the peer whole: rows up to the store's value limit
// (1 MiB; 900 kB here, and 50 of 200 kB in one transaction). A row over the
// limit (15 MB) is not indexed: its keyspace alone is refused, named in the
// status, while the other keyspace goes on replicating; once the row fits
// again, the keyspace takes rows again and converges.
TEST(MariaDbSidecarTest,
     LargeValuesReachThePeerAndAnOversizeRowRefusesItsKeyspaceAlone) {
  TALLY_SKIP_UNLESS_MARIADB();
  std::unique_ptr<MariaDbServer> ma = StartServerWithTable(10);
  std::unique_ptr<MariaDbServer> mb = StartServerWithTable(10);
  ASSERT_NE(ma, nullptr);
  ASSERT_NE(mb, nullptr);
  for (MariaDbServer* m : {ma.get(), mb.get()}) {
    ASSERT_TRUE(m->Execute("CREATE TABLE public.big (id bigint PRIMARY KEY, "
                           "v longtext, w longblob) DEFAULT CHARSET utf8mb4")
                    .ok());
  }
  TempDir da, db;
  const std::string aa = FreeLoopbackAddress();
  const std::string ab = FreeLoopbackAddress();
  const std::vector<std::string> big = {"--table", "public.big"};
  std::unique_ptr<NodeProcess> na =
      StartMariaDbSidecar("big-a", da.path(), *ma, aa, {ab}, big);
  std::unique_ptr<NodeProcess> nb =
      StartMariaDbSidecar("big-b", db.path(), *mb, ab, {aa}, big);
  ASSERT_NE(na, nullptr);
  ASSERT_NE(nb, nullptr);
  ASSERT_TRUE(WaitFor([&] { return Following(aa) && Following(ab); },
                      absl::Seconds(60)));
  auto md5 = [](MariaDbServer& m) {
    absl::StatusOr<std::string> r = m.Execute(
        "SELECT COUNT(*), IFNULL(MD5(GROUP_CONCAT(CONCAT_WS(',', id, "
        "MD5(v), MD5(w)) ORDER BY id)), 'empty') FROM public.big");
    return r.ok() ? *r : r.status().ToString();
  };
  ASSERT_TRUE(ma->Execute("INSERT INTO public.big VALUES (1, REPEAT('x', "
                          "900000), NULL), (2, REPEAT('é', 400000), "
                          "RANDOM_BYTES(1024)); INSERT INTO public.big SELECT "
                          "seq, REPEAT(CHAR(65 + seq % 26), 200000), NULL FROM "
                          "public.seq_10_to_59")
                  .ok());
  ASSERT_TRUE(WaitFor([&] { return md5(*ma) == md5(*mb); }, absl::Seconds(60)))
      << md5(*ma) << " / " << md5(*mb) << na->Log() << nb->Log();

  // A 15 MB row: public.big is refused on A, public.t is not.
  ASSERT_TRUE(ma->Execute("INSERT INTO public.big VALUES (100, REPEAT('y', "
                          "15000000), NULL)")
                  .ok());
  ASSERT_TRUE(WaitFor(
      [&] { return absl::StrContains(StatusJson(aa), R"("state":"refused")"); },
      absl::Seconds(30)))
      << StatusJson(aa) << na->Log();
  EXPECT_TRUE(absl::StrContains(StatusJson(aa), "over the value limit"))
      << StatusJson(aa);
  EXPECT_TRUE(Following(aa)) << StatusJson(aa);
  ASSERT_TRUE(ma->Execute("UPDATE public.t SET b = 'still' WHERE id = 3").ok());
  EXPECT_TRUE(WaitFor([&] { return MariaDbMd5(*ma) == MariaDbMd5(*mb); },
                      absl::Seconds(30)))
      << na->Log() << nb->Log();

  // The row shrinks: the keyspace takes rows again and converges.
  ASSERT_TRUE(
      ma->Execute("UPDATE public.big SET v = 'small' WHERE id = 100").ok());
  ASSERT_TRUE(WaitFor([&] { return md5(*ma) == md5(*mb); }, absl::Seconds(60)))
      << md5(*ma) << " / " << md5(*mb) << na->Log() << nb->Log();
  EXPECT_EQ(md5(*ma).substr(0, 3), "53\t");
  EXPECT_FALSE(absl::StrContains(StatusJson(aa), R"("state":"refused")"));
  ExpectVerified(aa);
  ExpectVerified(ab);
}

// tally get/put/del on a MariaDB sidecar's table: ordinary writes the
// capture indexes and the peer receives.
TEST(MariaDbSidecarTest, GetPutDelByPrimaryKeyReachThePeer) {
  TALLY_SKIP_UNLESS_MARIADB();
  PeeredPair p;
  ASSERT_NO_FATAL_FAILURE(StartPeeredPair("rows", 10, &p));
  MariaDbServer& m1 = *p.ma;
  MariaDbServer& m2 = *p.mb;
  const std::string& a1 = p.aa;
  const std::string& a2 = p.ab;
  CommandResult put = RunTally(
      {"--node", a1, "--keyspace", "public.t", "put", "42", R"({"b":"hi"})"});
  EXPECT_EQ(put.exit_code, 0) << put.out << put.err;
  EXPECT_TRUE(absl::StrContains(put.out, "written to the database")) << put.out;
  CommandResult del =
      RunTally({"--node", a1, "--keyspace", "public.t", "del", "3"});
  EXPECT_EQ(del.exit_code, 0) << del.out << del.err;
  CommandResult get =
      RunTally({"--node", a2, "--keyspace", "public.t", "get", "7"});
  EXPECT_EQ(get.exit_code, 0) << get.out << get.err;
  EXPECT_TRUE(absl::StrContains(get.out, R"("b" : "v7")")) << get.out;
  const CommandResult bad = RunTally(
      {"--node", a1, "--keyspace", "public.t", "put", "4x", R"({"b":"x"})"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(bad.err, "holds integers")) << bad.err;
  ASSERT_TRUE(WaitFor([&] { return MariaDbMd5(m1) == MariaDbMd5(m2); },
                      absl::Seconds(30)))
      << p.na->Log() << p.nb->Log();
  EXPECT_EQ(*m2.Execute("SELECT CONCAT(count(*), ',', SUM(id = 42 AND b = "
                        "'hi'), ',', SUM(id = 3)) FROM t",
                        "public"),
            "10,1,0");
}

TEST(MariaDbSidecarTest, RefusesAServerSetUpWrongNamingTheFix) {
  TALLY_SKIP_UNLESS_MARIADB();
  absl::StatusOr<std::unique_ptr<MariaDbServer>> m =
      MariaDbServer::Start({{"--binlog-row-image=MINIMAL"}});
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE((*m)->Execute("CREATE DATABASE public; CREATE TABLE public.t "
                            "(id bigint PRIMARY KEY, b text)")
                  .ok());
  TempDir d;
  const CommandResult r = testing::RunCommand(
      {testing::TallydPath(), "--name", "bad", "--data-dir", d.path(),
       "--listen", FreeLoopbackAddress(), "--mariadb", (*m)->Url("public"),
       "--table", "public.t"},
      absl::Seconds(30));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "binlog_row_image")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "FULL")) << r.err;
}

// A kept table whose foreign key cascades: the cascaded rows never reach
// the binary log, so tallyd refuses it at start, naming the constraint.
TEST(MariaDbSidecarTest, RefusesATableWhoseForeignKeyCascades) {
  TALLY_SKIP_UNLESS_MARIADB();
  std::unique_ptr<MariaDbServer> m = StartServerWithTable(10);
  ASSERT_NE(m, nullptr);
  ASSERT_TRUE(m->Execute("CREATE TABLE public.c (id bigint PRIMARY KEY, tid "
                         "bigint, CONSTRAINT c_t FOREIGN KEY (tid) REFERENCES "
                         "public.t (id) ON UPDATE CASCADE)")
                  .ok());
  TempDir d;
  const CommandResult r =
      testing::RunCommand({testing::TallydPath(), "--name", "fk", "--data-dir",
                           d.path(), "--listen", FreeLoopbackAddress(),
                           "--mariadb", m->Url("public", "tally", "secret"),
                           "--table", "public.t", "--table", "public.c"},
                          absl::Seconds(30));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(
      r.err,
      "foreign key c_t to public.t is ON DELETE RESTRICT ON UPDATE "
      "CASCADE"))
      << r.err;
}

}  // namespace
}  // namespace tally
