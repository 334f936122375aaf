// The binlog stream and the row decoder against real throwaway MariaDB
// servers: every mapped type's row images, made canonical, equal what a
// scan of the same rows gives at the same moment; a 100k-row update is read
// whole; rotation, purged binlogs, a killed and a silenced server, a
// session server_id, DDL and TRUNCATE, partial images.
#include "mariadb/binlog/binlog_stream.h"

#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mariadb/binlog/row_events.h"
#include "mariadb/column_mapping.h"
#include "mariadb/connection.h"
#include "mariadb/table.h"
#include "mariadb/url.h"
#include "support/mariadb_test_macros.h"
#include "support/tcp_proxy.h"

namespace tally {
namespace mariadb {
namespace binlog {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::MariaDbServer;

// A row as canonical fields in the table's canonical column order;
// nullopt for NULL.
using CanonicalRow = std::vector<std::optional<std::string>>;

constexpr uint32_t kReplicaId = 9100;

class BinlogStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TALLY_SKIP_UNLESS_MARIADB();
    absl::StatusOr<std::unique_ptr<MariaDbServer>> m = MariaDbServer::Start();
    ASSERT_TRUE(m.ok()) << m.status();
    server_ = *std::move(m);
    ASSERT_TRUE(server_->Execute("CREATE DATABASE db1").ok());
    absl::StatusOr<MariaDbTarget> target = ParseMariaDbUrl(server_->Url("db1"));
    ASSERT_TRUE(target.ok()) << target.status();
    target_ = *target;
  }

  void Sql(absl::string_view sql) {
    absl::StatusOr<std::string> out = server_->Execute(sql);
    ASSERT_TRUE(out.ok()) << sql << ": " << out.status();
  }
  std::string Query(absl::string_view sql) {
    absl::StatusOr<std::string> out = server_->Execute(sql);
    EXPECT_TRUE(out.ok()) << sql << ": " << out.status();
    return out.ok() ? *out : "";
  }

  absl::StatusOr<std::unique_ptr<BinlogStream>> Open(
      absl::string_view start, const MariaDbTarget* target = nullptr) {
    BinlogStreamOptions options;
    options.replica_server_id = kReplicaId;
    options.start_gtid = std::string(start);
    options.heartbeat_period = absl::Milliseconds(500);
    options.read_timeout = absl::Seconds(3);
    return BinlogStream::Open(target ? *target : target_, options);
  }

  // Reads events until `transactions` transactions have ended (XID or
  // standalone statement), failing after `limit`. Heartbeats are dropped.
  std::vector<BinlogEvent> ReadTransactions(
      BinlogStream& stream, int transactions,
      absl::Duration limit = absl::Seconds(15)) {
    std::vector<BinlogEvent> events;
    const absl::Time deadline = absl::Now() + limit;
    int ended = 0;
    bool standalone = false;
    while (ended < transactions) {
      if (absl::Now() > deadline) {
        ADD_FAILURE() << "only " << ended << " of " << transactions
                      << " transactions in " << limit;
        break;
      }
      absl::StatusOr<BinlogEvent> e = stream.Next(absl::Seconds(1));
      if (!e.ok()) {
        ADD_FAILURE() << e.status();
        break;
      }
      if (e->idle()) continue;
      if (e->type == kGtidEvent) standalone = (e->gtid_flags & 1) != 0;
      if (e->type == kXidEvent || (e->type == kQueryEvent && standalone)) {
        ++ended;
        standalone = false;
      }
      events.push_back(*std::move(e));
    }
    return events;
  }

  std::unique_ptr<MariaDbServer> server_;
  MariaDbTarget target_;
};

// Canonical rows of one table, from a scan or from binlog images.
class Canonicalizer {
 public:
  static absl::StatusOr<Canonicalizer> Read(Connection& conn,
                                            absl::string_view table) {
    absl::StatusOr<MariaDbTable> t = MariaDbTable::Read(conn, table);
    if (!t.ok()) return t.status();
    return Canonicalizer(*std::move(t));
  }

