// tallyd as a sidecar to real PostgreSQL servers, started as
// an operator starts it. First the bad input that only the sidecar's
// preparation sees: each refusal exits 1 with one line naming
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

#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
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
 public:
  using ClusterStarter = std::function<std::unique_ptr<PgCluster>()>;

 protected:
  // Fills `pair`: two servers, a sidecar on each peering the other, both
  // following (fatal failures otherwise).
  void StartPeeredPair(PeeredPair* pair);

  // Starts a server with `settings` over the defaults, and a table `t` with a
  // primary key in database `postgres`.
  std::unique_ptr<PgCluster> StartCluster(PgClusterOptions options = {}) {
    return StartTableCluster(options);
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

// The shared keys every side writes: [kSharedFirst, kSharedFirst + 1000).
constexpr long long kSharedFirst = 50001;
constexpr long long kSharedKeys = 1000;

// One side's application writes, each statement its own transaction:
// inserts of [first, first + rows) 100 rows a transaction, updates of the
// odd offsets 100 rows a transaction, a delete of every tenth, an upsert of
// every shared key with `tag` and an update of every third shared key to
// `tag`-last. `writes` gets the number of row changes.
std::vector<std::string> Writes(long long first, const std::string& tag,
                                long long rows, long long* writes) {
  std::vector<std::string> out;
  *writes = 0;
  for (long long i = first; i < first + rows; i += 100) {
    out.push_back(absl::StrCat("INSERT INTO t SELECT g, g, '", tag,
                               "-' || g FROM generate_series(", i, ", ", i + 99,
                               ") g"));
    *writes += 100;
  }
  out.push_back(absl::StrCat(
      "INSERT INTO t SELECT g, 1, '", tag, "' FROM generate_series(",
      kSharedFirst, ", ", kSharedFirst + kSharedKeys - 1,
      ") g ON CONFLICT (id) DO UPDATE SET a = t.a + 1, b = excluded.b"));
  *writes += kSharedKeys;
  for (long long i = first; i < first + rows; i += 200) {
    out.push_back(absl::StrCat("UPDATE t SET a = a + 1000, b = '", tag,
                               "-upd' WHERE id BETWEEN ", i, " AND ", i + 199,
                               " AND (id - ", first, ") % 2 = 1"));
    *writes += 100;
  }
  out.push_back(absl::StrCat("DELETE FROM t WHERE id BETWEEN ", first, " AND ",
                             first + rows - 1, " AND (id - ", first,
                             ") % 10 = 0"));
  *writes += rows / 10;
  out.push_back(absl::StrCat("UPDATE t SET b = '", tag,
                             "-last' WHERE id BETWEEN ", kSharedFirst, " AND ",
                             kSharedFirst + kSharedKeys - 1, " AND (id - ",
                             kSharedFirst, ") % 3 = 0"));
  *writes += (kSharedKeys + 2) / 3;
  return out;
}

// The rows Writes(first, tag, rows) leaves in [first, first + rows), as a
// SELECT.
std::string ExpectedRows(long long first, const std::string& tag,
                         long long rows) {
  return absl::StrCat(
      "SELECT g::bigint AS id, CASE WHEN (g - ", first,
      ") % 2 = 1 THEN g + 1000 ELSE g END::int AS a, CASE WHEN (g - ", first,
      ") % 2 = 1 THEN '", tag, "-upd' ELSE '", tag,
      "-' || g END AS b FROM generate_series(", first, ", ", first + rows - 1,
      ") g WHERE (g - ", first, ") % 10 <> 0");
}

// The shared keys holding what side `tag` wrote last (its upsert's b, or
// its -last for every third key).
std::string SharedKeysFrom(PgCluster& pg, const std::string& tag) {
  absl::StatusOr<std::string> n = pg.Execute(absl::StrCat(
      "SELECT count(*) FROM t WHERE id BETWEEN ", kSharedFirst, " AND ",
      kSharedFirst + kSharedKeys - 1, " AND b = CASE WHEN (id - ", kSharedFirst,
      ") % 3 = 0 THEN '", tag, "-last' ELSE '", tag, "' END"));
  EXPECT_TRUE(n.ok()) << n.status();
  return n.ok() ? *n : "?";
}

std::string RangeMd5(PgCluster& pg, const std::string& from) {
  absl::StatusOr<std::string> md5 = pg.Execute(
      absl::StrCat("SELECT coalesce(md5(string_agg(x::text, ',' ORDER BY "
                   "x.id)), 'empty') FROM (",
                   from, ") x"));
  EXPECT_TRUE(md5.ok()) << md5.status();
  return md5.ok() ? *md5 : "";
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

// One database of a mesh, its sidecar, and what the test wrote on it.
struct MeshSide {
  PgCluster* pg;
  NodeProcess* sidecar;
  std::string tag;       // the value prefix of its writes
  long long first = 0;   // its own keys: [first, first + rows)
  long long writes = 0;  // row changes written
  long long transactions = 0;
};

// Writes(first, tag, rows) on every side, one side after the other (the
// last side is the shared keys' last writer).
void WriteOnEverySide(std::vector<MeshSide>& sides, long long rows) {
  for (MeshSide& side : sides) {
    const std::vector<std::string> statements =
        Writes(side.first, side.tag, rows, &side.writes);
    side.transactions = static_cast<long long>(statements.size());
    ASSERT_TRUE(RunStatements(*side.pg, statements, 1).ok());
  }
}

std::string MeshLogs(const std::vector<MeshSide>& sides) {
  std::string out;
  for (const MeshSide& side : sides) out += side.sidecar->Log();
  return out;
}

// What a mesh must show after WriteOnEverySide: every table
// equal (md5 aggregate) and staying so; every key holding its last
// writer's value; a side's own rows local in its database and under tally's
// origin everywhere else (none came back); each sidecar captured exactly
// the transactions written on its database (no applied one taken for a
// local one) and applied at most the other sides' writes (none twice in a
// loop), then stops applying; every sidecar following with its slot caught
// up.
void ExpectMeshConverged(const std::vector<MeshSide>& sides, long long rows,
                         absl::Duration timeout) {
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::string first = TableMd5(*sides[0].pg, "t");
        if (first == "empty") return false;
        for (const MeshSide& side : sides) {
          if (TableMd5(*side.pg, "t") != first) return false;
        }
        return true;
      },
      timeout))
      <<
      [&] {
        std::string counts;
        for (const MeshSide& side : sides) {
          counts += absl::StrCat(side.tag, ": ",
                                 *side.pg->Execute("SELECT count(*) FROM t"),
                                 " rows\n");
        }
        return counts;
      }()
      << MeshLogs(sides);

  std::vector<long long> applied_before;
  for (const MeshSide& side : sides) {
    applied_before.push_back(
        JsonNumber(StatusJson(side.sidecar->address()), "rows_applied"));
  }
  // They stay equal over three sync intervals (no echo rewrites a row).
  const std::string sum = TableMd5(*sides[0].pg, "t");
  const absl::Time until = absl::Now() + absl::Seconds(3);
  while (absl::Now() < until) {
    for (const MeshSide& side : sides) {
      ASSERT_EQ(TableMd5(*side.pg, "t"), sum) << side.tag;
    }
    absl::SleepFor(absl::Milliseconds(250));
  }

  const MeshSide& last = sides.back();
  long long all_writes = 0;
  for (const MeshSide& side : sides) all_writes += side.writes;
  const std::string own_rows = absl::StrCat(rows - rows / 10);
  const std::string shared = absl::StrCat(kSharedKeys);
  for (size_t i = 0; i < sides.size(); ++i) {
    PgCluster& pg = *sides[i].pg;
    SCOPED_TRACE(absl::StrCat("database ", sides[i].tag));
    for (const MeshSide& writer : sides) {
      // Keys written on one side only hold that side's last value ...
      EXPECT_EQ(RangeMd5(pg, absl::StrCat("SELECT * FROM t WHERE id BETWEEN ",
                                          writer.first, " AND ",
                                          writer.first + rows - 1)),
                RangeMd5(pg, ExpectedRows(writer.first, writer.tag, rows)))
          << writer.tag;
      // ... written locally on that side, and by tally elsewhere.
      const bool here = &writer == &sides[i];
      EXPECT_EQ(CountByOrigin(pg, writer.first, writer.first + rows - 1,
                              /*tally=*/!here),
                own_rows)
          << writer.tag;
      EXPECT_EQ(CountByOrigin(pg, writer.first, writer.first + rows - 1,
                              /*tally=*/here),
                "0")
          << writer.tag;
    }
    // The shared keys hold the last writer's values.
    EXPECT_EQ(SharedKeysFrom(pg, last.tag), shared);
    EXPECT_EQ(CountByOrigin(pg, kSharedFirst, kSharedFirst + kSharedKeys - 1,
                            /*tally=*/&sides[i] != &last),
              shared);

    const std::string json = StatusJson(sides[i].sidecar->address());
    EXPECT_EQ(JsonNumber(json, "transactions_captured"), sides[i].transactions)
        << json;
    const long long applied = JsonNumber(json, "rows_applied");
    EXPECT_EQ(applied, applied_before[i]) << "still applying: " << json;
    EXPECT_GE(applied, rows - rows / 10) << json;
    EXPECT_LE(applied, all_writes - sides[i].writes) << json;
  }

  // No feed ended because a row changed in its table after it was indexed
  // (the capture's later entry carries the change).
  for (const MeshSide& side : sides) {
    EXPECT_THAT(side.sidecar->Log(),
                Not(HasSubstr("ended: ABORTED: Subscribe")))
        << side.tag;
  }

  // Every sidecar follows, its slot caught up.
  for (const MeshSide& side : sides) {
    std::string json;
    EXPECT_TRUE(WaitFor(
        [&] {
          json = StatusJson(side.sidecar->address());
          const long long lag = SlotLagBytes(json);
          return absl::StrContains(json, R"("phase":"following")") &&
                 lag >= 0 && lag < 64 * 1024;
        },
        absl::Seconds(10)))
        << side.tag << ": " << json;
  }
}

