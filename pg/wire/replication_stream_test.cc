#include "pg/wire/replication_stream.h"

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pg/wire/connection.h"
#include "pg/wire/internal/big_endian.h"
#include "pg/wire/lsn.h"
#include "pg/wire/pgoutput.h"
#include "support/pg_cluster.h"
#include "support/pg_test_macros.h"

namespace tally {
namespace pg {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using ::tally::testing::PgCluster;

// An ordinary SQL session for the test's own statements.
class Sql {
 public:
  explicit Sql(const std::string& conninfo) {
    auto c = Connection::Open(conninfo, {});
    EXPECT_TRUE(c.ok()) << c.status();
    if (c.ok()) conn_ = *std::move(c);
  }
  bool ok() const { return conn_ != nullptr; }
  // Runs `sql` (one or more statements); returns the first column of the
  // last statement's first row ("" if none).
  std::string Exec(const std::string& sql) {
    if (conn_ == nullptr) return "";
    absl::StatusOr<Result> r = conn_->Exec(sql);
    EXPECT_TRUE(r.ok()) << sql << ": " << r.status();
    if (!r.ok() || r->rows() == 0 || r->columns() == 0 || r->IsNull(0, 0)) {
      return "";
    }
    return std::string(r->Value(0, 0));
  }

 private:
  std::unique_ptr<Connection> conn_;
};

class ReplicationStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TALLY_SKIP_UNLESS_POSTGRES();
    absl::StatusOr<std::unique_ptr<PgCluster>> pg = PgCluster::Start();
    ASSERT_TRUE(pg.ok()) << pg.status();
    pg_ = *std::move(pg);
    conninfo_ = pg_->Uri();
    sql_ = std::make_unique<Sql>(conninfo_);
    ASSERT_TRUE(sql_->ok());
  }

  std::unique_ptr<PgCluster> pg_;
  std::string conninfo_;
  std::unique_ptr<Sql> sql_;
};

std::string Int8(int64_t v) {
  std::string s;
  internal::PutBigEndian64(&s, static_cast<uint64_t>(v));
  return s;
}
std::string Int4(int32_t v) {
  std::string s;
  internal::PutBigEndian32(&s, static_cast<uint32_t>(v));
  return s;
}

// A decoded transaction: its Begin, Origin (if any), changes and Commit,
// with every view copied out of the stream's buffer.
struct Change {
  char kind;  // 'I', 'U', 'D', 'T', 'M'
  char old_kind = 0;
  std::vector<std::optional<std::string>> old_tuple;  // nullopt: null/'u'
  std::vector<char> new_kinds;
  std::vector<std::string> new_values;
  std::vector<uint32_t> relids;
  std::string prefix, content;
};
struct Txn {
  BeginMessage begin;
  std::optional<std::string> origin;
  uint64_t origin_lsn = 0;
  std::vector<Change> changes;
  CommitMessage commit;
};