  // Every row by its id (canonical bytes of column `id`), as a scan
  // reads it now.
  std::map<std::string, CanonicalRow> Scan(Connection& conn) {
    std::map<std::string, CanonicalRow> rows;
    absl::Status s =
        conn.Stream(absl::StrCat("SELECT ", table_.select_list(), " FROM ",
                                 table_.quoted_name()),
                    [&](absl::Span<const Value> values) -> absl::Status {
                      CanonicalRow row;
                      for (size_t i = 0; i < values.size(); ++i) {
                        row.push_back(Field(i, values[i]));
                      }
                      rows[*row[id_]] = row;
                      return absl::OkStatus();
                    });
    EXPECT_TRUE(s.ok()) << s;
    return rows;
  }

  // A binlog image (columns in the table map's order) as a canonical row.
  CanonicalRow FromImage(const TableMap& map, const std::vector<Value>& image) {
    CanonicalRow row(table_.mappings().size());
    EXPECT_EQ(image.size(), map.columns.size());
    for (size_t i = 0; i < image.size() && i < map.columns.size(); ++i) {
      const size_t at = table_.schema().ColumnIndex(map.columns[i].name);
      EXPECT_LT(at, row.size()) << map.columns[i].name;
      if (at < row.size()) row[at] = Field(at, image[i]);
    }
    return row;
  }
  std::string Id(const CanonicalRow& row) const { return *row[id_]; }

 private:
  explicit Canonicalizer(MariaDbTable t)
      : table_(std::move(t)), id_(table_.schema().ColumnIndex("id")) {}

  std::optional<std::string> Field(size_t i, const Value& v) {
    if (v.kind == Value::Kind::kNull) return std::nullopt;
    std::string out;
    absl::Status s = AppendCanonical(table_.mappings()[i], v, &out);
    EXPECT_TRUE(s.ok()) << table_.schema().columns()[i].name << ": " << s;
    return out;
  }

  MariaDbTable table_;
  size_t id_;
};

std::string Show(const CanonicalRow& row) {
  std::vector<std::string> parts;
  for (const auto& f : row) {
    if (!f) {
      parts.push_back("NULL");
    } else if (f->size() > 64) {
      parts.push_back(absl::StrCat("<", f->size(), " bytes>"));
    } else {
      parts.push_back(absl::CHexEscape(*f));
    }
  }
  return absl::StrJoin(parts, " | ");
}

// Every row change of `events`, canonical.
struct CanonicalChange {
  std::optional<CanonicalRow> before;
  std::optional<CanonicalRow> after;
};
std::vector<CanonicalChange> Changes(const std::vector<BinlogEvent>& events,
                                     Canonicalizer& c) {
  std::vector<CanonicalChange> out;
  for (const BinlogEvent& e : events) {
    if (!IsRowsEvent(e.type)) continue;
    EXPECT_NE(e.table_map, nullptr);
    if (e.table_map == nullptr) continue;
    absl::StatusOr<RowsEvent> rows =
        DecodeRowsEvent(e.type, e.body, *e.table_map);
    EXPECT_TRUE(rows.ok()) << rows.status();
    if (!rows.ok()) continue;
    for (const RowChange& change : rows->changes) {
      CanonicalChange& o = out.emplace_back();
      if (change.before) o.before = c.FromImage(*e.table_map, *change.before);
      if (change.after) o.after = c.FromImage(*e.table_map, *change.after);
    }
  }
  return out;
}

constexpr char kEveryType[] = R"sql(
CREATE TABLE db1.t (
  id bigint PRIMARY KEY, i int, s smallint, ti tinyint, mi mediumint,
  u int unsigned, f float, d double, n decimal(20,6), c char(4),
  v varchar(40), tx text, mt mediumtext, b blob, j json, dt date,
  ts6 datetime(6), ts0 datetime(0), tz timestamp(6) NULL DEFAULT NULL,
  tm time(6)) DEFAULT CHARSET utf8mb4
)sql";