// Two databases, a sidecar on each peering the other, 10,000 application
// writes on each (1,000 of them to keys both sides write): ExpectMeshConverged.
TEST_F(PgSidecarTest, TwoDatabasesConverge) {
  TALLY_SKIP_UNLESS_POSTGRES();
  PeeredPair pair;
  ASSERT_NO_FATAL_FAILURE(StartPeeredPair(&pair));
  std::vector<MeshSide> sides = {
      {pair.pg_a.get(), pair.side_a.get(), "a", 1},
      {pair.pg_b.get(), pair.side_b.get(), "b", 10001},
  };
  constexpr long long kRows = 6000;
  ASSERT_NO_FATAL_FAILURE(WriteOnEverySide(sides, kRows));
  for (const MeshSide& side : sides) ASSERT_GE(side.writes, 10000);
  ExpectMeshConverged(sides, kRows, absl::Seconds(40));
}

// Last writer wins follows when each write committed, not when its sidecar
// read it: A's database is written while A's sidecar is down, B's database
// later while B's runs; when A's sidecar comes back, B's newer values stay
// on both databases (A's sidecar, reading its older writes last, used to
// make them win).
TEST_F(PgSidecarTest, AWriteReadLateByItsSidecarDoesNotBeatANewerOne) {
  TALLY_SKIP_UNLESS_POSTGRES();
  PeeredPair pair;
  ASSERT_NO_FATAL_FAILURE(StartPeeredPair(&pair));
  ASSERT_TRUE(pair.pg_a
                  ->Execute("INSERT INTO t SELECT g, g, 'first' FROM "
                            "generate_series(1, 100) g")
                  .ok());
  ASSERT_TRUE(WaitFor(
      [&] { return TableMd5(*pair.pg_b, "t") == TableMd5(*pair.pg_a, "t"); },
      absl::Seconds(30)))
      << pair.side_a->Log() << pair.side_b->Log();

  EXPECT_EQ(pair.side_a->Stop(), 0);
  ASSERT_TRUE(
      pair.pg_a->Execute("UPDATE t SET b = 'older, on a' WHERE id <= 50").ok());
  absl::SleepFor(absl::Milliseconds(300));
  ASSERT_TRUE(
      pair.pg_b->Execute("UPDATE t SET b = 'newer, on b' WHERE id <= 50").ok());
  absl::SleepFor(absl::Milliseconds(1000));
  pair.side_a = StartSidecar("side-a", pair.dir_a.path(), *pair.pg_a,
                             pair.addr_a, {pair.addr_b});
  ASSERT_NE(pair.side_a, nullptr);

  EXPECT_TRUE(WaitFor(
      [&] {
        return *pair.pg_a->Execute(
                   "SELECT count(*) FROM t WHERE b = 'newer, on b'") == "50" &&
               TableMd5(*pair.pg_a, "t") == TableMd5(*pair.pg_b, "t");
      },
      absl::Seconds(30)))
      << "a: "
      << *pair.pg_a->Execute("SELECT count(*) FROM t WHERE b = 'newer, on b'")
      << " newer, b: "
      << *pair.pg_b->Execute("SELECT count(*) FROM t WHERE b = 'newer, on b'")
      << " newer\n"
      << pair.side_a->Log() << pair.side_b->Log();
  EXPECT_EQ(
      *pair.pg_b->Execute("SELECT count(*) FROM t WHERE b = 'older, on a'"),
      "0");
}