// Reads from `stream` until `count` transactions have committed or
// `timeout` passed; remembers Relation messages in `relations`.
std::vector<Txn> ReadTransactions(ReplicationStream& stream, size_t count,
                                  std::vector<RelationMessage>* relations,
                                  absl::Duration timeout = absl::Seconds(30)) {
  std::vector<Txn> done;
  std::optional<Txn> open;
  const absl::Time deadline = absl::Now() + timeout;
  while (done.size() < count && absl::Now() < deadline) {
    auto next = stream.Next(absl::Milliseconds(200));
    if (!next.ok()) {
      ADD_FAILURE() << next.status();
      break;
    }
    if (!next->has_value()) continue;
    const auto* x = std::get_if<XLogData>(&**next);
    if (x == nullptr) continue;  // keepalive
    auto m = ParsePgOutputMessage(x->payload);
    if (!m.ok()) {
      ADD_FAILURE() << m.status();
      break;
    }
    std::visit(
        [&](auto&& msg) {
          using T = std::decay_t<decltype(msg)>;
          if constexpr (std::is_same_v<T, BeginMessage>) {
            open.emplace();
            open->begin = msg;
          } else if constexpr (std::is_same_v<T, CommitMessage>) {
            ASSERT_TRUE(open.has_value());
            open->commit = msg;
            done.push_back(*std::move(open));
            open.reset();
          } else if constexpr (std::is_same_v<T, OriginMessage>) {
            ASSERT_TRUE(open.has_value());
            open->origin = std::string(msg.name);
            open->origin_lsn = msg.origin_lsn;
          } else if constexpr (std::is_same_v<T, RelationMessage>) {
            relations->push_back(msg);
          } else if constexpr (std::is_same_v<T, TypeMessage>) {
          } else {
            Change c;
            auto copy_new = [&](const TupleData& t) {
              for (const TupleColumn& col : t) {
                c.new_kinds.push_back(static_cast<char>(col.kind));
                c.new_values.emplace_back(col.value);
              }
            };
            auto copy_old = [&](OldTuple k, const TupleData& t) {
              c.old_kind = static_cast<char>(k);
              for (const TupleColumn& col : t) {
                if (col.kind == TupleColumnKind::kBinary) {
                  c.old_tuple.emplace_back(std::string(col.value));
                } else {
                  c.old_tuple.emplace_back(std::nullopt);
                }
              }
            };
            if constexpr (std::is_same_v<T, InsertMessage>) {
              c.kind = 'I';
              c.relids = {msg.relid};
              copy_new(msg.new_tuple);
            } else if constexpr (std::is_same_v<T, UpdateMessage>) {
              c.kind = 'U';
              c.relids = {msg.relid};
              copy_old(msg.old_kind, msg.old_tuple);
              copy_new(msg.new_tuple);
            } else if constexpr (std::is_same_v<T, DeleteMessage>) {
              c.kind = 'D';
              c.relids = {msg.relid};
              copy_old(msg.old_kind, msg.old_tuple);
            } else if constexpr (std::is_same_v<T, TruncateMessage>) {
              c.kind = 'T';
              c.relids = msg.relids;
            } else if constexpr (std::is_same_v<T, LogicalMessage>) {
              c.kind = 'M';
              c.prefix = std::string(msg.prefix);
              c.content = std::string(msg.content);
            }
            ASSERT_TRUE(open.has_value()) << c.kind;
            open->changes.push_back(std::move(c));
          }
        },
        *m);
  }
  EXPECT_EQ(done.size(), count) << "transactions decoded before the timeout";
  return done;
}

TEST_F(ReplicationStreamTest, IdentifySystemNamesTheDatabase) {
  auto stream = ReplicationStream::Connect(conninfo_);
  ASSERT_TRUE(stream.ok()) << stream.status();
  auto id = (*stream)->IdentifySystem();
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->system_id, sql_->Exec("SELECT system_identifier::text FROM "
                                      "pg_control_system()"));
  EXPECT_EQ(id->timeline, 1u);
  EXPECT_GT(id->xlog_position, 0u);
  EXPECT_EQ(id->database, sql_->Exec("SELECT current_database()"));
}