TEST_F(BinlogStreamTest, EveryTypeDecodesAsTheScanReadsIt) {
  Sql(kEveryType);
  absl::StatusOr<std::unique_ptr<BinlogStream>> stream = Open("");
  ASSERT_TRUE(stream.ok()) << stream.status();
  absl::StatusOr<std::unique_ptr<Connection>> conn =
      Connection::Open(target_, absl::Seconds(30));
  ASSERT_TRUE(conn.ok()) << conn.status();
  absl::StatusOr<Canonicalizer> canon = Canonicalizer::Read(**conn, "db1.t");
  ASSERT_TRUE(canon.ok()) << canon.status();

  Sql("SET time_zone = '+00:00'; INSERT INTO db1.t VALUES "
      "(1, 42, -7, -128, -8388608, 4294967295, 1.5, 1e23, -12.5, 'ab', "
      "'héllo', 'text', 'mt', 'bytes', '{\"a\": [1, 2.5]}', '2024-02-29', "
      "'2024-01-01 12:34:56.789012', '2024-01-01 12:34:56', "
      "'2024-01-01 12:00:00.5', '23:59:59.999999'),"
      "(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
      "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),"
      "(3, 0, 0, 0, 0, 0, 0, 0, 0, '', '', '', '', '', '[]', '1970-01-01', "
      "'1999-12-31 23:59:59', '1000-01-01 00:00:00', '1970-01-02 00:00:00', "
      "'00:00:00'),"
      "(4, -2147483648, 32767, 127, 8388607, 1, -3.25, -2.5e-300, "
      "99999999999999.999999, 'abcd', 'x', 'tab\\tand\\nnewline', 'y', "
      "x'00ff', 'null', '9999-12-31', '9999-12-31 23:59:59.999999', "
      "'2000-02-29 01:02:03', '2038-01-19 03:14:07.000001', "
      "'12:00:00.000001')");
  const std::map<std::string, CanonicalRow> inserted = canon->Scan(**conn);
  Sql("SET time_zone = '+00:00'; UPDATE db1.t SET mt = REPEAT('z', 100000), "
      "n = -0.05, c = 'üü', tz = '2024-06-30 23:59:59.999999', "
      "tm = '00:00:00.000001' WHERE id = 2; "
      "UPDATE db1.t SET i = i + 1, n = 0, b = REPEAT(x'01', 60000), "
      "f = f / 3, d = d / 3 WHERE id IN (1, 3, 4)");
  const std::map<std::string, CanonicalRow> updated = canon->Scan(**conn);
  Sql("DELETE FROM db1.t WHERE id IN (3, 4)");

  std::vector<BinlogEvent> events = ReadTransactions(**stream, 4);
  std::vector<CanonicalChange> changes = Changes(events, *canon);
  // 4 inserts, 1 + 3 updates, 2 deletes.
  ASSERT_EQ(changes.size(), 10u);
  for (size_t k = 0; k < changes.size(); ++k) {
    const CanonicalChange& c = changes[k];
    if (k < 4) {
      ASSERT_TRUE(c.after && !c.before);
      const CanonicalRow& scanned = inserted.at(canon->Id(*c.after));
      EXPECT_EQ(*c.after, scanned) << "insert\nbinlog: " << Show(*c.after)
                                   << "\nscan:   " << Show(scanned);
    } else if (k < 8) {
      ASSERT_TRUE(c.after && c.before);
      const CanonicalRow& old_row = inserted.at(canon->Id(*c.before));
      const CanonicalRow& new_row = updated.at(canon->Id(*c.after));
      EXPECT_EQ(*c.before, old_row) << "before\nbinlog: " << Show(*c.before)
                                    << "\nscan:   " << Show(old_row);
      EXPECT_EQ(*c.after, new_row) << "after\nbinlog: " << Show(*c.after)
                                   << "\nscan:   " << Show(new_row);
    } else {
      ASSERT_TRUE(c.before && !c.after);
      const CanonicalRow& old_row = updated.at(canon->Id(*c.before));
      EXPECT_EQ(*c.before, old_row) << "delete\nbinlog: " << Show(*c.before)
                                    << "\nscan:   " << Show(old_row);
    }
  }
  // The stream's position is the server's after the last transaction.
  EXPECT_EQ((*stream)->gtid_state(), Query("SELECT @@gtid_binlog_pos"));
}

