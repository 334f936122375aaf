// The MariaDB sidecar against real throwaway MariaDB servers and a real
// store: the first build, following inserts, updates, deletes and key
// changes, a peer's rows applied and recognised as this node's own in the
// binary log (never captured as local changes), rebuilds on DDL, TRUNCATE
// and a purged binary log, a restart that resumes, and a missing table.
// Every check compares the index with the table itself (Verify: each row's
// digest recomputed from the table's value), not with tally's own diff.
#include "mariadb/sidecar/sidecar.h"

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mariadb/table.h"
#include "pg/schema/row_codec.h"
#include "storage/store.h"
#include "support/mariadb_test_macros.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "tree/version.h"

namespace tally {
namespace mariadb {
namespace {

using ::testing::HasSubstr;
using testing::MariaDbServer;

constexpr uint32_t kServerId = 5100;

class MariaDbSidecarTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TALLY_SKIP_UNLESS_MARIADB();
    absl::StatusOr<std::unique_ptr<MariaDbServer>> m = MariaDbServer::Start();
    ASSERT_TRUE(m.ok()) << m.status();
    server_ = *std::move(m);
    absl::StatusOr<std::string> made = server_->Execute(
        "CREATE DATABASE db1; USE db1; CREATE TABLE db1.t (id bigint "
        "PRIMARY KEY, a int NOT NULL, b varchar(40)) DEFAULT CHARSET "
        "utf8mb4; INSERT INTO db1.t SELECT seq, seq, CONCAT('v', seq) FROM "
        "seq_1_to_3000");
    ASSERT_TRUE(made.ok()) << made.status();
    absl::StatusOr<MariaDbTarget> target = ParseMariaDbUrl(server_->Url("db1"));
    ASSERT_TRUE(target.ok());
    absl::StatusOr<std::unique_ptr<Connection>> conn =
        Connection::Open(*target, absl::Seconds(10));
    ASSERT_TRUE(conn.ok()) << conn.status();
    absl::StatusOr<MariaDbTable> table = MariaDbTable::Read(**conn, "db1.t");
    ASSERT_TRUE(table.ok()) << table.status();
    table_.emplace(*std::move(table));
  }
  void TearDown() override {
    if (sidecar_ != nullptr) sidecar_->Stop();
    sidecar_.reset();
    store_.reset();
  }

  std::string Sql(absl::string_view sql) {
    absl::StatusOr<std::string> out = server_->Execute(sql, "db1");
    EXPECT_TRUE(out.ok()) << sql << ": " << out.status();
    return out.ok() ? *out : "";
  }

  void StartSidecar(std::vector<std::string> tables = {"db1.t"}) {
    SidecarOptions o;
    o.url = server_->Url("db1");
    o.tables = std::move(tables);
    o.node_name = "node-m";
    o.server_id = kServerId;
    o.max_value_bytes = max_value_bytes_;
    o.log = [](absl::string_view line) {
      fprintf(stderr, "%.*s\n", (int)line.size(), line.data());
    };
    absl::StatusOr<std::unique_ptr<Sidecar>> s = Sidecar::Prepare(o);
    ASSERT_TRUE(s.ok()) << s.status();
    sidecar_ = *std::move(s);
    storage::StoreOptions so;
    so.backend = sidecar_->backend();
    so.node_name = "node-m";
    absl::StatusOr<std::unique_ptr<storage::Store>> st =
        storage::Store::Open(dir_.path(), so);
    ASSERT_TRUE(st.ok()) << st.status();
    store_ = *std::move(st);
    ASSERT_TRUE(sidecar_->Start(store_.get()).ok());
  }
  void StopSidecar() {
    sidecar_->Stop();
    sidecar_.reset();
    store_.reset();
  }

  // Catches up, then checks the index describes the table exactly.
  void ExpectIndexEqualsTable(const std::string& keyspace = "db1.t") {
    const absl::Status caught = sidecar_->AwaitCaughtUp(absl::Seconds(60));
    ASSERT_TRUE(caught.ok()) << caught;
    absl::StatusOr<VerifyResult> v = sidecar_->Verify(keyspace);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_TRUE(v->mismatched_keys.empty()) << v->mismatched_keys.size();
    EXPECT_TRUE(v->missing_from_index.empty()) << v->missing_from_index.size();
    EXPECT_TRUE(v->missing_from_table.empty()) << v->missing_from_table.size();
    EXPECT_EQ(v->table_rows, v->index_rows);
  }