TEST_F(ReplicationStreamTest, EveryChangeKindIsDecoded) {
  sql_->Exec(
      "CREATE TABLE t (id bigint PRIMARY KEY, a int, big text);"
      "ALTER TABLE t ALTER COLUMN big SET STORAGE EXTERNAL;"
      "CREATE PUBLICATION pub FOR TABLE t;"
      "SELECT pg_replication_origin_create('tally_test')");
  auto stream = ReplicationStream::Connect(conninfo_);
  ASSERT_TRUE(stream.ok()) << stream.status();
  auto slot = (*stream)->CreateLogicalSlot("tally_s");
  ASSERT_TRUE(slot.ok()) << slot.status();

  const std::string big(3000, 'q');
  const std::string relid = sql_->Exec("SELECT 't'::regclass::oid::text");
  sql_->Exec(absl::StrCat("INSERT INTO t VALUES (1, 10, '", big,
                          "'), (2, 20, 'two'), (3, 30, NULL)"));  // txn 0
  sql_->Exec("UPDATE t SET a = 11 WHERE id = 1");                 // txn 1
  sql_->Exec("UPDATE t SET id = 22 WHERE id = 2");                // txn 2
  sql_->Exec("DELETE FROM t WHERE id = 3");                       // txn 3
  sql_->Exec(
      "BEGIN; INSERT INTO t VALUES (4, 40, 'four'); SAVEPOINT s;"
      "INSERT INTO t VALUES (5, 50, 'five'); RELEASE s; SAVEPOINT s2;"
      "INSERT INTO t VALUES (6, 60, 'six'); ROLLBACK TO s2; COMMIT");  // 4
  sql_->Exec(
      "SELECT pg_replication_origin_session_setup('tally_test');"
      "BEGIN; SELECT pg_replication_origin_xact_setup('0/1234',"
      " '2024-01-02 03:04:05.123456+00');"
      "INSERT INTO t VALUES (7, 70, 'seven'); COMMIT;"
      "SELECT pg_replication_origin_session_reset()");  // 5
  sql_->Exec(
      "BEGIN; SELECT pg_logical_emit_message(true, 'tally.test', 'hi');"
      "INSERT INTO t VALUES (8, 80, 'eight'); COMMIT");  // 6
  sql_->Exec("TRUNCATE t");                              // 7

  ASSERT_TRUE((*stream)
                  ->StartReplication("tally_s", slot->consistent_point, {"pub"})
                  .ok());
  std::vector<RelationMessage> relations;
  const std::vector<Txn> txns = ReadTransactions(**stream, 8, &relations);
  ASSERT_EQ(txns.size(), 8u);

  ASSERT_GE(relations.size(), 1u);
  EXPECT_EQ(absl::StrCat(relations[0].relid), relid);
  EXPECT_EQ(relations[0].schema, "public");
  EXPECT_EQ(relations[0].table, "t");
  ASSERT_EQ(relations[0].columns.size(), 3u);
  EXPECT_TRUE(relations[0].columns[0].key);
  EXPECT_EQ(relations[0].columns[0].type_oid, 20u);  // int8
  EXPECT_FALSE(relations[0].columns[1].key);
  EXPECT_EQ(relations[0].columns[2].type_oid, 25u);  // text

  // Inserts: binary values, as COPY BINARY would send them.
  ASSERT_EQ(txns[0].changes.size(), 3u);
  EXPECT_EQ(txns[0].changes[0].kind, 'I');
  EXPECT_THAT(txns[0].changes[0].new_kinds, ElementsAre('b', 'b', 'b'));
  EXPECT_THAT(txns[0].changes[0].new_values,
              ElementsAre(Int8(1), Int4(10), big));
  EXPECT_THAT(txns[0].changes[2].new_kinds, ElementsAre('b', 'b', 'n'));
  EXPECT_FALSE(txns[0].origin.has_value());
  EXPECT_LT(txns[0].begin.final_lsn, txns[0].commit.end_lsn);
  EXPECT_EQ(txns[0].begin.final_lsn, txns[0].commit.commit_lsn);

  // Update of a non-key column: no old tuple; the TOASTed text unchanged.
  ASSERT_EQ(txns[1].changes.size(), 1u);
  EXPECT_EQ(txns[1].changes[0].kind, 'U');
  EXPECT_EQ(txns[1].changes[0].old_kind, 0);
  EXPECT_THAT(txns[1].changes[0].new_kinds, ElementsAre('b', 'b', 'u'));
  EXPECT_EQ(txns[1].changes[0].new_values[1], Int4(11));

  // Key update: the old key arrives as a 'K' tuple.
  ASSERT_EQ(txns[2].changes.size(), 1u);
  EXPECT_EQ(txns[2].changes[0].old_kind, 'K');
  EXPECT_EQ(txns[2].changes[0].old_tuple[0], Int8(2));
  EXPECT_EQ(txns[2].changes[0].new_values[0], Int8(22));

  // Delete: the key.
  ASSERT_EQ(txns[3].changes.size(), 1u);
  EXPECT_EQ(txns[3].changes[0].kind, 'D');
  EXPECT_EQ(txns[3].changes[0].old_kind, 'K');
  EXPECT_EQ(txns[3].changes[0].old_tuple[0], Int8(3));

  // Savepoints: the released one's row is in the transaction, the rolled
  // back one's is not.
  ASSERT_EQ(txns[4].changes.size(), 2u);
  EXPECT_EQ(txns[4].changes[0].new_values[0], Int8(4));
  EXPECT_EQ(txns[4].changes[1].new_values[0], Int8(5));

  // Applied under a replication origin: Origin message, the origin's
  // commit time kept.
  ASSERT_TRUE(txns[5].origin.has_value());
  EXPECT_EQ(*txns[5].origin, "tally_test");
  EXPECT_EQ(txns[5].origin_lsn, 0x1234u);
  const absl::Time stamp =
      absl::FromCivil(absl::CivilSecond(2024, 1, 2, 3, 4, 5),
                      absl::UTCTimeZone()) +
      absl::Microseconds(123456);
  EXPECT_EQ(FromPgTimestamp(txns[5].begin.commit_time_us), stamp);
  EXPECT_EQ(FromPgTimestamp(txns[5].commit.commit_time_us), stamp);

  // A transactional logical message arrives inside its transaction.
  ASSERT_EQ(txns[6].changes.size(), 2u);
  EXPECT_EQ(txns[6].changes[0].kind, 'M');
  EXPECT_EQ(txns[6].changes[0].prefix, "tally.test");
  EXPECT_EQ(txns[6].changes[0].content, "hi");

  ASSERT_EQ(txns[7].changes.size(), 1u);
  EXPECT_EQ(txns[7].changes[0].kind, 'T');
  EXPECT_THAT(txns[7].changes[0].relids,
              ElementsAre(static_cast<uint32_t>(std::stoul(relid))));

  // Transactions arrive in commit order.
  for (size_t i = 1; i < txns.size(); ++i) {
    EXPECT_LT(txns[i - 1].commit.end_lsn, txns[i].commit.end_lsn);
  }
}