TEST_F(BinlogStreamTest, ReadsAHundredThousandRowUpdateWhole) {
  Sql("CREATE TABLE db1.big (id bigint PRIMARY KEY, a int, "
      "v varchar(20)); INSERT INTO db1.big SELECT seq, seq, 'some text' "
      "FROM db1.seq_1_to_100000");
  const std::string position = Query("SELECT @@gtid_binlog_pos");
  Sql("UPDATE db1.big SET a = a + 1");
  // Read once the update is in the binlog, to time the stream alone.
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<BinlogStream>> stream = Open(position);
  ASSERT_TRUE(stream.ok()) << stream.status();
  std::vector<BinlogEvent> events = ReadTransactions(**stream, 1);
  std::cout << "streamed " << events.size() << " events in "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                             start)
                   .count()
            << " s (connect included)\n";
  start = std::chrono::steady_clock::now();
  uint64_t before = 0, after = 0, rows_events = 0, bytes = 0;
  int64_t sum = 0;
  for (const BinlogEvent& e : events) {
    if (!IsRowsEvent(e.type)) continue;
    ASSERT_NE(e.table_map, nullptr);
    absl::StatusOr<RowsEvent> rows =
        DecodeRowsEvent(e.type, e.body, *e.table_map);
    ASSERT_TRUE(rows.ok()) << rows.status();
    ++rows_events;
    bytes += e.body.size();
    for (const RowChange& c : rows->changes) {
      before += c.before.has_value();
      after += c.after.has_value();
      sum += (*c.after)[1].i - (*c.before)[1].i;
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_EQ(before, 100000u);
  EXPECT_EQ(after, 100000u);
  EXPECT_EQ(sum, 100000);
  // A measurement, not a check: the decoder's speed on this machine.
  std::cout << "decoded " << before + after << " images (" << rows_events
            << " row events, " << bytes << " bytes) in " << seconds
            << " s: " << (before + after) / seconds << " images/s\n";
}

// `v` as text that shows every field a scan sets, to compare values of
// types the canonical mapping refuses.
std::string ValueText(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kNull:
      return "NULL";
    case Value::Kind::kInt:
      return absl::StrCat("int ", v.i);
    case Value::Kind::kUint:
      return absl::StrCat("uint ", v.u);
    case Value::Kind::kFloat:
      return absl::StrCat("float ", absl::StrFormat("%a", v.f));
    case Value::Kind::kDouble:
      return absl::StrCat("double ", absl::StrFormat("%a", v.d));
    case Value::Kind::kTime: {
      const TimeValue& t = v.time;
      return absl::StrFormat("time %s%04d-%02d-%02d %02d:%02d:%02d.%06d",
                             t.negative ? "-" : "", t.year, t.month, t.day,
                             t.hour, t.minute, t.second, t.microsecond);
    }
    case Value::Kind::kBytes:
      return absl::StrCat("bytes '", absl::CHexEscape(v.bytes), "'");
  }
  return "?";
}