  static std::string BigEndian(uint64_t v, int bytes) {
    std::string out;
    for (int shift = (bytes - 1) * 8; shift >= 0; shift -= 8) {
      out.push_back(static_cast<char>((v >> shift) & 0xff));
    }
    return out;
  }
  // db1.t's canonical row (id bigint, a int, b varchar).
  pg::CanonicalRow Row(int64_t id, int32_t a, const std::string& b) {
    const std::string id_bytes = BigEndian(static_cast<uint64_t>(id), 8);
    const std::string a_bytes = BigEndian(static_cast<uint32_t>(a), 4);
    std::vector<pg::Field> fields = {pg::Field::Of(id_bytes),
                                     pg::Field::Of(a_bytes), pg::Field::Of(b)};
    pg::CanonicalRow out;
    EXPECT_TRUE(
        table_->schema().codec().Encode(fields, &out.key, &out.value).ok());
    return out;
  }
  std::string Key(int64_t id) { return Row(id, 0, "").key; }

  size_t max_value_bytes_ = storage::StoreOptions().max_value_bytes;
  testing::TempDir dir_;
  std::unique_ptr<MariaDbServer> server_;
  std::unique_ptr<Sidecar> sidecar_;
  std::unique_ptr<storage::Store> store_;
  std::optional<MariaDbTable> table_;
};

TEST_F(MariaDbSidecarTest, BuildsThenFollowsEveryKindOfChange) {
  StartSidecar();
  ExpectIndexEqualsTable();
  EXPECT_EQ(sidecar_->status().phase, "following");
  // The first build's rows carry the bootstrap version.
  absl::StatusOr<storage::Row> r = store_->Get("db1.t", Key(7));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->version.origin, "tally.bootstrap");

  Sql("INSERT INTO t VALUES (5001, 1, 'new'); UPDATE t SET b = 'changed' "
      "WHERE id <= 100; DELETE FROM t WHERE id BETWEEN 200 AND 250; "
      "UPDATE t SET id = 6000 WHERE id = 300; "
      "BEGIN; INSERT INTO t VALUES (5002, 2, NULL); DELETE FROM t WHERE id "
      "= 5002; COMMIT");
  ExpectIndexEqualsTable();
  r = store_->Get("db1.t", Key(7));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->version.origin, "node-m");
  r = store_->Get("db1.t", Key(300));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->deleted);  // the key change left a tombstone
  const SidecarStatus s = sidecar_->status();
  EXPECT_GE(s.transactions_captured, 5u);
  EXPECT_GE(s.rows_captured, 100u + 51u + 2u);
}

TEST_F(MariaDbSidecarTest, PeersRowsAreAppliedAndNotCapturedAsLocal) {
  StartSidecar();
  ExpectIndexEqualsTable();
  // A peer's newer version of row 10, and a row the table lacks.
  const tree::Version peer{store_->clock().Now(), "node-p"};
  storage::WriteRequest request;
  for (auto [id, b] : {std::pair<int64_t, std::string>{10, "from-peer"},
                       {9000, "peer-only"}}) {
    pg::CanonicalRow c = Row(id, 1, b);
    storage::Mutation m = storage::Mutation::Put("db1.t", c.key, c.value);
    m.version = peer;
    request.mutations.push_back(std::move(m));
  }
  absl::StatusOr<storage::WriteResult> w = store_->Write(std::move(request));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_THAT(w->applied, ::testing::ElementsAre(true, true));
  EXPECT_EQ(Sql("SELECT b FROM t WHERE id IN (10, 9000) ORDER BY id"),
            "from-peer\npeer-only");
  ExpectIndexEqualsTable();
  // The capture recognised the apply: the rows keep the peer's version.
  for (int64_t id : {10, 9000}) {
    absl::StatusOr<storage::Row> r = store_->Get("db1.t", Key(id));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->version.origin, "node-p") << id;
  }
  EXPECT_GE(sidecar_->status().own_transactions_replayed, 1u);
  EXPECT_EQ(sidecar_->status().rows_applied, 2u);
}