// Connects and starts streaming `slot`, retrying while the server still
// counts a closed connection as the slot's user ("active for PID").
std::unique_ptr<ReplicationStream> StartStream(const std::string& conninfo,
                                               const std::string& slot,
                                               uint64_t start_lsn) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  for (;;) {
    auto stream = ReplicationStream::Connect(conninfo);
    EXPECT_TRUE(stream.ok()) << stream.status();
    if (!stream.ok()) return nullptr;
    const absl::Status s =
        (*stream)->StartReplication(slot, start_lsn, {"pub"});
    if (s.ok()) return *std::move(stream);
    const bool busy = s.code() == absl::StatusCode::kFailedPrecondition &&
                      absl::StrContains(s.message(), "is active for PID");
    if (!busy || absl::Now() > deadline) {
      ADD_FAILURE() << s;
      return nullptr;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

TEST_F(ReplicationStreamTest, ConfirmedTransactionsAreNotResent) {
  sql_->Exec(
      "CREATE TABLE t (id bigint PRIMARY KEY, a int, big text);"
      "CREATE PUBLICATION pub FOR TABLE t");
  {
    auto stream = ReplicationStream::Connect(conninfo_);
    ASSERT_TRUE(stream.ok()) << stream.status();
    ASSERT_TRUE((*stream)->CreateLogicalSlot("tally_s").ok());
  }
  for (int i = 1; i <= 3; ++i) {
    sql_->Exec(absl::StrCat("INSERT INTO t VALUES (", i, ", 0, 'x')"));
  }
  std::vector<RelationMessage> relations;
  uint64_t first_end = 0;
  {
    auto stream = StartStream(conninfo_, "tally_s", 0);
    ASSERT_NE(stream, nullptr);
    const std::vector<Txn> txns = ReadTransactions(*stream, 3, &relations);
    ASSERT_EQ(txns.size(), 3u);
    first_end = txns[0].commit.end_lsn;
    // Confirm only the first; the slot's confirmed_flush_lsn follows.
    ASSERT_TRUE(stream->SendStatus(first_end, false).ok());
    const std::string want = FormatLsn(first_end);
    std::string confirmed;
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      confirmed = sql_->Exec(
          "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE "
          "slot_name = 'tally_s'");
      if (confirmed == want) break;
      // Keep the stream read so the server processes our update.
      ASSERT_TRUE(stream->Next(absl::Milliseconds(50)).ok());
    }
    EXPECT_EQ(confirmed, want);
  }
  // Reconnecting from 0/0 (before what was confirmed) resends the second
  // and third transactions only.
  {
    auto stream = StartStream(conninfo_, "tally_s", 0);
    ASSERT_NE(stream, nullptr);
    const std::vector<Txn> txns = ReadTransactions(*stream, 2, &relations);
    ASSERT_EQ(txns.size(), 2u);
    EXPECT_EQ(txns[0].changes[0].new_values[0], Int8(2));
    EXPECT_EQ(txns[1].changes[0].new_values[0], Int8(3));
    EXPECT_GT(txns[0].commit.end_lsn, first_end);
    // And nothing more arrives.
    const std::vector<Txn> more =
        ReadTransactions(*stream, 0, &relations, absl::Milliseconds(500));
    EXPECT_TRUE(more.empty());
  }
  // So does a reconnect from the stored position (the first's end).
  {
    auto stream = StartStream(conninfo_, "tally_s", first_end);
    ASSERT_NE(stream, nullptr);
    const std::vector<Txn> txns = ReadTransactions(*stream, 1, &relations);
    ASSERT_EQ(txns.size(), 1u);
    EXPECT_EQ(txns[0].changes[0].new_values[0], Int8(2));
  }
}

TEST_F(ReplicationStreamTest, NextReturnsWithinItsTimeoutWhenIdle) {
  sql_->Exec(
      "CREATE TABLE t (id bigint PRIMARY KEY);"
      "CREATE PUBLICATION pub FOR TABLE t");
  {
    auto stream = ReplicationStream::Connect(conninfo_);
    ASSERT_TRUE(stream.ok());
    ASSERT_TRUE((*stream)->CreateLogicalSlot("tally_s").ok());
  }
  auto stream = StartStream(conninfo_, "tally_s", 0);
  ASSERT_NE(stream, nullptr);
  // The server may send a keepalive first; after that, silence.
  int empty = 0;
  for (int i = 0; i < 10 && empty < 2; ++i) {
    const absl::Time start = absl::Now();
    auto m = stream->Next(absl::Milliseconds(200));
    const absl::Duration took = absl::Now() - start;
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_LT(took, absl::Seconds(2));
    if (!m->has_value()) {
      EXPECT_GE(took, absl::Milliseconds(190));
      ++empty;
    }
  }
  EXPECT_EQ(empty, 2);
  // A keepalive with reply requested is answered by SendStatus; asking for
  // one gets one.
  ASSERT_TRUE(stream->SendStatus(0, /*reply_requested=*/true).ok());
  bool keepalive = false;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!keepalive && absl::Now() < deadline) {
    auto m = stream->Next(absl::Milliseconds(200));
    ASSERT_TRUE(m.ok()) << m.status();
    keepalive = m->has_value() && std::holds_alternative<PrimaryKeepalive>(**m);
  }
  EXPECT_TRUE(keepalive);
}