TEST_F(BinlogStreamTest, ValuesOfUnmappedTypesEqualTheBinaryProtocols) {
  Sql("CREATE TABLE db1.w (id int PRIMARY KEY, e enum('a','b','c'), "
      "st set('x','y','z'), bt bit(10), y year, bn binary(4), "
      "vb varbinary(10), cl char(8) CHARSET latin1, tm2 time(2), tm0 time, "
      "tm6 time(6), dt3 datetime(3), ts1 timestamp(1) NULL DEFAULT NULL, "
      "d50 decimal(5,0), d3010 decimal(30,10), ub bigint unsigned, "
      "us smallint unsigned, ut tinyint unsigned, um mediumint unsigned, "
      "fl float, lb longblob, tt tinytext) DEFAULT CHARSET utf8mb4");
  absl::StatusOr<std::unique_ptr<BinlogStream>> stream = Open("");
  ASSERT_TRUE(stream.ok()) << stream.status();
  Sql("SET time_zone = '+00:00'; INSERT INTO db1.w VALUES "
      "(1, 'b', 'x,z', b'1010101010', 2024, 'ab', x'00ff00', 'abc', "
      "'-12:34:56.78', '-838:59:59', '-00:00:00.000001', "
      "'2024-01-01 12:34:56.789', '2024-01-01 00:00:00.1', -12345, "
      "-12345678901234567890.0123456789, 18446744073709551615, 65535, 255, "
      "16777215, 3.4e38, REPEAT('q', 70000), 'tiny'),"
      "(2, 'c', '', b'0', 1901, 'abcd', '', 'x  ', '-00:00:00.5', "
      "'00:00:00', '838:59:59.999999', '1000-01-01 00:00:00.001', "
      "'1970-01-01 00:00:01.9', 0, 0.0000000001, 0, 0, 0, 0, -0.0, '', ''),"
      "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
      "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)");
  absl::StatusOr<std::unique_ptr<Connection>> conn =
      Connection::Open(target_, absl::Seconds(30));
  ASSERT_TRUE(conn.ok()) << conn.status();
  std::vector<std::vector<std::string>> scanned;
  ASSERT_TRUE((*conn)
                  ->Stream("SELECT * FROM db1.w ORDER BY id",
                           [&](absl::Span<const Value> row) {
                             std::vector<std::string>& out =
                                 scanned.emplace_back();
                             for (const Value& v : row) {
                               out.push_back(ValueText(v));
                             }
                             return absl::OkStatus();
                           })
                  .ok());
  std::vector<std::vector<std::string>> logged;
  std::vector<std::string> names;
  for (const BinlogEvent& e : ReadTransactions(**stream, 1)) {
    if (!IsRowsEvent(e.type)) continue;
    absl::StatusOr<RowsEvent> rows =
        DecodeRowsEvent(e.type, e.body, *e.table_map);
    ASSERT_TRUE(rows.ok()) << rows.status();
    for (const TableMapColumn& c : e.table_map->columns)
      names.push_back(c.name);
    for (const RowChange& c : rows->changes) {
      std::vector<std::string>& out = logged.emplace_back();
      for (const Value& v : *c.after) out.push_back(ValueText(v));
    }
  }
  ASSERT_EQ(logged.size(), scanned.size());
  for (size_t r = 0; r < logged.size(); ++r) {
    ASSERT_EQ(logged[r].size(), scanned[r].size());
    for (size_t i = 0; i < logged[r].size(); ++i) {
      EXPECT_EQ(logged[r][i], scanned[r][i])
          << "row " << r << " column " << names[i];
    }
  }
}

// The ids of the rows WRITE_ROWS events of `events` insert, in order.
std::vector<int64_t> InsertedIds(const std::vector<BinlogEvent>& events) {
  std::vector<int64_t> ids;
  for (const BinlogEvent& e : events) {
    if (!IsRowsEvent(e.type) || e.table_map == nullptr) continue;
    absl::StatusOr<RowsEvent> rows =
        DecodeRowsEvent(e.type, e.body, *e.table_map);
    EXPECT_TRUE(rows.ok()) << rows.status();
    if (!rows.ok()) continue;
    for (const RowChange& c : rows->changes) {
      if (c.after) ids.push_back((*c.after)[0].i);
    }
  }
  return ids;
}