// Three databases and their sidecars, started with `links` (i peers j for
// every (i, j)), all following.
struct Three {
  std::unique_ptr<PgCluster> pg[3];
  TempDir dir[3];
  std::string addr[3] = {FreeLoopbackAddress(), FreeLoopbackAddress(),
                         FreeLoopbackAddress()};
  std::unique_ptr<NodeProcess> side[3];

  std::vector<MeshSide> Sides() {
    return {{pg[0].get(), side[0].get(), "a", 1},
            {pg[1].get(), side[1].get(), "b", 10001},
            {pg[2].get(), side[2].get(), "c", 20001}};
  }
};

void StartThree(PgSidecarTest::ClusterStarter start_cluster, Three* three,
                const std::vector<std::pair<int, int>>& links) {
  for (int i = 0; i < 3; ++i) {
    three->pg[i] = start_cluster();
    ASSERT_NE(three->pg[i], nullptr);
  }
  for (int i = 0; i < 3; ++i) {
    std::vector<std::string> peers;
    for (const auto& [from, to] : links) {
      if (from == i) peers.push_back(three->addr[to]);
    }
    three->side[i] = StartSidecar(
        absl::StrCat("side-", std::string(1, 'a' + i)), three->dir[i].path(),
        *three->pg[i], three->addr[i], peers);
    ASSERT_NE(three->side[i], nullptr);
  }
  ASSERT_TRUE(WaitFor(
      [&] {
        for (int i = 0; i < 3; ++i) {
          if (!Following(three->addr[i])) return false;
        }
        return true;
      },
      absl::Seconds(20)))
      << three->side[0]->Log() << three->side[1]->Log()
      << three->side[2]->Log();
}

// A chain A - B - C (A peers B, B peers C, no A - C link): writes on every
// database reach the others through B, with the assertions of
// TwoDatabasesConverge.
TEST_F(PgSidecarTest, ChainOfThree) {
  TALLY_SKIP_UNLESS_POSTGRES();
  Three three;
  ASSERT_NO_FATAL_FAILURE(
      StartThree([this] { return StartCluster(); }, &three, {{0, 1}, {1, 2}}));
  std::vector<MeshSide> sides = three.Sides();
  constexpr long long kRows = 1000;
  ASSERT_NO_FATAL_FAILURE(WriteOnEverySide(sides, kRows));
  ExpectMeshConverged(sides, kRows, absl::Seconds(30));
}

// A ring A - B - C - A (each peers the next both ways): the same.
TEST_F(PgSidecarTest, RingOfThree) {
  TALLY_SKIP_UNLESS_POSTGRES();
  Three three;
  ASSERT_NO_FATAL_FAILURE(
      StartThree([this] { return StartCluster(); }, &three,
                 {{0, 1}, {1, 0}, {1, 2}, {2, 1}, {2, 0}, {0, 2}}));
  std::vector<MeshSide> sides = three.Sides();
  constexpr long long kRows = 1000;
  ASSERT_NO_FATAL_FAILURE(WriteOnEverySide(sides, kRows));
  ExpectMeshConverged(sides, kRows, absl::Seconds(30));
}

// A master and its copy, between databases: B's sidecar peers A's with
// role=source, so B's database becomes an exact copy of A's — rows only in
// B deleted, rows B holds otherwise put back, rows B lacks copied — and
// stays one: what an application changes on B is put back, what changes on
// A arrives. A's database is never written.
TEST_F(PgSidecarTest, AReplicaPeeredWithRoleSourceBecomesAnExactCopy) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg_a = StartCluster();
  std::unique_ptr<PgCluster> pg_b = StartCluster();
  ASSERT_NE(pg_a, nullptr);
  ASSERT_NE(pg_b, nullptr);
  ASSERT_TRUE(pg_a->Execute("INSERT INTO t SELECT g, g, 'row-' || g FROM "
                            "generate_series(1, 2000) g")
                  .ok());
  // B: the first 1,500 rows, 100 of them with other values, and 300 rows
  // A does not have.
  ASSERT_TRUE(pg_b->Execute("INSERT INTO t SELECT g, g, 'row-' || g FROM "
                            "generate_series(1, 1500) g;"
                            "UPDATE t SET a = -1, b = 'mine' WHERE id BETWEEN "
                            "100 AND 199;"
                            "INSERT INTO t SELECT g, g, 'extra' FROM "
                            "generate_series(5001, 5300) g")
                  .ok());
  const std::string source_sum = TableMd5(*pg_a, "t");
  ASSERT_NE(source_sum, TableMd5(*pg_b, "t"));

  TempDir dir_a, dir_b;
  std::unique_ptr<NodeProcess> side_a =
      StartSidecar("side-a", dir_a.path(), *pg_a, FreeLoopbackAddress(), {});
  ASSERT_NE(side_a, nullptr);
  std::unique_ptr<NodeProcess> side_b =
      StartSidecar("side-b", dir_b.path(), *pg_b, FreeLoopbackAddress(),
                   {absl::StrCat(side_a->address(), ",role=source")});
  ASSERT_NE(side_b, nullptr);

  EXPECT_TRUE(WaitFor([&] { return TableMd5(*pg_b, "t") == source_sum; },
                      absl::Seconds(30)))
      << "rows in b: " << *pg_b->Execute("SELECT count(*) FROM t") << "\n"
      << side_a->Log() << side_b->Log();
  EXPECT_EQ(*pg_b->Execute("SELECT count(*) FROM t WHERE id > 5000"), "0");
  EXPECT_EQ(TableMd5(*pg_a, "t"), source_sum);
  EXPECT_EQ(CountByOrigin(*pg_a, 1, 10000, /*tally=*/true), "0");

  // An application changes the copy, the source changes too: the copy's
  // changes are undone, the source's arrive.
  ASSERT_TRUE(pg_b->Execute("UPDATE t SET b = 'changed' WHERE id <= 50;"
                            "DELETE FROM t WHERE id BETWEEN 300 AND 309;"
                            "INSERT INTO t VALUES (6001, 0, 'new on b')")
                  .ok());
  ASSERT_TRUE(
      pg_a->Execute("UPDATE t SET b = 'source' WHERE id BETWEEN 1000 AND 1009")
          .ok());
  const std::string new_source_sum = TableMd5(*pg_a, "t");
  EXPECT_TRUE(WaitFor([&] { return TableMd5(*pg_b, "t") == new_source_sum; },
                      absl::Seconds(30)))
      << "b: " << *pg_b->Execute("SELECT count(*) FROM t") << " rows, "
      << *pg_b->Execute("SELECT count(*) FROM t WHERE b = 'changed'")
      << " changed\n"
      << side_a->Log() << side_b->Log();
  EXPECT_EQ(*pg_a->Execute("SELECT count(*) FROM t"), "2000");
  EXPECT_EQ(*pg_a->Execute("SELECT count(*) FROM t WHERE b = 'source'"), "10");
  EXPECT_EQ(CountByOrigin(*pg_a, 1, 10000, /*tally=*/true), "0");
}