TEST_F(ReplicationStreamTest, SlotsAreCreatedOnceAndDropped) {
  auto stream = ReplicationStream::Connect(conninfo_);
  ASSERT_TRUE(stream.ok()) << stream.status();
  auto slot = (*stream)->CreateLogicalSlot("tally_s");
  ASSERT_TRUE(slot.ok()) << slot.status();
  EXPECT_EQ(slot->name, "tally_s");
  EXPECT_FALSE(slot->snapshot_name.empty());
  EXPECT_GT(slot->consistent_point, 0u);
  EXPECT_EQ(sql_->Exec("SELECT plugin || ' ' || slot_type FROM "
                       "pg_replication_slots WHERE slot_name = 'tally_s'"),
            "pgoutput logical");

  auto again = (*stream)->CreateLogicalSlot("tally_s");
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists)
      << again.status();
  EXPECT_THAT(again.status().message(), HasSubstr("already exists"));

  EXPECT_EQ((*stream)->CreateLogicalSlot("Tally-S").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*stream)->CreateLogicalSlot(std::string(64, 'a')).status().code(),
            absl::StatusCode::kInvalidArgument);

  ASSERT_TRUE((*stream)->DropSlot("tally_s").ok());
  EXPECT_EQ(sql_->Exec("SELECT count(*)::text FROM pg_replication_slots"), "0");
  const absl::Status gone = (*stream)->DropSlot("tally_s");
  EXPECT_EQ(gone.code(), absl::StatusCode::kNotFound) << gone;
  EXPECT_THAT(gone.message(), HasSubstr("does not exist"));
}

