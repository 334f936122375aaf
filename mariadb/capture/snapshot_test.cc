// The handoff a MariaDB index build relies on: the rows read in a
// consistent snapshot, replayed with every row change the binary log holds
// after the snapshot's GTID position, give exactly the table's final rows —
// while four application connections write all along. Every before image
// must equal the row the replay holds, every insert must meet no row. Real
// throwaway server; tally's own binary log reader and row conversion.
#include "mariadb/capture/snapshot.h"

#include <atomic>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "mariadb/binlog/binlog_stream.h"
#include "mariadb/binlog/row_events.h"
#include "mariadb/table.h"
#include "mariadb/url.h"
#include "pg/schema/row_codec.h"
#include "support/mariadb_test_macros.h"

namespace tally {
namespace mariadb {
namespace {

using testing::MariaDbServer;

constexpr int kRows = 20000;

std::unique_ptr<Connection> Connect(const MariaDbServer& server) {
  absl::StatusOr<MariaDbTarget> target = ParseMariaDbUrl(server.Url("db1"));
  EXPECT_TRUE(target.ok()) << target.status();
  absl::StatusOr<std::unique_ptr<Connection>> c =
      Connection::Open(*target, absl::Seconds(30));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

// Canonical key -> canonical value.
using Rows = std::map<std::string, std::string>;

Rows ReadAll(Connection& conn, const MariaDbTable& table) {
  Rows rows;
  const pg::RowCodec codec = table.schema().codec();
  absl::Status s = table.ForEachRow(
      conn, "", [&](absl::Span<const pg::Field> fields) -> absl::Status {
        std::string key;
        std::string value;
        absl::Status e = codec.Encode(fields, &key, &value);
        if (!e.ok()) return e;
        rows[key] = value;
        return absl::OkStatus();
      });
  EXPECT_TRUE(s.ok()) << s;
  return rows;
}

// One application connection writing until told to stop: single-row
// updates, inserts and deletes, and three-statement transactions.
void Write(const MariaDbServer& server, int writer, std::atomic<bool>* stop,
           std::atomic<int>* statements) {
  std::unique_ptr<Connection> conn = Connect(server);
  if (conn == nullptr) return;
  std::mt19937 random(writer);
  std::uniform_int_distribution<int> id(1, kRows);
  int next_insert = 1000000 * (writer + 1);
  while (!stop->load()) {
    std::string sql;
    switch (random() % 5) {
      case 0:
        sql = absl::StrCat("UPDATE db1.t SET a = a + 1, c = NOW(6) WHERE id = ",
                           id(random));
        break;
      case 1:
        sql = absl::StrCat("INSERT INTO db1.t VALUES (", next_insert++,
                           ", 1, 'new', NOW(6), 1.25)");
        break;
      case 2:
        sql = absl::StrCat("DELETE FROM db1.t WHERE id = ", id(random));
        break;
      case 3:
        sql = absl::StrCat("UPDATE db1.t SET b = CONCAT('w', ", writer,
                           ", '-', a), d = d + 0.01 WHERE id BETWEEN ",
                           id(random), " AND ", id(random) % 50 + 1);
        break;
      default: {
        // A transaction of three statements; lock waits between writers
        // may roll one back, which the server logs nowhere.
        if (!conn->Exec("START TRANSACTION").ok()) continue;
        const int a = id(random);
        bool ok =
            conn->Exec(absl::StrCat("UPDATE db1.t SET a = -a WHERE id = ", a))
                .ok() &&
            conn->Exec(
                    absl::StrCat("DELETE FROM db1.t WHERE id = ", id(random)))
                .ok() &&
            conn->Exec(absl::StrCat("INSERT INTO db1.t VALUES (", next_insert++,
                                    ", 2, 'tx', NOW(6), 2.5)"))
                .ok();
        (void)conn->Exec(ok ? "COMMIT" : "ROLLBACK");
        statements->fetch_add(3);
        continue;
      }
    }
    (void)conn->Exec(sql);
    statements->fetch_add(1);
  }
}

TEST(MariaDbSnapshot, RowsOfTheSnapshotPlusTheBinlogAfterItAreTheTable) {
  TALLY_SKIP_UNLESS_MARIADB();
  absl::StatusOr<std::unique_ptr<MariaDbServer>> server =
      MariaDbServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE((*server)
                  ->Execute(absl::StrCat(
                      "CREATE DATABASE db1; CREATE TABLE db1.t (id bigint "
                      "PRIMARY KEY, a int, b varchar(40), c datetime(6), d "
                      "decimal(10,2)); INSERT INTO db1.t SELECT seq, seq, "
                      "MD5(seq), NOW(6), seq / 100 FROM db1.seq_1_to_",
                      kRows))
                  .ok());
  std::unique_ptr<Connection> conn = Connect(**server);
  ASSERT_NE(conn, nullptr);
  absl::StatusOr<MariaDbTable> table = MariaDbTable::Read(*conn, "db1.t");
  ASSERT_TRUE(table.ok()) << table.status();

  std::atomic<bool> stop{false};
  std::atomic<int> statements{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < 4; ++w) {
    writers.emplace_back(Write, std::cref(**server), w, &stop, &statements);
  }
  absl::SleepFor(absl::Milliseconds(300));
  // The snapshot, taken while the writers write.
  absl::StatusOr<SnapshotPosition> at = BeginSnapshot(*conn);
  ASSERT_TRUE(at.ok()) << at.status();
  const int before_snapshot = statements.load();
  Rows replay = ReadAll(*conn, *table);
  ASSERT_TRUE(conn->Exec("COMMIT").ok());
  absl::SleepFor(absl::Milliseconds(700));
  stop.store(true);
  for (std::thread& t : writers) t.join();
  ASSERT_GT(statements.load(), before_snapshot + 100)
      << "the writers wrote too little after the snapshot to test it";
  absl::StatusOr<TextRows> end = conn->Query("SELECT @@gtid_binlog_pos");
  ASSERT_TRUE(end.ok()) << end.status();
  const std::string end_gtid = (*end)[0][0].value_or("");

  // The binary log after the snapshot, replayed onto its rows.
  absl::StatusOr<MariaDbTarget> target = ParseMariaDbUrl((*server)->Url());
  ASSERT_TRUE(target.ok());
  binlog::BinlogStreamOptions options;
  options.replica_server_id = 4242;
  options.start_gtid = at->gtid;
  absl::StatusOr<std::unique_ptr<binlog::BinlogStream>> stream =
      binlog::BinlogStream::Open(*target, options);
  ASSERT_TRUE(stream.ok()) << stream.status();
  const pg::RowCodec codec = table->schema().codec();
  absl::flat_hash_map<const binlog::TableMap*, std::unique_ptr<RowConverter>>
      converters;
  int changes = 0;
  int mismatches = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while ((*stream)->gtid_state() != end_gtid && absl::Now() < deadline) {
    absl::StatusOr<binlog::BinlogEvent> event =
        (*stream)->Next(absl::Seconds(2));
    ASSERT_TRUE(event.ok()) << event.status();
    if (!binlog::IsRowsEvent(event->type) || event->table_map == nullptr ||
        event->table_map->table != "t") {
      continue;
    }
    const binlog::TableMap* map = event->table_map.get();
    auto it = converters.find(map);
    if (it == converters.end()) {
      std::vector<std::string> names;
      for (const binlog::TableMapColumn& c : map->columns) {
        names.push_back(c.name);
      }
      absl::StatusOr<RowConverter> made = table->ConverterFor(names);
      ASSERT_TRUE(made.ok()) << made.status();
      it = converters
               .emplace(map, std::make_unique<RowConverter>(*std::move(made)))
               .first;
    }
    absl::StatusOr<binlog::RowsEvent> rows =
        binlog::DecodeRowsEvent(event->type, event->body, *map);
    ASSERT_TRUE(rows.ok()) << rows.status();
    for (const binlog::RowChange& change : rows->changes) {
      ++changes;
      std::string key;
      std::string value;
      if (change.before.has_value()) {
        absl::StatusOr<absl::Span<const pg::Field>> fields =
            it->second->Convert(*change.before);
        ASSERT_TRUE(fields.ok()) << fields.status();
        ASSERT_TRUE(codec.Encode(*fields, &key, &value).ok());
        auto held = replay.find(key);
        if (held == replay.end() || held->second != value) ++mismatches;
        replay.erase(key);
      }
      if (change.after.has_value()) {
        absl::StatusOr<absl::Span<const pg::Field>> fields =
            it->second->Convert(*change.after);
        ASSERT_TRUE(fields.ok()) << fields.status();
        ASSERT_TRUE(codec.Encode(*fields, &key, &value).ok());
        if (!change.before.has_value() && replay.count(key) > 0) ++mismatches;
        replay[key] = value;
      }
    }
  }
  EXPECT_EQ((*stream)->gtid_state(), end_gtid);
  EXPECT_GT(changes, 100);
  EXPECT_EQ(mismatches, 0);
  const Rows final_rows = ReadAll(*conn, *table);
  EXPECT_EQ(replay.size(), final_rows.size());
  EXPECT_TRUE(replay == final_rows);
}

TEST(MariaDbSnapshot, AServerWithoutABinaryLogIsRefused) {
  TALLY_SKIP_UNLESS_MARIADB();
  testing::MariaDbServerOptions options;
  options.options = {"--skip-log-bin"};
  absl::StatusOr<std::unique_ptr<MariaDbServer>> server =
      MariaDbServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE((*server)->Execute("CREATE DATABASE db1").ok());
  std::unique_ptr<Connection> conn = Connect(**server);
  ASSERT_NE(conn, nullptr);
  absl::StatusOr<SnapshotPosition> at = BeginSnapshot(*conn);
  ASSERT_FALSE(at.ok());
  EXPECT_EQ(at.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(at.status().message().find("--log-bin"), std::string::npos)
      << at.status();
  // The transaction was rolled back: the connection works.
  EXPECT_TRUE(conn->Exec("SELECT 1").ok());
}

}  // namespace
}  // namespace mariadb
}  // namespace tally