TEST_F(MariaDbSidecarTest, RebuildsOnDdlAndTruncate) {
  StartSidecar();
  ExpectIndexEqualsTable();
  Sql("UPDATE t SET b = 'before-alter' WHERE id = 1");
  ExpectIndexEqualsTable();
  Sql("ALTER TABLE t ADD COLUMN c int NOT NULL DEFAULT 7");
  Sql("UPDATE t SET c = 8 WHERE id = 2");
  ExpectIndexEqualsTable();
  EXPECT_GE(sidecar_->status().builds, 2u);
  EXPECT_THAT(sidecar_->status().last_rebuild_reason, HasSubstr("ALTER"));
  Sql("TRUNCATE TABLE t; INSERT INTO t (id, a, b) VALUES (1, 1, 'x')");
  ExpectIndexEqualsTable();
  absl::StatusOr<storage::Row> r = store_->Get("db1.t", Key(2));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->deleted);
}

TEST_F(MariaDbSidecarTest, ResumesAfterRestartAndRebuildsWhenLogIsPurged) {
  StartSidecar();
  ExpectIndexEqualsTable();
  StopSidecar();
  Sql("UPDATE t SET b = 'while-stopped' WHERE id <= 10");
  StartSidecar();
  ExpectIndexEqualsTable();
  EXPECT_EQ(sidecar_->status().builds, 0u);  // resumed, not rebuilt
  StopSidecar();
  Sql("UPDATE t SET b = 'then-purged' WHERE id <= 20; FLUSH BINARY LOGS; "
      "FLUSH BINARY LOGS; DO SLEEP(1); FLUSH BINARY LOGS");
  const std::string last = Sql("SHOW MASTER STATUS");
  Sql(absl::StrCat("PURGE BINARY LOGS TO '", last.substr(0, last.find('\t')),
                   "'"));
  StartSidecar();
  ExpectIndexEqualsTable();
  EXPECT_EQ(sidecar_->status().builds, 1u);
  EXPECT_THAT(sidecar_->status().last_rebuild_reason, HasSubstr("gone"));
}

TEST_F(MariaDbSidecarTest, MissingTableIsMissingUntilCreated) {
  StartSidecar({"db1.t", "db1.later"});
  ExpectIndexEqualsTable();
  SidecarStatus s = sidecar_->status();
  ASSERT_EQ(s.keyspaces.size(), 2u);
  EXPECT_EQ(s.keyspaces[0].name, "db1.later");
  EXPECT_EQ(s.keyspaces[0].state, "missing");
  EXPECT_TRUE(absl::IsNotFound(sidecar_->backend()->TakesRows("db1.later")));
  Sql("CREATE TABLE later (id bigint PRIMARY KEY, v text) DEFAULT CHARSET "
      "utf8mb4; INSERT INTO later VALUES (1, 'one')");
  ExpectIndexEqualsTable("db1.later");
  ExpectIndexEqualsTable("db1.t");
  s = sidecar_->status();
  EXPECT_EQ(s.keyspaces[0].state, "ready");
  EXPECT_TRUE(sidecar_->backend()->TakesRows("db1.later").ok());
}

TEST_F(MariaDbSidecarTest, AHalfMillionRowTransactionIsIndexedWhole) {
  Sql("INSERT INTO t SELECT seq, seq, CONCAT('w', seq) FROM "
      "seq_3001_to_500000");
  StartSidecar();
  ExpectIndexEqualsTable();
  // One transaction of 500,000 row updates: stored in parts, the position
  // with the last, every row at the transaction's version.
  Sql("UPDATE t SET a = a + 1, b = CONCAT(b, '+')");
  ExpectIndexEqualsTable();
  const SidecarStatus s = sidecar_->status();
  EXPECT_EQ(s.rows_captured, 500000u);
  EXPECT_EQ(s.transactions_captured, 1u);
  absl::StatusOr<storage::Row> first = store_->Get("db1.t", Key(1));
  absl::StatusOr<storage::Row> last = store_->Get("db1.t", Key(500000));
  ASSERT_TRUE(first.ok() && last.ok());
  EXPECT_EQ(first->version, last->version);
  EXPECT_EQ(first->version.origin, "node-m");
}