TEST_F(BinlogStreamTest, SurvivesRotationWithoutLossOrDuplicates) {
  Sql("CREATE TABLE db1.r (id bigint PRIMARY KEY)");
  absl::StatusOr<std::unique_ptr<BinlogStream>> stream = Open("");
  ASSERT_TRUE(stream.ok()) << stream.status();
  Sql("INSERT INTO db1.r VALUES (1); FLUSH BINARY LOGS; "
      "INSERT INTO db1.r VALUES (2), (3); FLUSH BINARY LOGS; FLUSH BINARY "
      "LOGS; "
      "INSERT INTO db1.r VALUES (4)");
  std::vector<BinlogEvent> events = ReadTransactions(**stream, 3);
  EXPECT_THAT(InsertedIds(events), ElementsAre(1, 2, 3, 4));
  // The real ROTATEs (not the artificial ones a dump sends).
  std::vector<std::string> rotations;
  for (const BinlogEvent& e : events) {
    if (e.type == kRotateEvent && (e.flags & 0x20) == 0) {
      rotations.push_back(e.rotate_file);
    }
  }
  EXPECT_EQ(rotations.size(), 3u) << absl::StrJoin(rotations, ",");
  std::cout << "rotations " << absl::StrJoin(rotations, ",")
            << ", Connector/C errors recovered from: "
            << (*stream)->recovered_rotations() << "\n";
  const std::string status = Query("SHOW MASTER STATUS");
  ASSERT_FALSE(rotations.empty());
  EXPECT_THAT(status, HasSubstr(rotations.back()));
  EXPECT_EQ(events.back().log_file, rotations.back());
  // Nothing more (binlog checkpoints only, the server writes them late),
  // then more after another rotation.
  for (;;) {
    absl::StatusOr<BinlogEvent> e = (*stream)->Next(absl::Seconds(1));
    ASSERT_TRUE(e.ok()) << e.status();
    if (e->idle()) break;
    EXPECT_FALSE(IsRowsEvent(e->type) || e->type == kGtidEvent) << e->type;
  }
  Sql("FLUSH BINARY LOGS; INSERT INTO db1.r VALUES (5)");
  EXPECT_THAT(InsertedIds(ReadTransactions(**stream, 1)), ElementsAre(5));
  EXPECT_EQ((*stream)->gtid_state(), Query("SELECT @@gtid_binlog_pos"));

  // A stream opened at a position read before the rotations resumes there.
  absl::StatusOr<std::unique_ptr<BinlogStream>> again =
      Open((*stream)->start_gtid());
  ASSERT_TRUE(again.ok()) << again.status();
  (*stream).reset();  // one reader per replica id
  EXPECT_THAT(InsertedIds(ReadTransactions(**again, 4)),
              ElementsAre(1, 2, 3, 4, 5));
}

TEST_F(BinlogStreamTest, PurgedBinlogsAreOutOfRange) {
  Sql("CREATE TABLE db1.p (id bigint PRIMARY KEY); "
      "INSERT INTO db1.p VALUES (1)");
  const std::string old_position = Query("SELECT @@gtid_binlog_pos");
  Sql("INSERT INTO db1.p VALUES (2); FLUSH BINARY LOGS");
  const std::string file = std::vector<std::string>(
      absl::StrSplit(Query("SHOW MASTER STATUS"), '\t'))[0];
  // The server keeps a file until its binlog checkpoint has moved past it
  // (written shortly after the rotation): purge until it is gone.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  do {
    Sql(absl::StrCat("PURGE BINARY LOGS TO '", file, "'"));
  } while (absl::StrContains(Query("SHOW BINARY LOGS"), "bin.000001") &&
           absl::Now() < deadline);
  ASSERT_THAT(Query("SHOW BINARY LOGS"),
              ::testing::Not(HasSubstr("bin.000001")));
  absl::StatusOr<std::unique_ptr<BinlogStream>> stream = Open(old_position);
  ASSERT_FALSE(stream.ok());
  EXPECT_EQ(stream.status().code(), absl::StatusCode::kOutOfRange)
      << stream.status();
  EXPECT_THAT(stream.status().message(), HasSubstr("1236"));
  EXPECT_THAT(stream.status().message(), HasSubstr("purged"));
  // A position the server never wrote is refused the same way.
  stream = Open("0-1-999999");
  EXPECT_EQ(stream.status().code(), absl::StatusCode::kOutOfRange)
      << stream.status();
  // The current position still opens.
  stream = Open("");
  EXPECT_TRUE(stream.ok()) << stream.status();
}