// A first build indexes the table at the bootstrap version without logging
// it (the feed would otherwise send every row to every peer); a new peer on
// an empty database still gets every row, by session, and a row changed
// afterwards reaches it through the log as usual.
TEST_F(PgSidecarTest, AFirstBuildLogsNothingAndANewPeerConvergesBySession) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg_a = StartCluster();
  std::unique_ptr<PgCluster> pg_b = StartCluster();
  ASSERT_NE(pg_a, nullptr);
  ASSERT_NE(pg_b, nullptr);
  ASSERT_TRUE(pg_a->Execute("INSERT INTO t SELECT g, g, 'row-' || g FROM "
                            "generate_series(1, 3000) g")
                  .ok());
  TempDir dir_a, dir_b;
  const std::string addr_a = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> side_a =
      StartSidecar("side-a", dir_a.path(), *pg_a, addr_a, {});
  ASSERT_NE(side_a, nullptr);
  ASSERT_TRUE(WaitFor([&] { return Following(addr_a); }, absl::Seconds(30)))
      << side_a->Log();
  EXPECT_EQ(JsonNumber(StatusJson(addr_a), "last_sequence"), 0)
      << StatusJson(addr_a);

  std::unique_ptr<NodeProcess> side_b = StartSidecar(
      "side-b", dir_b.path(), *pg_b, FreeLoopbackAddress(), {addr_a});
  ASSERT_NE(side_b, nullptr);
  const std::string sum_a = TableMd5(*pg_a, "t");
  EXPECT_TRUE(
      WaitFor([&] { return TableMd5(*pg_b, "t") == sum_a; }, absl::Seconds(40)))
      << "rows in b: " << *pg_b->Execute("SELECT count(*) FROM t") << "\n"
      << side_a->Log() << side_b->Log();
  // A's log still holds nothing: B's rows came by session, and applying
  // them on B did not echo back.
  EXPECT_EQ(JsonNumber(StatusJson(addr_a), "last_sequence"), 0);

  ASSERT_TRUE(
      pg_a->Execute("UPDATE t SET b = 'later' WHERE id BETWEEN 1 AND 10").ok());
  EXPECT_TRUE(WaitFor(
      [&] {
        return *pg_b->Execute("SELECT count(*) FROM t WHERE b = 'later'") ==
               "10";
      },
      absl::Seconds(30)))
      << side_a->Log() << side_b->Log();
  EXPECT_EQ(JsonNumber(StatusJson(addr_a), "last_sequence"), 10);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The confirmed position of a status JSON block, in bytes (-1 if absent).
long long ConfirmedLsn(const std::string& json) {
  std::smatch m;
  static const std::regex kLsn(
      R"re("confirmed_lsn":"([0-9A-Fa-f]+)/([0-9A-Fa-f]+)")re");
  if (!std::regex_search(json, m, kLsn)) return -1;
  return (std::stoll(m[1], nullptr, 16) << 32) + std::stoll(m[2], nullptr, 16);
}

// Waits until `address`'s sidecar has confirmed everything `pg` wrote so far.
bool CaughtUp(PgCluster& pg, const std::string& address,
              absl::Duration timeout) {
  absl::StatusOr<std::string> now =
      pg.Execute("SELECT pg_current_wal_lsn() - '0/0'");
  if (!now.ok()) return false;
  const long long target = std::stoll(*now);
  return WaitFor(
      [&] {
        const std::string json = StatusJson(address);
        return absl::StrContains(json, R"("phase":"following")") &&
               ConfirmedLsn(json) >= target;
      },
      timeout);
}

// Terminates the sidecar's WAL sender and drops its slot before the sidecar
// reconnects (its first retry is 1 s away).
absl::Status DropTheSlot(PgCluster& pg) {
  return pg
      .Execute(
          "DO $$ BEGIN "
          "PERFORM pg_terminate_backend(active_pid) FROM pg_replication_slots "
          "WHERE slot_name LIKE 'tally%' AND active_pid IS NOT NULL; "
          "FOR i IN 1..200 LOOP BEGIN "
          "PERFORM pg_drop_replication_slot(slot_name) FROM "
          "pg_replication_slots WHERE slot_name LIKE 'tally%'; EXIT; "
          "EXCEPTION WHEN object_in_use THEN PERFORM pg_sleep(0.01); END; "
          "END LOOP; END $$")
      .status();
}

// The rows read and written by the last build line after `from` in a log
// ({-1, -1} when there is none).
std::pair<long long, long long> LastBuild(const std::string& log, size_t from) {
  static const std::regex kBuild(
      R"re(build: (\d+) of ~\d+ rows read \(public\.t\), (\d+) written)re");
  std::pair<long long, long long> out = {-1, -1};
  if (from == std::string::npos || from > log.size()) return out;
  const std::string tail = log.substr(from);
  for (auto it = std::sregex_iterator(tail.begin(), tail.end(), kBuild);
       it != std::sregex_iterator(); ++it) {
    out = {std::stoll((*it)[1]), std::stoll((*it)[2])};
  }
  return out;
}

constexpr char kSlotMissing[] =
    "rebuilding the index: the replication slot is missing";