TEST_F(MariaDbSidecarTest, PrepareRefusesABadServerSetUpNamingTheFix) {
  absl::StatusOr<std::unique_ptr<MariaDbServer>> m =
      MariaDbServer::Start({{"--binlog-format=STATEMENT"}});
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE((*m)->Execute("CREATE DATABASE db1").ok());
  SidecarOptions o;
  o.url = (*m)->Url("db1");
  o.tables = {"db1.t"};
  o.node_name = "node-m";
  o.server_id = kServerId;
  absl::StatusOr<std::unique_ptr<Sidecar>> s = Sidecar::Prepare(o);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("binlog_format"));
  o.server_id = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(Sidecar::Prepare(o).status()));
}

// Percona's pt-table-checksum run on the server (it logs its chunk
// statements in statement format, each reading the kept table): the
// sidecar sees them and rebuilds nothing.
TEST_F(MariaDbSidecarTest, PtTableChecksumOnTheServerRebuildsNothing) {
  StartSidecar();
  ExpectIndexEqualsTable();
  const uint64_t builds = sidecar_->status().builds;
  const testing::CommandResult checked = testing::RunCommand(
      {"/usr/bin/pt-table-checksum", "--databases=db1", "--tables=t",
       "--replicate=percona.checksums", "--recursion-method=none",
       "--no-check-binlog-format", "--chunk-size=500",
       absl::StrCat("h=127.0.0.1,P=", server_->port(), ",u=root")},
      absl::Seconds(120));
  ASSERT_EQ(checked.exit_code, 0) << checked.out << checked.err;
  EXPECT_THAT(checked.out, HasSubstr("db1.t"));
  // Its statements are in the log as statements naming db1.t.
  EXPECT_THAT(Sql("SHOW BINLOG EVENTS"),
              HasSubstr("FROM `db1`.`t` FORCE INDEX(`PRIMARY`)"));
  Sql("UPDATE t SET b = 'after' WHERE id = 1");
  ExpectIndexEqualsTable();
  EXPECT_EQ(sidecar_->status().builds, builds)
      << sidecar_->status().last_rebuild_reason;
}

// A row over the value limit (here 50 bytes) is not indexed and refuses
// its keyspace, also across a restart (its position records the refusal,
// so the start rebuilds and looks again), until the row fits again.
TEST_F(MariaDbSidecarTest, ARowOverTheValueLimitRefusesItsKeyspaceUntilItFits) {
  // A row's canonical value is about 20 bytes plus b's length.
  max_value_bytes_ = 50;
  Sql("UPDATE t SET b = REPEAT('z', 40) WHERE id = 6");
  StartSidecar();
  ASSERT_TRUE(sidecar_->AwaitCaughtUp(absl::Seconds(60)).ok());
  auto state = [&] { return sidecar_->status().keyspaces[0].state; };
  EXPECT_EQ(state(), "refused");
  EXPECT_THAT(sidecar_->status().keyspaces[0].trouble,
              HasSubstr("over the value limit of 50 bytes"));
  const absl::Status takes = sidecar_->backend()->TakesRows("db1.t");
  EXPECT_TRUE(absl::IsNotFound(takes)) << takes;
  EXPECT_TRUE(absl::IsNotFound(store_->Get("db1.t", Key(6)).status()));
  // Other rows go on being indexed.
  Sql("UPDATE t SET b = 'other' WHERE id = 7");
  ASSERT_TRUE(sidecar_->AwaitCaughtUp(absl::Seconds(60)).ok());
  EXPECT_EQ(store_->Get("db1.t", Key(7))->value, Row(7, 7, "other").value);

  StopSidecar();
  StartSidecar();
  ASSERT_TRUE(sidecar_->AwaitCaughtUp(absl::Seconds(60)).ok());
  EXPECT_EQ(state(), "refused");
  EXPECT_THAT(sidecar_->status().last_rebuild_reason, HasSubstr("changed"));

  Sql("UPDATE t SET b = 'fits' WHERE id = 6");
  ASSERT_TRUE(sidecar_->AwaitCaughtUp(absl::Seconds(60)).ok());
  EXPECT_EQ(state(), "ready");
  EXPECT_TRUE(sidecar_->backend()->TakesRows("db1.t").ok());
  ExpectIndexEqualsTable();
}