TEST_F(BinlogStreamTest, KilledServerIsUnavailableWithinTheTimeout) {
  absl::StatusOr<std::unique_ptr<BinlogStream>> stream = Open("");
  ASSERT_TRUE(stream.ok()) << stream.status();
  absl::StatusOr<BinlogEvent> e = (*stream)->Next(absl::Milliseconds(100));
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_TRUE(server_->Kill().ok());
  const absl::Time start = absl::Now();
  for (;;) {
    e = (*stream)->Next(absl::Seconds(1));
    if (!e.ok() || absl::Now() - start > absl::Seconds(10)) break;
  }
  EXPECT_EQ(e.status().code(), absl::StatusCode::kUnavailable) << e.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
}

TEST_F(BinlogStreamTest, ResumesAfterARestartFromItsGtidState) {
  Sql("CREATE TABLE db1.k (id bigint PRIMARY KEY)");
  absl::StatusOr<std::unique_ptr<BinlogStream>> stream = Open("");
  ASSERT_TRUE(stream.ok()) << stream.status();
  Sql("INSERT INTO db1.k VALUES (1)");
  EXPECT_THAT(InsertedIds(ReadTransactions(**stream, 1)), ElementsAre(1));
  ASSERT_TRUE(server_->Kill().ok());
  absl::StatusOr<BinlogEvent> e;
  do {
    e = (*stream)->Next(absl::Seconds(1));
  } while (e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kUnavailable) << e.status();
  const std::string resume = (*stream)->gtid_state();
  ASSERT_TRUE(server_->Restart().ok());
  Sql("INSERT INTO db1.k VALUES (2)");
  // The restart began a new binlog file; the stream picks up after 1.
  absl::StatusOr<std::unique_ptr<BinlogStream>> again = Open(resume);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_THAT(InsertedIds(ReadTransactions(**again, 1)), ElementsAre(2));
  EXPECT_EQ((*again)->gtid_state(), Query("SELECT @@gtid_binlog_pos"));
}

TEST_F(BinlogStreamTest, SilentServerIsUnavailableAfterTheReadTimeout) {
  absl::StatusOr<std::unique_ptr<testing::TcpProxy>> proxy =
      testing::TcpProxy::Start(absl::StrCat("127.0.0.1:", server_->port()));
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  MariaDbTarget via = target_;
  const std::string& address = (*proxy)->address();
  via.host = address.substr(0, address.find(':'));
  via.port = std::stoi(address.substr(address.find(':') + 1));
  absl::StatusOr<std::unique_ptr<BinlogStream>> stream = Open("", &via);
  ASSERT_TRUE(stream.ok()) << stream.status();
  // Heartbeats flow while the link does.
  absl::StatusOr<BinlogEvent> e;
  for (int i = 0; i < 20; ++i) {
    e = (*stream)->Next(absl::Milliseconds(600));
    ASSERT_TRUE(e.ok()) << e.status();
    if (e->idle()) break;
  }
  EXPECT_TRUE(e->idle());
  (*proxy)->Cut(testing::TcpProxy::CutMode::kBlackhole);
  const absl::Time start = absl::Now();
  for (;;) {
    e = (*stream)->Next(absl::Seconds(1));
    if (!e.ok() || absl::Now() - start > absl::Seconds(15)) break;
  }
  EXPECT_EQ(e.status().code(), absl::StatusCode::kUnavailable) << e.status();
  // The read timeout is 3 s.
  EXPECT_LT(absl::Now() - start, absl::Seconds(6));
}