// A build under concurrent writes, and a dropped slot: tallyd starts on a table
// an application keeps writing (updates, inserts, deletes, one transaction
// each, until told to stop a second after the build), builds from the snapshot
// and follows; once it has confirmed the last write, the index is the table: a
// rebuild from a fresh snapshot (the slot dropped while tallyd runs: detected,
// logged, rebuilt) finds every row described as it is and writes nothing — no
// row lost at the handoff (it would be written), none doubled or stale (a
// tombstone or a new version would be).
TEST_F(PgSidecarTest, ABuildUnderConcurrentWritesLeavesNoGapAndNoOverlap) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg = StartCluster();
  ASSERT_NE(pg, nullptr);
  ASSERT_TRUE(pg->Execute("INSERT INTO t SELECT g, g, 'row-' || g FROM "
                          "generate_series(1, 50000) g;"
                          "CREATE TABLE writer_stop (x int)")
                  .ok());
  TempDir out;
  const pid_t writer = SpawnCommand(
      {PostgresBinDir() + "/psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1",
       "-h", "127.0.0.1", "-p", absl::StrCat(pg->port()), "-U", "postgres",
       "-d", "postgres", "-c",
       "DO $$ DECLARE i bigint := 0; "
       "until timestamptz := clock_timestamp() + interval '60 seconds'; "
       "BEGIN WHILE clock_timestamp() < until AND NOT EXISTS (SELECT 1 FROM "
       "writer_stop) LOOP i := i + 1; "
       "UPDATE t SET a = a + 1, b = 'w' || i WHERE id = (i * 7919) % 50000 + "
       "1; "
       "INSERT INTO t VALUES (200000 + i, i, 'new'); "
       "DELETE FROM t WHERE id = (i * 104729) % 50000 + 1; "
       "COMMIT; PERFORM pg_sleep(0.001); END LOOP; END $$"},
      out.path() + "/writer.out");
  ASSERT_GT(writer, 0);
  // The writer is running when the build takes its snapshot.
  ASSERT_TRUE(WaitFor(
      [&] {
        return *pg->Execute(
                   "SELECT count(*) > 0 FROM t WHERE id > "
                   "200000") == "t";
      },
      absl::Seconds(10)));
  std::unique_ptr<NodeProcess> side =
      StartSidecar("side-a", dir_.path(), *pg, FreeLoopbackAddress(), {});
  ASSERT_NE(side, nullptr);
  EXPECT_TRUE(
      WaitFor([&] { return Following(side->address()); }, absl::Seconds(20)))
      << side->Log();
  const std::string during =
      *pg->Execute("SELECT count(*) FROM t WHERE id > 200000");
  // A second of writes more after the build, then the writer stops.
  absl::SleepFor(absl::Seconds(1));
  ASSERT_TRUE(pg->Execute("INSERT INTO writer_stop VALUES (1)").ok());
  int wstatus = 0;
  ASSERT_EQ(waitpid(writer, &wstatus, 0), writer);
  ASSERT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)
      << ReadFile(out.path() + "/writer.out.err");
  const long long written =
      std::stoll(*pg->Execute("SELECT count(*) FROM t WHERE id > 200000"));
  // The writer went on after the build (else this tests no handoff).
  ASSERT_GT(written, std::stoll(during)) << side->Log();
  const std::string first_build_log = side->Log();
  const std::pair<long long, long long> first = LastBuild(first_build_log, 0);
  ASSERT_GT(first.first, 0) << first_build_log;

  ASSERT_TRUE(CaughtUp(*pg, side->address(), absl::Seconds(20)))
      << StatusJson(side->address()) << side->Log();
  const long long rows = std::stoll(*pg->Execute("SELECT count(*) FROM t"));
  ASSERT_TRUE(DropTheSlot(*pg).ok());
  std::pair<long long, long long> rebuilt = {-1, -1};
  EXPECT_TRUE(WaitFor(
      [&] {
        const std::string log = side->Log();
        rebuilt = LastBuild(log, log.find(kSlotMissing));
        return rebuilt.first >= 0 && Following(side->address());
      },
      absl::Seconds(20)))
      << side->Log();
  EXPECT_EQ(rebuilt.first, rows);
  EXPECT_EQ(rebuilt.second, 0) << "the index differed from the table";
  EXPECT_EQ(*pg->Execute("SELECT count(*) FROM pg_replication_slots WHERE "
                         "slot_name LIKE 'tally%' AND active"),
            "1");
  // And it follows the new slot.
  ASSERT_TRUE(pg->Execute("INSERT INTO t VALUES (1000000, 0, 'after')").ok());
  EXPECT_TRUE(CaughtUp(*pg, side->address(), absl::Seconds(20))) << side->Log();
  EXPECT_THAT(StatusJson(side->address()), HasSubstr(R"("state":"ready")"));
}

// Two sidecars whose tables give column a another type (integer on A,
// bigint on B) never exchange its rows: each session is refused naming the
// column and both types, in the session log line and the peer's last
// outcome in status; `tally diff` of the two refuses the same way.
TEST_F(PgSidecarTest, ColumnsOfAnotherTypeAreRefusedNamingTheColumn) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg_a = StartCluster();
  std::unique_ptr<PgCluster> pg_b = StartCluster();
  ASSERT_NE(pg_a, nullptr);
  ASSERT_NE(pg_b, nullptr);
  ASSERT_TRUE(pg_b->Execute("ALTER TABLE t ALTER COLUMN a TYPE bigint").ok());
  ASSERT_TRUE(pg_a->Execute("INSERT INTO t VALUES (1, 1, 'on-a')").ok());
  ASSERT_TRUE(pg_b->Execute("INSERT INTO t VALUES (2, 2, 'on-b')").ok());
  TempDir dir_a, dir_b;
  const std::string addr_a = FreeLoopbackAddress();
  const std::string addr_b = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> side_a =
      StartSidecar("side-a", dir_a.path(), *pg_a, addr_a, {addr_b});
  std::unique_ptr<NodeProcess> side_b =
      StartSidecar("side-b", dir_b.path(), *pg_b, addr_b, {addr_a});
  ASSERT_NE(side_a, nullptr);
  ASSERT_NE(side_b, nullptr);
  const std::string named =
      "column a: integer on this node (side-a), bigint "
      "on side-b";
  EXPECT_TRUE(WaitFor(
      [&] {
        return absl::StrContains(side_a->Log(), named) &&
               absl::StrContains(StatusJson(addr_a), named);
      },
      absl::Seconds(20)))
      << side_a->Log() << "\n"
      << StatusJson(addr_a);
  EXPECT_TRUE(WaitFor(
      [&] {
        return absl::StrContains(
            side_b->Log(),
            "column a: bigint on this node (side-b), integer on side-a");
      },
      absl::Seconds(20)))
      << side_b->Log();
  const CommandResult diff = RunTally(
      {"--keyspace", "public.t", "diff", addr_a, addr_b}, absl::Seconds(20));
  EXPECT_EQ(diff.exit_code, 2) << diff.out << diff.err;
  EXPECT_THAT(diff.err, AllOf(HasSubstr("column a: integer on "),
                              HasSubstr(", bigint on ")));
  // No row crossed.
  EXPECT_EQ(*pg_a->Execute("SELECT count(*) FROM t"), "1");
  EXPECT_EQ(*pg_b->Execute("SELECT count(*) FROM t"), "1");
}

// The value of column `column` of row `id` in `pg`'s t ("" when absent).
std::string Cell(PgCluster& pg, const std::string& column, int id) {
  absl::StatusOr<std::string> v =
      pg.Execute(absl::StrCat("SELECT coalesce(", column,
                              "::text, 'null') FROM t WHERE "
                              "id = ",
                              id));
  return v.ok() ? *v : "?";
}