// A kept table altered into one tally cannot keep (here: its primary key
// dropped) is refused alone, named in the status, while the other table
// goes on; altered back, it is built afresh and taken again; dropped, it
// is missing.
TEST_F(MariaDbSidecarTest, ATableAlteredIntoOneTallyCannotKeepIsRefusedAlone) {
  Sql("CREATE TABLE u (id bigint PRIMARY KEY, v int); INSERT INTO u VALUES "
      "(1, 1), (2, 2)");
  StartSidecar({"db1.t", "db1.u"});
  ExpectIndexEqualsTable("db1.u");
  auto u_status = [&] {
    for (const SidecarKeyspaceStatus& k : sidecar_->status().keyspaces) {
      if (k.name == "db1.u") return k;
    }
    return SidecarKeyspaceStatus{};
  };
  Sql("ALTER TABLE u DROP PRIMARY KEY");
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (u_status().state != "refused" && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_EQ(u_status().state, "refused") << sidecar_->status().last_error;
  EXPECT_THAT(u_status().trouble, HasSubstr("has no primary key"));
  EXPECT_TRUE(absl::IsNotFound(sidecar_->backend()->TakesRows("db1.u")));
  // The other table goes on.
  Sql("UPDATE t SET b = 'after' WHERE id = 1");
  ExpectIndexEqualsTable("db1.t");

  Sql("ALTER TABLE u ADD PRIMARY KEY (id); INSERT INTO u VALUES (3, 3)");
  const absl::Time back = absl::Now() + absl::Seconds(30);
  while (u_status().state != "ready" && absl::Now() < back) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_EQ(u_status().state, "ready") << u_status().trouble;
  EXPECT_TRUE(sidecar_->backend()->TakesRows("db1.u").ok());
  ExpectIndexEqualsTable("db1.u");

  // Dropped while its index holds rows: missing, its rows forgotten (this
  // failed the sidecar before: the erases carried no version).
  Sql("DROP TABLE u");
  const absl::Time gone = absl::Now() + absl::Seconds(30);
  while (u_status().state != "missing" && absl::Now() < gone) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_EQ(u_status().state, "missing") << sidecar_->status().last_error;
  const absl::Time follows = absl::Now() + absl::Seconds(30);
  while (sidecar_->status().phase != "following" && absl::Now() < follows) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(sidecar_->status().phase, "following");
  EXPECT_TRUE(absl::IsNotFound(store_->Get("db1.u", Key(1)).status()));
  Sql("UPDATE t SET b = 'later' WHERE id = 2");
  ExpectIndexEqualsTable("db1.t");
}

// The store emptied with the server's marker naming it: a loss (rows the
// application wrote since the first build get fresh versions); a marker
// naming another server (a copy of the tally database): a first start.
TEST_F(MariaDbSidecarTest,
       AnEmptiedStoreIsALossUnlessTheMarkerIsAnotherServers) {
  StartSidecar();
  ExpectIndexEqualsTable();
  StopSidecar();
  Sql("UPDATE t SET b = 'while-down' WHERE id <= 3");
  std::filesystem::remove_all(dir_.path());
  std::filesystem::create_directories(dir_.path());
  StartSidecar();
  ExpectIndexEqualsTable();
  EXPECT_TRUE(sidecar_->status().index_lost);
  EXPECT_EQ(sidecar_->status().index_loss_fresh_rows, 3u);
  EXPECT_THAT(sidecar_->status().last_rebuild_reason, HasSubstr("index lost"));
  absl::StatusOr<storage::Row> r = store_->Get("db1.t", Key(2));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->version.origin, "node-m");
  r = store_->Get("db1.t", Key(7));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->version.origin, "tally.bootstrap");
  StopSidecar();

  Sql("UPDATE tally.index_marker SET server = 'server_id 1 on elsewhere:3306 "
      "/var/lib/mysql/'");
  std::filesystem::remove_all(dir_.path());
  std::filesystem::create_directories(dir_.path());
  StartSidecar();
  ExpectIndexEqualsTable();
  EXPECT_FALSE(sidecar_->status().index_lost);
  EXPECT_THAT(sidecar_->status().last_rebuild_reason, HasSubstr("first start"));
  r = store_->Get("db1.t", Key(2));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->version.origin, "tally.bootstrap");
  // The marker names this server again.
  EXPECT_EQ(
      Sql("SELECT server LIKE '% on elsewhere:%' FROM tally.index_marker"),
      "0");
}

}  // namespace
}  // namespace mariadb
}  // namespace tally