TEST_F(ReplicationStreamTest, TheExportedSnapshotIsImportableWhileIdle) {
  sql_->Exec(
      "CREATE TABLE t (id bigint PRIMARY KEY); INSERT INTO t VALUES (1)");
  auto stream = ReplicationStream::Connect(conninfo_);
  ASSERT_TRUE(stream.ok()) << stream.status();
  auto slot = (*stream)->CreateLogicalSlot("tally_s");
  ASSERT_TRUE(slot.ok()) << slot.status();
  Sql other(conninfo_);
  other.Exec("INSERT INTO t VALUES (2)");  // after the snapshot
  Sql reader(conninfo_);
  reader.Exec(absl::StrCat(
      "BEGIN ISOLATION LEVEL REPEATABLE READ; SET TRANSACTION SNAPSHOT '",
      slot->snapshot_name, "'"));
  EXPECT_EQ(reader.Exec("SELECT count(*)::text FROM t"), "1");
  reader.Exec("COMMIT");
}

TEST_F(ReplicationStreamTest, ErrorsNameTheCause) {
  // Nothing listens on the port: kUnavailable.
  auto down = ReplicationStream::Connect(
      "host=127.0.0.1 port=1 user=postgres connect_timeout=5");
  EXPECT_EQ(down.status().code(), absl::StatusCode::kUnavailable)
      << down.status();

  auto stream = ReplicationStream::Connect(conninfo_);
  ASSERT_TRUE(stream.ok()) << stream.status();
  const absl::Status missing =
      (*stream)->StartReplication("no_such_slot", 0, {"pub"});
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound) << missing;
  EXPECT_THAT(missing.message(), HasSubstr("no_such_slot"));
  EXPECT_FALSE((*stream)->streaming());
  // Next and SendStatus need a stream.
  EXPECT_EQ((*stream)->Next(absl::Milliseconds(1)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*stream)->SendStatus(0, false).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(ReplicationStreamTest, ATerminatedStreamEndsWithTheServersMessage) {
  sql_->Exec(
      "CREATE TABLE t (id bigint PRIMARY KEY);"
      "CREATE PUBLICATION pub FOR TABLE t");
  {
    auto stream = ReplicationStream::Connect(conninfo_);
    ASSERT_TRUE(stream.ok());
    ASSERT_TRUE((*stream)->CreateLogicalSlot("tally_s").ok());
  }
  auto stream = StartStream(conninfo_, "tally_s", 0);
  ASSERT_NE(stream, nullptr);
  // Commands are refused while streaming.
  EXPECT_EQ(stream->IdentifySystem().status().code(),
            absl::StatusCode::kFailedPrecondition);
  sql_->Exec(
      "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
      "WHERE slot_name = 'tally_s'");
  absl::Status end;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (end.ok() && absl::Now() < deadline) {
    end = stream->Next(absl::Milliseconds(200)).status();
  }
  EXPECT_EQ(end.code(), absl::StatusCode::kUnavailable) << end;
  EXPECT_THAT(end.message(), HasSubstr("terminating connection"));
  EXPECT_FALSE(stream->streaming());
}

}  // namespace
}  // namespace pg
}  // namespace tally