// ALTER TABLE ... ADD COLUMN on one database: its sidecar
// notices at the table's next row change, rebuilds the keyspace (logged;
// status shows the new fingerprint), and its sessions with the peer are
// refused naming the column while the peer's table lacks it — no row of
// either shape reaches the other database; once the peer's table has the
// column too, they converge.
TEST_F(PgSidecarTest, AnAddedColumnIsRefusedUntilThePeerHasItThenConverges) {
  TALLY_SKIP_UNLESS_POSTGRES();
  PeeredPair pair;
  ASSERT_NO_FATAL_FAILURE(StartPeeredPair(&pair));
  PgCluster& pg_a = *pair.pg_a;
  PgCluster& pg_b = *pair.pg_b;
  NodeProcess& side_a = *pair.side_a;
  NodeProcess& side_b = *pair.side_b;
  ASSERT_TRUE(pg_a.Execute("INSERT INTO t SELECT g, g, 'x' FROM "
                           "generate_series(1, 100) g")
                  .ok());
  ASSERT_TRUE(
      WaitFor([&] { return TableMd5(pg_a, "t") == TableMd5(pg_b, "t"); },
              absl::Seconds(20)))
      << side_a.Log() << side_b.Log();
  const std::string old_fingerprint = [&] {
    std::smatch m;
    const std::string json = StatusJson(pair.addr_a);
    static const std::regex kFp(R"re("schema_fingerprint":"([^"]+)")re");
    return std::regex_search(json, m, kFp) ? std::string(m[1]) : "";
  }();
  ASSERT_FALSE(old_fingerprint.empty());

  ASSERT_TRUE(pg_a.Execute("ALTER TABLE t ADD COLUMN c int DEFAULT 7;"
                           "UPDATE t SET b = 'after' WHERE id = 1")
                  .ok());
  EXPECT_TRUE(WaitFor(
      [&] {
        return absl::StrContains(side_a.Log(),
                                 "rebuilding the index: schema change") &&
               Following(pair.addr_a);
      },
      absl::Seconds(20)))
      << side_a.Log();
  const std::string json_a = StatusJson(pair.addr_a);
  // The table's own fingerprint (a failed session's outcome may quote the
  // old one as side-b's, which it still is).
  const std::string new_fingerprint = [&] {
    std::smatch m;
    static const std::regex kFp(R"re("schema_fingerprint":"([^"]+)")re");
    return std::regex_search(json_a, m, kFp) ? std::string(m[1]) : "";
  }();
  EXPECT_FALSE(new_fingerprint.empty()) << json_a;
  EXPECT_NE(new_fingerprint, old_fingerprint) << json_a;
  EXPECT_THAT(json_a, HasSubstr(R"("state":"ready")"));
  const std::string named =
      "column c: integer on this node (side-a), absent "
      "on side-b";
  EXPECT_TRUE(WaitFor([&] { return absl::StrContains(side_a.Log(), named); },
                      absl::Seconds(20)))
      << side_a.Log();
  EXPECT_TRUE(WaitFor(
      [&] {
        return absl::StrContains(
            side_b.Log(), "column c: absent on this node (side-b), integer on");
      },
      absl::Seconds(20)))
      << side_b.Log();
  // Refused both ways: B keeps its row 1, A does not get B's new row.
  ASSERT_TRUE(pg_b.Execute("INSERT INTO t VALUES (500, 5, 'on-b')").ok());
  absl::SleepFor(absl::Seconds(3));
  EXPECT_EQ(Cell(pg_b, "b", 1), "x");
  EXPECT_EQ(Cell(pg_a, "b", 500), "");

  // B's table gets the column: the two converge, the rows of each side
  // reaching the other with c.
  ASSERT_TRUE(pg_b.Execute("ALTER TABLE t ADD COLUMN c int DEFAULT 7;"
                           "UPDATE t SET c = 8 WHERE id = 500")
                  .ok());
  EXPECT_TRUE(WaitFor(
      [&] {
        return TableMd5(pg_a, "t") == TableMd5(pg_b, "t") &&
               Cell(pg_a, "c", 500) == "8" && Cell(pg_b, "b", 1) == "after";
      },
      absl::Seconds(30)))
      << "a: " << TableMd5(pg_a, "t") << " b: " << TableMd5(pg_b, "t") << "\n"
      << side_a.Log() << side_b.Log();
}

// The table's own schema fingerprint in a status JSON ("" if none).
std::string TableFingerprint(const std::string& json) {
  std::smatch m;
  static const std::regex kFp(R"re("schema_fingerprint":"([^"]+)")re");
  return std::regex_search(json, m, kFp) ? std::string(m[1]) : "";
}

// How often `needle` occurs in `haystack`.
int Occurrences(const std::string& haystack, const std::string& needle) {
  int n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + needle.size())) {
    ++n;
  }
  return n;
}

// ALTER TABLE ... ADD COLUMN ... DEFAULT changes every row's bytes and
// decodes no row change (DDL is not in the stream): with no later row write,
// the catalog check (here every second) notices, the keyspace is rebuilt
// (logged; status shows the new fingerprint) and the peer without the
// column refuses its sessions naming it. A later row change (its Relation
// message now matches) rebuilds nothing more.
TEST_F(PgSidecarTest, AnAddedColumnWithNoRowWriteIsNoticedByTheCatalogCheck) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg_a = StartCluster();
  std::unique_ptr<PgCluster> pg_b = StartCluster();
  ASSERT_NE(pg_a, nullptr);
  ASSERT_NE(pg_b, nullptr);
  ASSERT_TRUE(pg_a->Execute("INSERT INTO t SELECT g, g, 'x' FROM "
                            "generate_series(1, 50) g")
                  .ok());
  TempDir dir_a, dir_b;
  const std::string addr_a = FreeLoopbackAddress();
  const std::string addr_b = FreeLoopbackAddress();
  const std::vector<std::string> check = {"--pg-schema-check-interval", "1s"};
  std::unique_ptr<NodeProcess> side_a =
      StartSidecar("side-a", dir_a.path(), *pg_a, addr_a, {addr_b}, check);
  std::unique_ptr<NodeProcess> side_b =
      StartSidecar("side-b", dir_b.path(), *pg_b, addr_b, {addr_a}, check);
  ASSERT_NE(side_a, nullptr);
  ASSERT_NE(side_b, nullptr);
  ASSERT_TRUE(
      WaitFor([&] { return TableMd5(*pg_a, "t") == TableMd5(*pg_b, "t"); },
              absl::Seconds(30)))
      << side_a->Log() << side_b->Log();
  const std::string old_fingerprint = TableFingerprint(StatusJson(addr_a));
  ASSERT_FALSE(old_fingerprint.empty());
  const std::string rebuilt = "rebuilding the index: schema change";
  EXPECT_EQ(Occurrences(side_a->Log(), rebuilt), 0) << side_a->Log();

  ASSERT_TRUE(pg_a->Execute("ALTER TABLE t ADD COLUMN c int DEFAULT 7").ok());
  EXPECT_TRUE(WaitFor(
      [&] {
        return absl::StrContains(side_a->Log(),
                                 "schema change (catalog check): public.t") &&
               absl::StrContains(side_a->Log(), rebuilt) && Following(addr_a);
      },
      absl::Seconds(20)))
      << side_a->Log();
  EXPECT_THAT(side_a->Log(), HasSubstr("column c: integer here, absent there"));
  const std::string json_a = StatusJson(addr_a);
  const std::string new_fingerprint = TableFingerprint(json_a);
  EXPECT_FALSE(new_fingerprint.empty()) << json_a;
  EXPECT_NE(new_fingerprint, old_fingerprint) << json_a;
  EXPECT_THAT(json_a, HasSubstr(R"("state":"ready")"));
  EXPECT_TRUE(WaitFor(
      [&] {
        return absl::StrContains(side_a->Log(),
                                 "column c: integer on this node (side-a), "
                                 "absent on side-b") &&
               absl::StrContains(side_b->Log(),
                                 "column c: absent on this node (side-b), "
                                 "integer on side-a");
      },
      absl::Seconds(20)))
      << side_a->Log() << side_b->Log();

  // A row change after the rebuild: its Relation message matches the
  // reloaded schema, and the catalog matches too — no second rebuild.
  ASSERT_TRUE(pg_a->Execute("UPDATE t SET b = 'after' WHERE id = 1").ok());
  absl::SleepFor(absl::Seconds(4));
  EXPECT_EQ(Occurrences(side_a->Log(), rebuilt), 1) << side_a->Log();
  EXPECT_TRUE(Following(addr_a)) << StatusJson(addr_a);
  EXPECT_EQ(Cell(*pg_b, "b", 1), "x");
}

// A column added while tallyd is stopped is noticed at its next start (the
// stored position records the fingerprints the index was built with), long
// before the first catalog check (the default minute).
TEST_F(PgSidecarTest, AColumnAddedWhileStoppedIsNoticedAtStart) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg = StartCluster();
  ASSERT_NE(pg, nullptr);
  ASSERT_TRUE(
      pg->Execute("INSERT INTO t VALUES (1, 1, 'x'), (2, 2, 'y')").ok());
  TempDir dir;
  const std::string addr = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> side =
      StartSidecar("side-a", dir.path(), *pg, addr, {});
  ASSERT_NE(side, nullptr);
  ASSERT_TRUE(WaitFor([&] { return Following(addr); }, absl::Seconds(20)))
      << side->Log();
  const std::string old_fingerprint = TableFingerprint(StatusJson(addr));
  ASSERT_FALSE(old_fingerprint.empty());
  EXPECT_EQ(side->Stop(), 0) << side->Log();

  ASSERT_TRUE(pg->Execute("ALTER TABLE t ADD COLUMN c int DEFAULT 7").ok());
  side = StartSidecar("side-a", dir.path(), *pg, addr, {});
  ASSERT_NE(side, nullptr);
  EXPECT_TRUE(WaitFor(
      [&] {
        return absl::StrContains(side->Log(),
                                 "rebuilding the index: schema change: "
                                 "public.t has fingerprint") &&
               Following(addr);
      },
      absl::Seconds(20)))
      << side->Log();
  EXPECT_THAT(side->Log(), HasSubstr("changed while tallyd was stopped"));
  const std::string new_fingerprint = TableFingerprint(StatusJson(addr));
  EXPECT_NE(new_fingerprint, old_fingerprint);
  // The rebuilt index holds the rows with c: verify finds no difference.
  const CommandResult verify =
      RunTally({"verify", "--node", addr}, absl::Seconds(30));
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  EXPECT_THAT(verify.out, HasSubstr("sound: public.t: 2 rows in the table"));
}

// A database that is down when tallyd starts: the node
// starts and serves, its status says the sidecar is reconnecting and why,
// the retries back off (1 s, 2 s, ...); once the server is up the sidecar
// builds and follows. The same when the server goes down (a crash) while
// followed: reconnecting, then following with nothing lost.
TEST_F(PgSidecarTest, ADatabaseDownAtStartIsRetriedThenFollowed) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg = StartCluster();
  ASSERT_NE(pg, nullptr);
  ASSERT_TRUE(pg->Execute("INSERT INTO t SELECT g, g, 'x' FROM "
                          "generate_series(1, 10) g")
                  .ok());
  ASSERT_TRUE(pg->Stop(PgCluster::StopMode::kFast).ok());
  std::unique_ptr<NodeProcess> side =
      StartSidecar("side-a", dir_.path(), *pg, FreeLoopbackAddress(), {});
  ASSERT_NE(side, nullptr);
  std::string json;
  EXPECT_TRUE(WaitFor(
      [&] {
        json = StatusJson(side->address());
        return absl::StrContains(json, R"("phase":"reconnecting")") &&
               absl::StrContains(json, absl::StrCat(pg->port())) &&
               absl::StrContains(side->Log(), "retrying in 2s");
      },
      absl::Seconds(20)))
      << json << "\n"
      << side->Log();
  EXPECT_THAT(side->Log(),
              HasSubstr("the database is unreachable; retrying in 1s"));

  ASSERT_TRUE(pg->Restart().ok());
  EXPECT_TRUE(
      WaitFor([&] { return Following(side->address()); }, absl::Seconds(30)))
      << StatusJson(side->address()) << side->Log();
  ASSERT_TRUE(pg->Execute("INSERT INTO t VALUES (11, 11, 'after')").ok());
  EXPECT_TRUE(CaughtUp(*pg, side->address(), absl::Seconds(20))) << side->Log();
  EXPECT_THAT(StatusJson(side->address()),
              HasSubstr(R"("keyspace":"public.t","state":"ready","rows":11,)"));

  // Down while followed: reconnecting, then the writes made after the
  // restart are captured.
  ASSERT_TRUE(pg->Stop(PgCluster::StopMode::kImmediate).ok());
  EXPECT_TRUE(WaitFor(
      [&] {
        return absl::StrContains(StatusJson(side->address()),
                                 R"("phase":"reconnecting")");
      },
      absl::Seconds(20)))
      << side->Log();
  ASSERT_TRUE(pg->Restart().ok());
  ASSERT_TRUE(pg->Execute("INSERT INTO t VALUES (12, 12, 'later')").ok());
  EXPECT_TRUE(CaughtUp(*pg, side->address(), absl::Seconds(40))) << side->Log();
  EXPECT_THAT(StatusJson(side->address()),
              HasSubstr(R"("keyspace":"public.t","state":"ready","rows":12,)"));
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

// User-defined types: the send() bytes of an
// array of an enum, a composite, an array of composites and a domain over
// an array embed type OIDs, which differ between the two databases here
// (the types are created in another order). The sidecars build equal
// digests for equal rows, a session's repair copies a row each database
// alone has into the other (its bytes get the target's OIDs back), and a
// live write crosses through the feed; the rows read back identical.
TEST_F(PgSidecarTest, RowsOfUserTypesWithOtherOidsConvergeAndRepair) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg_a = StartCluster();
  std::unique_ptr<PgCluster> pg_b = StartCluster();
  ASSERT_NE(pg_a, nullptr);
  ASSERT_NE(pg_b, nullptr);
  const std::string table =
      "DROP TABLE t; CREATE TABLE t (id bigint PRIMARY KEY, ms mood[], "
      "p pair, ps pair[], d moods)";
  ASSERT_TRUE(
      pg_a->Execute(
              absl::StrCat("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy'); "
                           "CREATE TYPE pair AS (x int, y mood); "
                           "CREATE DOMAIN moods AS mood[]; ",
                           table))
          .ok());
  ASSERT_TRUE(
      pg_b->Execute(
              absl::StrCat("CREATE TABLE filler (a int, b text); "
                           "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy'); "
                           "CREATE DOMAIN moods AS mood[]; "
                           "CREATE TYPE pair AS (x int, y mood); ",
                           table))
          .ok());
  const std::string oids =
      "SELECT 'mood'::regtype::oid || ',' || 'pair'::regtype::oid";
  ASSERT_NE(*pg_a->Execute(oids), *pg_b->Execute(oids));
  auto rows = [](int from, int to) {
    return absl::StrCat(
        "INSERT INTO t SELECT g, ARRAY['ok', NULL, 'happy']::mood[], "
        "ROW(g, CASE WHEN g % 3 = 0 THEN NULL ELSE 'sad' END)::pair, "
        "ARRAY[ROW(g, 'ok')::pair, NULL, ROW(NULL, NULL)::pair], "
        "'{happy,sad}'::moods FROM generate_series(",
        from, ", ", to, ") g");
  };
  ASSERT_TRUE(pg_a->Execute(rows(1, 200)).ok());
  ASSERT_TRUE(pg_b->Execute(rows(1, 200)).ok());
  // Before the sidecars start: a row only A has and one only B has. No
  // capture sees them, so only a session's repair can copy them.
  ASSERT_TRUE(pg_a->Execute(rows(301, 301)).ok());
  ASSERT_TRUE(pg_b->Execute(rows(302, 302)).ok());

  TempDir dir_a, dir_b;
  const std::string addr_a = FreeLoopbackAddress();
  const std::string addr_b = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> side_a =
      StartSidecar("side-a", dir_a.path(), *pg_a, addr_a, {addr_b});
  std::unique_ptr<NodeProcess> side_b =
      StartSidecar("side-b", dir_b.path(), *pg_b, addr_b, {addr_a});
  ASSERT_NE(side_a, nullptr);
  ASSERT_NE(side_b, nullptr);
  auto converged = [&] {
    return TableMd5(*pg_a, "t") == TableMd5(*pg_b, "t") &&
           *pg_a->Execute("SELECT count(*) FROM t") == "202";
  };
  ASSERT_TRUE(WaitFor(converged, absl::Seconds(30)))
      << side_a->Log() << side_b->Log();
  // The repaired rows are the source's values, compared in SQL.
  const std::string same_302 =
      "SELECT ms = ARRAY['ok', NULL, 'happy']::mood[] AND p = ROW(302, "
      "'sad')::pair AND ps = ARRAY[ROW(302, 'ok')::pair, NULL, ROW(NULL, "
      "NULL)::pair] AND d = '{happy,sad}'::moods FROM t WHERE id = 302";
  EXPECT_EQ(*pg_a->Execute(same_302), "t");
  EXPECT_EQ(*pg_b->Execute(absl::StrReplaceAll(same_302, {{"302", "301"}})),
            "t");
  // Copied by tally's apply, under its origin.
  EXPECT_EQ(*pg_b->Execute("SELECT (pg_xact_commit_timestamp_origin(xmin))"
                           ".roident <> 0 FROM t WHERE id = 301"),
            "t");

  // A live write on A crosses through the capture and the feed.
  ASSERT_TRUE(pg_a->Execute("UPDATE t SET ps = ARRAY[ROW(-5, 'happy')::pair], "
                            "ms = '{sad}' WHERE id = 5")
                  .ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        return *pg_b->Execute(
                   "SELECT ps = ARRAY[ROW(-5, 'happy')::pair] AND ms = "
                   "'{sad}'::mood[] FROM t WHERE id = 5") == "t";
      },
      absl::Seconds(20)))
      << side_a->Log() << side_b->Log();

  // The sidecars agree to the last digest, and stay quiet.
  ASSERT_TRUE(WaitFor(
      [&] {
        return RunTally({"--keyspace", "public.t", "diff", addr_a, addr_b},
                        absl::Seconds(20))
                   .exit_code == 0;
      },
      absl::Seconds(20)));
  const CommandResult diff = RunTally(
      {"--keyspace", "public.t", "diff", addr_a, addr_b}, absl::Seconds(20));
  EXPECT_EQ(diff.exit_code, 0) << diff.out << diff.err;
  EXPECT_EQ(TableMd5(*pg_a, "t"), TableMd5(*pg_b, "t"));
  const long long applied_a = JsonNumber(StatusJson(addr_a), "rows_applied");
  const long long applied_b = JsonNumber(StatusJson(addr_b), "rows_applied");
  absl::SleepFor(absl::Seconds(3));
  EXPECT_EQ(JsonNumber(StatusJson(addr_a), "rows_applied"), applied_a);
  EXPECT_EQ(JsonNumber(StatusJson(addr_b), "rows_applied"), applied_b);
  // And the ad-hoc diff of the two databases agrees.
  const CommandResult adhoc =
      RunTally({"diff", absl::StrCat(pg_a->Uri(), "?table=public.t"),
                absl::StrCat(pg_b->Uri(), "?table=public.t")},
               absl::Seconds(20));
  EXPECT_EQ(adhoc.exit_code, 0) << adhoc.out << adhoc.err;
}

}  // namespace
}  // namespace tally
