// ReadLocalWrites against a real throwaway MariaDB server: which keys the
// server's own applications last wrote or deleted between two GTID states,
// and the oldest log read instead of a purged one.
#include "mariadb/sidecar/local_writes.h"

#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "mariadb/connection.h"
#include "mariadb/table.h"
#include "mariadb/url.h"
#include "support/mariadb_test_macros.h"

namespace tally {
namespace mariadb {
namespace {

using testing::MariaDbServer;

constexpr uint32_t kApplyServerId = 5300;

class LocalWritesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TALLY_SKIP_UNLESS_MARIADB();
    absl::StatusOr<std::unique_ptr<MariaDbServer>> m = MariaDbServer::Start();
    ASSERT_TRUE(m.ok()) << m.status();
    server_ = *std::move(m);
    absl::StatusOr<std::string> made = server_->Execute(
        "CREATE DATABASE db1; USE db1; CREATE TABLE t (id bigint PRIMARY KEY, "
        "b "
        "varchar(40)) DEFAULT CHARSET utf8mb4; INSERT INTO db1.t SELECT seq, "
        "'seed' FROM seq_1_to_100");
    ASSERT_TRUE(made.ok()) << made.status();
    absl::StatusOr<MariaDbTarget> target = ParseMariaDbUrl(server_->Url("db1"));
    ASSERT_TRUE(target.ok());
    target_ = *target;
    absl::StatusOr<std::unique_ptr<Connection>> conn =
        Connection::Open(target_, absl::Seconds(10));
    ASSERT_TRUE(conn.ok()) << conn.status();
    absl::StatusOr<MariaDbTable> table = MariaDbTable::Read(**conn, "db1.t");
    ASSERT_TRUE(table.ok()) << table.status();
    table_.emplace(*std::move(table));
  }

  std::string Sql(absl::string_view sql) {
    absl::StatusOr<std::string> out = server_->Execute(sql, "db1");
    EXPECT_TRUE(out.ok()) << sql << ": " << out.status();
    return out.ok() ? *out : "";
  }
  std::string Gtid() { return Sql("SELECT @@gtid_binlog_pos"); }

  absl::StatusOr<LocalWrites> Read(const std::string& from,
                                   const std::string& to) {
    LocalWritesOptions o;
    o.from_gtid = from;
    o.to_gtid = to;
    o.tables["db1.t"] = &*table_;
    o.node = "node-l";
    o.apply_server_id = kApplyServerId;
    o.stall_timeout = absl::Seconds(10);
    return ReadLocalWrites(target_, o);
  }

  // (written, deleted) key counts of db1.t.
  static std::pair<int, int> Counts(const LocalWrites& w) {
    std::pair<int, int> c{0, 0};
    auto it = w.keys.find("db1.t");
    if (it == w.keys.end()) return c;
    for (const auto& [key, written] : it->second) {
      (written ? c.first : c.second)++;
    }
    return c;
  }

  std::unique_ptr<MariaDbServer> server_;
  MariaDbTarget target_;
  std::optional<MariaDbTable> table_;
};

TEST_F(LocalWritesTest, TheLastChangeOfEachKeyDecides) {
  const std::string from = Gtid();
  Sql("UPDATE t SET b = 'x' WHERE id IN (1, 2)");
  Sql("DELETE FROM t WHERE id = 3");
  Sql("INSERT INTO t VALUES (5001, 'new')");
  Sql("UPDATE t SET b = 'y' WHERE id = 4; DELETE FROM t WHERE id = 4");
  Sql("DELETE FROM t WHERE id = 6; INSERT INTO t VALUES (6, 'back')");
  // Another table is no kept table's.
  Sql("CREATE TABLE other (id int PRIMARY KEY); INSERT INTO other VALUES (1)");
  // A transaction with the apply's server_id but no apply log record of
  // this node (a trigger's rows, or another tool's): local.
  Sql("SET SESSION server_id = 5300; UPDATE t SET b = 'z' WHERE id = 10");
  const std::string to = Gtid();

  absl::StatusOr<LocalWrites> w = Read(from, to);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE(w->complete);
  EXPECT_EQ(w->read_from, from);
  EXPECT_EQ(w->unreadable_transactions, 0u);
  // Written: 1, 2, 5001, 6, 10; deleted: 3, 4.
  EXPECT_EQ(Counts(*w), std::make_pair(5, 2));
  EXPECT_GE(w->transactions, 9u);

  // Nothing between a state and itself.
  absl::StatusOr<LocalWrites> none = Read(to, to);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(Counts(*none), std::make_pair(0, 0));
}

TEST_F(LocalWritesTest, APurgedLogIsReadFromTheOldestTheServerHolds) {
  const std::string from = Gtid();
  Sql("UPDATE t SET b = 'before' WHERE id = 1");
  Sql("FLUSH BINARY LOGS");
  const std::string oldest = Sql("SELECT @@gtid_binlog_pos");
  Sql("UPDATE t SET b = 'after' WHERE id IN (2, 3)");
  Sql("FLUSH BINARY LOGS");
  // Purge every log before the one that starts at `oldest`.
  {
    absl::StatusOr<std::unique_ptr<Connection>> c =
        Connection::Open(target_, absl::Seconds(10));
    ASSERT_TRUE(c.ok());
    absl::StatusOr<TextRows> listed = (*c)->Query("SHOW BINARY LOGS");
    ASSERT_TRUE(listed.ok() && listed->size() >= 3) << listed.status();
    const std::string keep = *(*listed)[listed->size() - 2][0];
    // The server keeps a file until its binlog checkpoint has moved past
    // it (shortly after the rotation): purge until it is gone.
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    for (;;) {
      ASSERT_TRUE((*c)->Exec("PURGE BINARY LOGS TO '" + keep + "'").ok());
      listed = (*c)->Query("SHOW BINARY LOGS");
      ASSERT_TRUE(listed.ok());
      if (*(*listed)[0][0] == keep) break;
      ASSERT_LT(absl::Now(), deadline) << "the server kept older logs";
      absl::SleepFor(absl::Milliseconds(100));
    }
  }
  Sql("UPDATE t SET b = 'later' WHERE id = 4");
  const std::string to = Gtid();

  absl::StatusOr<LocalWrites> w = Read(from, to);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_FALSE(w->complete);
  EXPECT_EQ(w->read_from, oldest);
  // Row 1's write went with the purged log; 2, 3 and 4 are known.
  EXPECT_EQ(Counts(*w), std::make_pair(3, 0));
}

}  // namespace
}  // namespace mariadb
}  // namespace tally