TEST_F(BinlogStreamTest, SessionServerIdMarksEveryEventOfItsTransaction) {
  Sql("CREATE TABLE db1.m (id bigint PRIMARY KEY)");
  absl::StatusOr<std::unique_ptr<BinlogStream>> stream = Open("");
  ASSERT_TRUE(stream.ok()) << stream.status();
  Sql("SET SESSION server_id = 77; INSERT INTO db1.m VALUES (1); "
      "SET SESSION server_id = 1; INSERT INTO db1.m VALUES (2)");
  std::vector<BinlogEvent> events = ReadTransactions(**stream, 2);
  std::vector<std::string> seen;
  for (const BinlogEvent& e : events) {
    if (e.type == kGtidEvent) {
      seen.push_back(
          absl::StrCat("gtid ", e.gtid->server_id, "/", e.server_id));
    } else if (e.type == kAnnotateRowsEvent) {
      seen.push_back(absl::StrCat("sql ", e.statement));
    } else if (e.type == kTableMapEvent || IsRowsEvent(e.type) ||
               e.type == kXidEvent) {
      seen.push_back(absl::StrCat(e.type, " ", e.server_id));
    }
  }
  EXPECT_THAT(
      seen,
      ElementsAre("gtid 77/77", "sql INSERT INTO db1.m VALUES (1)", "19 77",
                  "23 77", "16 77", "gtid 1/1",
                  "sql INSERT INTO db1.m VALUES (2)", "19 1", "23 1", "16 1"));
}

TEST_F(BinlogStreamTest, DdlAndTruncateComeAsQueriesAtTheirPosition) {
  Sql("CREATE TABLE db1.s7 (id int PRIMARY KEY, a varchar(10))");
  absl::StatusOr<std::unique_ptr<BinlogStream>> stream = Open("");
  ASSERT_TRUE(stream.ok()) << stream.status();
  Sql("INSERT INTO db1.s7 VALUES (1, 'x'); "
      "ALTER TABLE db1.s7 ADD COLUMN n int NOT NULL DEFAULT 7; "
      "INSERT INTO db1.s7 VALUES (2, 'y', 8); TRUNCATE TABLE db1.s7");
  std::vector<BinlogEvent> events = ReadTransactions(**stream, 4);
  std::vector<std::string> seen;
  for (const BinlogEvent& e : events) {
    if (e.type == kQueryEvent) {
      seen.push_back(absl::StrCat("query ", e.database, ": ", e.statement));
    } else if (e.type == kTableMapEvent) {
      std::vector<std::string> names;
      for (const TableMapColumn& c : e.table_map->columns) {
        names.push_back(c.name);
      }
      seen.push_back(absl::StrCat(
          "map ", e.table_map->table, "(", absl::StrJoin(names, ","), ") key ",
          absl::StrJoin(e.table_map->primary_key, ",")));
    } else if (IsRowsEvent(e.type)) {
      seen.push_back("rows");
    }
  }
  EXPECT_THAT(seen,
              ElementsAre("map s7(id,a) key 0", "rows",
                          "query : ALTER TABLE db1.s7 ADD COLUMN n int NOT "
                          "NULL DEFAULT 7",
                          "map s7(id,a,n) key 0", "rows",
                          "query : TRUNCATE TABLE db1.s7"));
  EXPECT_EQ((*stream)->gtid_state(), Query("SELECT @@gtid_binlog_pos"));
}

TEST_F(BinlogStreamTest, PartialImagesAreRefused) {
  Sql("CREATE TABLE db1.mi (id int PRIMARY KEY, a int, b int); "
      "INSERT INTO db1.mi VALUES (1, 2, 3)");
  absl::StatusOr<std::unique_ptr<BinlogStream>> stream = Open("");
  ASSERT_TRUE(stream.ok()) << stream.status();
  Sql("SET SESSION binlog_row_image = 'MINIMAL'; "
      "UPDATE db1.mi SET a = 5 WHERE id = 1");
  std::vector<BinlogEvent> events = ReadTransactions(**stream, 1);
  int refused = 0;
  for (const BinlogEvent& e : events) {
    if (!IsRowsEvent(e.type)) continue;
    absl::StatusOr<RowsEvent> rows =
        DecodeRowsEvent(e.type, e.body, *e.table_map);
    EXPECT_EQ(rows.status().code(), absl::StatusCode::kFailedPrecondition)
        << rows.status();
    ++refused;
  }
  EXPECT_EQ(refused, 1);
}

}  // namespace
}  // namespace binlog
}  // namespace mariadb
}  // namespace tally
