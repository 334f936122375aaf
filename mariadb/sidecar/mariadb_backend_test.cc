// MariaDbBackend against real throwaway MariaDB servers: the apply's
// compare-and-swap, its races with applications (row locks, inserts of the
// same key), refused rows, the session server_id in the binary log, the
// apply log, and the reads by key. With TALLY_MARIADB_APPLY_BENCH=1, also
// prints the apply's rows/s against a blind upsert (not a timed test).
#include "mariadb/sidecar/mariadb_backend.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mariadb/sidecar/apply_log.h"
#include "pg/wire/field.h"
#include "support/mariadb_test_macros.h"
#include "tree/digest.h"
#include "tree/hlc.h"

namespace tally {
namespace mariadb {
namespace {

using storage::RowChange;
using storage::RowOutcome;
using ::testing::HasSubstr;
using testing::MariaDbServer;

constexpr char kKeyspace[] = "db1.t";
constexpr uint32_t kServerId = 4242;

std::string BigEndian(uint64_t v, int bytes) {
  std::string out;
  for (int shift = (bytes - 1) * 8; shift >= 0; shift -= 8) {
    out.push_back(static_cast<char>((v >> shift) & 0xff));
  }
  return out;
}

tree::Version At(uint64_t millis, const std::string& origin = "node-a") {
  return tree::Version{tree::HlcTimestamp::FromParts(millis, 0), origin};
}

// What the store's index would hold for db1.t's rows, and the RowChanges
// a commit sends against it. Keeps every string the changes point into.
class Index {
 public:
  explicit Index(pg::RowCodec codec) : codec_(codec) {}

  // The canonical row (id bigint, a int, b varchar).
  pg::CanonicalRow Row(int64_t id, int32_t a, const std::string& b) const {
    const std::string id_bytes = BigEndian(static_cast<uint64_t>(id), 8);
    const std::string a_bytes = BigEndian(static_cast<uint32_t>(a), 4);
    std::vector<pg::Field> fields = {pg::Field::Of(id_bytes),
                                     pg::Field::Of(a_bytes), pg::Field::Of(b)};
    pg::CanonicalRow r;
    EXPECT_TRUE(codec_.Encode(fields, &r.key, &r.value).ok());
    return r;
  }
  std::string Key(int64_t id) const { return Row(id, 0, "").key; }
  bool Holds(const std::string& key) const { return entries_.contains(key); }

  // The index holds `row` at `version`.
  void Hold(const pg::CanonicalRow& row, const tree::Version& version) {
    Entry& e = entries_[row.key];
    e.value = row.value;
    e.version = std::make_unique<tree::Version>(version);
    e.deleted = false;
  }

  void Put(const pg::CanonicalRow& row, const tree::Version& version) {
    Add(row.key, RowChange::Kind::kPut, row.value, version);
  }
  void Delete(int64_t id, const tree::Version& version,
              RowChange::Kind kind = RowChange::Kind::kDelete) {
    Add(Key(id), kind, "", version);
  }

  // The changes added so far (pointers into this Index).
  const std::vector<RowChange>& changes() {
    changes_.clear();
    for (const Pending& p : pending_) {
      RowChange c;
      c.row.keyspace = kKeyspace;
      c.row.key = *p.key;
      c.kind = p.kind;
      c.value = *p.value;
      c.version = p.version.get();
      auto it = entries_.find(*p.key);
      if (it != entries_.end()) {
        const Entry& e = it->second;
        c.expected.exists = true;
        c.expected.version = e.version.get();
        c.expected.deleted = e.deleted;
        c.expected.digest =
            tree::RowDigest(kKeyspace, *p.key, *e.version, e.deleted, e.value);
      }
      changes_.push_back(c);
    }
    return changes_;
  }

  // Makes the applied changes the index's rows and forgets the changes.
  void Commit(const std::vector<RowOutcome>& outcomes) {
    for (size_t i = 0; i < pending_.size(); ++i) {
      if (!outcomes[i].applied) continue;
      const Pending& p = pending_[i];
      if (p.kind == RowChange::Kind::kErase) {
        entries_.erase(*p.key);
        continue;
      }
      Entry& e = entries_[*p.key];
      e.value = *p.value;
      e.version = std::make_unique<tree::Version>(*p.version);
      e.deleted = p.kind == RowChange::Kind::kDelete;
    }
    pending_.clear();
  }

 private:
  struct Entry {
    std::string value;
    std::unique_ptr<tree::Version> version;
    bool deleted = false;
  };
  struct Pending {
    std::unique_ptr<std::string> key;
    RowChange::Kind kind;
    std::unique_ptr<std::string> value;
    std::unique_ptr<tree::Version> version;
  };
  void Add(const std::string& key, RowChange::Kind kind,
           const std::string& value, const tree::Version& version) {
    pending_.push_back({std::make_unique<std::string>(key), kind,
                        std::make_unique<std::string>(value),
                        std::make_unique<tree::Version>(version)});
  }

  pg::RowCodec codec_;
  absl::flat_hash_map<std::string, Entry> entries_;
  std::vector<Pending> pending_;
  std::vector<RowChange> changes_;
};

class MariaDbBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TALLY_SKIP_UNLESS_MARIADB();
    absl::StatusOr<std::unique_ptr<MariaDbServer>> m = MariaDbServer::Start();
    ASSERT_TRUE(m.ok()) << m.status();
    server_ = *std::move(m);
    // The sequence engine's seq_1_to_N tables need a default database.
    absl::StatusOr<std::string> made = server_->Execute(
        "CREATE DATABASE db1; USE db1; CREATE TABLE db1.t (id bigint PRIMARY "
        "KEY, "
        "a int NOT NULL, b varchar(40), CONSTRAINT a_not_negative CHECK (a >= "
        "0)) DEFAULT CHARSET utf8mb4; INSERT INTO db1.t SELECT seq, seq, "
        "CONCAT('v', seq) FROM seq_1_to_2000");
    ASSERT_TRUE(made.ok()) << made.status();
    conn_ = Connect();
    absl::StatusOr<MariaDbTable> t = MariaDbTable::Read(*conn_, kKeyspace);
    ASSERT_TRUE(t.ok()) << t.status();
    table_.emplace(*std::move(t));
    index_ = std::make_unique<Index>(table_->schema().codec());
    for (int id = 1; id <= 2000; ++id) {
      index_->Hold(index_->Row(id, id, absl::StrCat("v", id)), At(1000));
    }
  }

  std::unique_ptr<Connection> Connect() {
    absl::StatusOr<MariaDbTarget> target = ParseMariaDbUrl(server_->Url("db1"));
    EXPECT_TRUE(target.ok());
    absl::StatusOr<std::unique_ptr<Connection>> c =
        Connection::Open(*target, absl::Seconds(30));
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  MariaDbBackendOptions Options() {
    MariaDbBackendOptions o;
    o.url = server_->Url("db1");
    o.tables = {kKeyspace};
    o.apply_server_id = kServerId;
    o.node = "node-a";
    o.busy_retry_for = absl::Seconds(1);
    return o;
  }

  std::unique_ptr<MariaDbBackend> OpenBackend() {
    absl::StatusOr<std::unique_ptr<MariaDbBackend>> b =
        MariaDbBackend::Open(Options());
    EXPECT_TRUE(b.ok()) << b.status();
    return b.ok() ? *std::move(b) : nullptr;
  }

  std::vector<RowOutcome> Apply(MariaDbBackend& backend) {
    std::vector<RowOutcome> outcomes;
    absl::Status s = backend.ApplyRows(index_->changes(), &outcomes);
    EXPECT_TRUE(s.ok()) << s;
    return outcomes;
  }

  std::string Sql(const std::string& sql) {
    absl::StatusOr<std::string> out = server_->Execute(sql, "db1");
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? *out : "";
  }

  std::unique_ptr<MariaDbServer> server_;
  std::unique_ptr<Connection> conn_;
  std::optional<MariaDbTable> table_;
  std::unique_ptr<Index> index_;
};

TEST_F(MariaDbBackendTest, AppliesPutsDeletesAndInserts) {
  std::unique_ptr<MariaDbBackend> backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(*backend->SchemaFingerprint(kKeyspace),
            table_->schema().fingerprint());
  EXPECT_THAT(backend->SchemaDescription(kKeyspace), HasSubstr("bigint"));

  const tree::Version v2 = At(2000, "node-b");
  std::vector<pg::CanonicalRow> puts = {index_->Row(1, 10, "one"),
                                        index_->Row(2, 20, "two"),
                                        index_->Row(3, 30, std::string())};
  for (const auto& r : puts) index_->Put(r, v2);
  index_->Delete(4, v2);
  index_->Delete(5, v2);
  index_->Delete(6, v2, RowChange::Kind::kErase);
  std::vector<pg::CanonicalRow> inserts = {index_->Row(3000, 1, "new"),
                                           index_->Row(-5, 2, "négatif")};
  for (const auto& r : inserts) index_->Put(r, v2);
  index_->Delete(9000, v2);  // already absent
  std::vector<RowOutcome> outcomes = Apply(*backend);
  ASSERT_EQ(outcomes.size(), 9u);
  for (size_t i = 0; i < outcomes.size(); ++i) {
    EXPECT_TRUE(outcomes[i].applied) << i << " " << outcomes[i].rejected;
    EXPECT_TRUE(outcomes[i].rejected.ok()) << outcomes[i].rejected;
  }
  EXPECT_EQ(outcomes[0].payload, MariaDbBackend::PayloadOf(puts[0].value));
  EXPECT_EQ(outcomes[6].payload, MariaDbBackend::PayloadOf(inserts[0].value));

  // The table holds the canonical rows.
  std::vector<std::string> keys;
  for (int id : {-5, 1, 2, 3, 4, 5, 6, 3000}) keys.push_back(index_->Key(id));
  absl::StatusOr<std::vector<pg::CanonicalRow>> read =
      table_->ReadRowsByKey(*conn_, keys);
  ASSERT_TRUE(read.ok()) << read.status();
  std::map<std::string, std::string> got;
  for (const auto& r : *read) got[r.key] = r.value;
  std::map<std::string, std::string> want;
  for (const auto& r : puts) want[r.key] = r.value;
  for (const auto& r : inserts) want[r.key] = r.value;
  EXPECT_EQ(got, want);

  // The same, by the database's own digest over the ordered rows.
  std::string expected_text = "-5#2#négatif";
  expected_text += "|1#10#one|2#20#two|3#30#";
  for (int id = 7; id <= 2000; ++id) {
    absl::StrAppend(&expected_text, "|", id, "#", id, "#v", id);
  }
  absl::StrAppend(&expected_text, "|3000#1#new");
  EXPECT_EQ(Sql("SET SESSION group_concat_max_len = 100000000; SELECT "
                "MD5(GROUP_CONCAT(CONCAT_WS('#', id, a, b) ORDER BY id "
                "SEPARATOR '|')) FROM db1.t"),
            Sql(absl::StrCat("SELECT MD5('", expected_text, "')")));

  // The apply log lists the rows and versions, one row per node.
  absl::StatusOr<std::string> hex =
      server_->Execute("SELECT HEX(applied) FROM tally.apply_log");
  ASSERT_TRUE(hex.ok()) << hex.status();
  absl::StatusOr<ApplyLog> log = DecodeApplyLog(absl::HexStringToBytes(*hex));
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ(log->rows.size(), 9u);
  std::set<std::string> logged, sent;
  for (const AppliedRow& r : log->rows) {
    EXPECT_EQ(r.keyspace, kKeyspace);
    EXPECT_EQ(r.version, v2);
    logged.insert(r.key);
  }
  for (const RowChange& c : index_->changes())
    sent.insert(std::string(c.row.key));
  // Keys of every byte value (zeros, 0xff of -5) survive the literal.
  EXPECT_EQ(logged, sent);
  EXPECT_EQ(Sql("SELECT COUNT(*) FROM tally.apply_log"), "1");
}

TEST_F(MariaDbBackendTest, RefusesRowsAnApplicationChanged) {
  std::unique_ptr<MariaDbBackend> backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  Sql("UPDATE db1.t SET b = 'app' WHERE id IN (1, 2); "
      "INSERT INTO db1.t VALUES (5000, 1, 'app-insert'); "
      "DELETE FROM db1.t WHERE id = 4");
  const tree::Version v2 = At(2000);
  index_->Put(index_->Row(1, 1, "tally"), v2);
  index_->Delete(2, v2);
  index_->Put(index_->Row(5000, 1, "tally"), v2);  // the index: absent
  index_->Put(index_->Row(4, 4, "tally"), v2);     // the index: present
  index_->Put(index_->Row(3, 3, "tally"), v2);     // unchanged: applies
  std::vector<RowOutcome> outcomes = Apply(*backend);
  ASSERT_EQ(outcomes.size(), 5u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_FALSE(outcomes[i].applied) << i;
    EXPECT_TRUE(outcomes[i].rejected.ok()) << outcomes[i].rejected;
  }
  EXPECT_TRUE(outcomes[4].applied);
  EXPECT_EQ(Sql("SELECT id, b FROM db1.t WHERE id IN (1, 2, 3, 4, 5000) "
                "ORDER BY id"),
            "1\tapp\n2\tapp\n3\ttally\n5000\tapp-insert");
}

TEST_F(MariaDbBackendTest, NeverWaitsForAnApplicationsRowLock) {
  std::unique_ptr<MariaDbBackend> backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  std::unique_ptr<Connection> app = Connect();
  ASSERT_NE(app, nullptr);
  ASSERT_TRUE(app->Exec("START TRANSACTION").ok());
  ASSERT_TRUE(app->Exec("UPDATE db1.t SET b = 'app' WHERE id = 1").ok());
  absl::Status app_commit;
  std::thread holder([&] {
    absl::SleepFor(absl::Seconds(4));
    app_commit = app->Exec("COMMIT");
  });
  const tree::Version v2 = At(2000);
  index_->Put(index_->Row(1, 1, "tally"), v2);  // held by the application
  index_->Put(index_->Row(2, 2, "tally"), v2);
  index_->Delete(3, v2);
  const absl::Time start = absl::Now();
  std::vector<RowOutcome> outcomes = Apply(*backend);
  const absl::Duration took = absl::Now() - start;
  holder.join();
  EXPECT_TRUE(app_commit.ok()) << app_commit;
  ASSERT_EQ(outcomes.size(), 3u);
  EXPECT_FALSE(outcomes[0].applied);  // busy past the retry time
  EXPECT_TRUE(outcomes[0].rejected.ok());
  EXPECT_TRUE(outcomes[1].applied);
  EXPECT_TRUE(outcomes[2].applied);
  // The retry time (1 s) and no more: not the application's 4 s.
  EXPECT_GE(took, absl::Milliseconds(900));
  EXPECT_LT(took, absl::Seconds(3)) << took;
  EXPECT_EQ(Sql("SELECT id, b FROM db1.t WHERE id IN (1, 2, 3) ORDER BY id"),
            "1\tapp\n2\ttally");
}

// The application commits its insert before (0.4 s) or after (1.6 s) the
// apply's lock wait timeout, or after the apply's busy retry time (3 s, the
// retry time then 1 s): the apply never waits on the uncommitted row (its
// other rows apply at once), and meets the application's row once it is
// committed, or leaves the key busy.
class ConcurrentInsertTest : public MariaDbBackendTest,
                             public ::testing::WithParamInterface<int> {};

TEST_P(ConcurrentInsertTest, KeepsTheApplicationsRow) {
  MariaDbBackendOptions o = Options();
  o.busy_retry_for = absl::Seconds(GetParam() >= 3000 ? 1 : 3);
  absl::StatusOr<std::unique_ptr<MariaDbBackend>> backend =
      MariaDbBackend::Open(o);
  ASSERT_TRUE(backend.ok()) << backend.status();
  std::unique_ptr<Connection> app = Connect();
  ASSERT_NE(app, nullptr);
  ASSERT_TRUE(app->Exec("START TRANSACTION").ok());
  ASSERT_TRUE(app->Exec("INSERT INTO db1.t VALUES (7000, 1, 'app')").ok());
  absl::Status app_commit;
  std::thread holder([&] {
    absl::SleepFor(absl::Milliseconds(GetParam()));
    app_commit = app->Exec("COMMIT");
  });
  const tree::Version v2 = At(2000);
  index_->Put(index_->Row(7000, 1, "tally"), v2);
  index_->Put(index_->Row(7001, 1, "tally"), v2);
  index_->Put(index_->Row(1, 1, "tally"), v2);  // an update, applies
  std::vector<RowOutcome> outcomes = Apply(**backend);
  holder.join();
  EXPECT_TRUE(app_commit.ok()) << app_commit;
  ASSERT_EQ(outcomes.size(), 3u);
  EXPECT_FALSE(outcomes[0].applied);
  EXPECT_TRUE(outcomes[0].rejected.ok()) << outcomes[0].rejected;
  EXPECT_TRUE(outcomes[1].applied);
  EXPECT_TRUE(outcomes[2].applied);
  EXPECT_EQ(Sql("SELECT id, b FROM db1.t WHERE id >= 7000 ORDER BY id"),
            "7000\tapp\n7001\ttally");
}

INSTANTIATE_TEST_SUITE_P(HoldMillis, ConcurrentInsertTest,
                         ::testing::Values(400, 1600, 3000));

TEST_F(MariaDbBackendTest,
       AppliesCompositeKeysTombstonesAndRefusesUnkeptTables) {
  Sql("CREATE TABLE db1.c (id bigint, tag varchar(20) COLLATE "
      "utf8mb4_nopad_bin, n int, PRIMARY KEY (id, tag)) DEFAULT CHARSET "
      "utf8mb4; INSERT INTO db1.c VALUES (1, 'a', 1), (1, 'b', 2), (2, 'a', "
      "3)");
  MariaDbBackendOptions o = Options();
  o.tables = {kKeyspace, "db1.c"};
  absl::StatusOr<std::unique_ptr<MariaDbBackend>> opened =
      MariaDbBackend::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status();
  MariaDbBackend& backend = **opened;
  absl::StatusOr<MariaDbTable> c = MariaDbTable::Read(*conn_, "db1.c");
  ASSERT_TRUE(c.ok()) << c.status();
  const pg::RowCodec codec = c->schema().codec();
  auto row = [&](int64_t id, const std::string& tag, int32_t n) {
    const std::string id_bytes = BigEndian(static_cast<uint64_t>(id), 8);
    const std::string n_bytes = BigEndian(static_cast<uint32_t>(n), 4);
    pg::CanonicalRow r;
    EXPECT_TRUE(codec
                    .Encode({pg::Field::Of(id_bytes), pg::Field::Of(tag),
                             pg::Field::Of(n_bytes)},
                            &r.key, &r.value)
                    .ok());
    return r;
  };
  const tree::Version v1 = At(1000), v2 = At(2000);
  const std::vector<pg::CanonicalRow> before = {row(1, "a", 1), row(1, "b", 2),
                                                row(2, "a", 3)};
  const pg::CanonicalRow put = row(1, "b", 20), insert = row(3, "a ", 4);
  // (1,'a') updated, (1,'b') deleted, (2,'a') a tombstone in the index that
  // the table still holds (refused), (3,'a ') inserted over a tombstone.
  std::vector<RowChange> changes(5);
  const pg::CanonicalRow updated = row(1, "a", 10);
  changes[0].row = {"db1.c", 0, updated.key};
  changes[0].value = updated.value;
  changes[0].expected.digest =
      tree::RowDigest("db1.c", before[0].key, v1, false, before[0].value);
  changes[1].row = {"db1.c", 0, before[1].key};
  changes[1].kind = RowChange::Kind::kDelete;
  changes[1].expected.digest =
      tree::RowDigest("db1.c", before[1].key, v1, false, before[1].value);
  changes[2].row = {"db1.c", 0, before[2].key};
  changes[2].value = put.value;
  changes[2].expected.deleted = true;
  changes[3].row = {"db1.c", 0, insert.key};
  changes[3].value = insert.value;
  changes[3].expected.deleted = true;
  changes[4].row = {"db1.gone", 0, insert.key};
  changes[4].value = insert.value;
  for (RowChange& ch : changes) {
    ch.version = &v2;
    if (&ch != &changes[4]) {
      ch.expected.exists = true;
      ch.expected.version = &v1;
    }
  }
  std::vector<RowOutcome> outcomes;
  ASSERT_TRUE(backend.ApplyRows(changes, &outcomes).ok());
  ASSERT_EQ(outcomes.size(), 5u);
  EXPECT_TRUE(outcomes[0].applied);
  EXPECT_TRUE(outcomes[1].applied);
  EXPECT_FALSE(outcomes[2].applied);
  EXPECT_TRUE(outcomes[2].rejected.ok());
  EXPECT_TRUE(outcomes[3].applied) << outcomes[3].rejected;
  EXPECT_FALSE(outcomes[4].applied);
  EXPECT_THAT(outcomes[4].rejected.message(), HasSubstr("db1.gone"));
  EXPECT_EQ(Sql("SELECT id, CONCAT('[', tag, ']'), n FROM db1.c ORDER BY id, "
                "tag"),
            "1\t[a]\t10\n2\t[a]\t3\n3\t[a ]\t4");
}

TEST_F(MariaDbBackendTest, IsolatesARefusedRow) {
  std::unique_ptr<MariaDbBackend> backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  const tree::Version v2 = At(2000);
  for (int id = 1; id <= 1000; ++id) {
    index_->Put(index_->Row(id, id == 437 ? -1 : id + 1, "tally"), v2);
  }
  std::vector<RowOutcome> outcomes = Apply(*backend);
  ASSERT_EQ(outcomes.size(), 1000u);
  int applied = 0;
  for (int i = 0; i < 1000; ++i) {
    if (i == 436) {
      EXPECT_FALSE(outcomes[i].applied);
      EXPECT_THAT(outcomes[i].rejected.message(), HasSubstr("db1.t"));
      EXPECT_THAT(outcomes[i].rejected.message(), HasSubstr("id=437"));
      EXPECT_THAT(outcomes[i].rejected.message(), HasSubstr("a_not_negative"));
      continue;
    }
    applied += outcomes[i].applied;
    EXPECT_TRUE(outcomes[i].rejected.ok()) << outcomes[i].rejected;
  }
  EXPECT_EQ(applied, 999);
  EXPECT_EQ(Sql("SELECT COUNT(*) FROM db1.t WHERE b = 'tally' AND a = id + 1"),
            "999");
  EXPECT_EQ(Sql("SELECT a, b FROM db1.t WHERE id = 437"), "437\tv437");
}

TEST_F(MariaDbBackendTest, RefusesValuesMariaDbCannotHold) {
  std::unique_ptr<MariaDbBackend> backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  const tree::Version v2 = At(2000);
  // A varchar(40) value of 41 characters (strict mode refuses it rather
  // than cutting it), and a row of another table's encoding.
  index_->Put(index_->Row(1, 1, std::string(41, 'x')), v2);
  index_->Put(index_->Row(2, 2, "fine"), v2);
  std::vector<RowOutcome> outcomes = Apply(*backend);
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_FALSE(outcomes[0].applied);
  EXPECT_THAT(outcomes[0].rejected.message(), HasSubstr("id=1"));
  EXPECT_TRUE(outcomes[1].applied);
  EXPECT_EQ(Sql("SELECT b FROM db1.t WHERE id IN (1, 2) ORDER BY id"),
            "v1\nfine");
}

// Canonical bytes from PostgreSQL that MariaDB cannot hold (a NaN, a
// timestamp past 2038), and a value that collides on a secondary unique key:
// each refused alone, and the upsert of a locked row never writes another
// row than its own.
TEST_F(MariaDbBackendTest, RefusesPostgresValuesAndSecondaryKeyCollisions) {
  Sql("CREATE TABLE db1.u (id bigint PRIMARY KEY, e varchar(10) NOT NULL "
      "UNIQUE, f double, tz timestamp(6) NULL DEFAULT NULL) DEFAULT CHARSET "
      "utf8mb4; INSERT INTO db1.u VALUES (1, 'x', 1, NULL), (2, 'y', 2, "
      "NULL), (3, 'z', 3, NULL)");
  MariaDbBackendOptions o = Options();
  o.tables = {"db1.u"};
  absl::StatusOr<std::unique_ptr<MariaDbBackend>> opened =
      MariaDbBackend::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status();
  absl::StatusOr<MariaDbTable> u = MariaDbTable::Read(*conn_, "db1.u");
  ASSERT_TRUE(u.ok()) << u.status();
  ASSERT_EQ(u->schema().columns()[1].name, "e");
  const pg::RowCodec codec = u->schema().codec();
  auto bits = [](double d) {
    uint64_t b;
    std::memcpy(&b, &d, 8);
    return BigEndian(b, 8);
  };
  auto row = [&](int64_t id, const std::string& e, double f,
                 std::optional<int64_t> tz_micros) {
    const std::string id_bytes = BigEndian(static_cast<uint64_t>(id), 8);
    const std::string f_bytes = bits(f);
    const std::string tz_bytes =
        BigEndian(static_cast<uint64_t>(tz_micros.value_or(0)), 8);
    pg::CanonicalRow r;
    EXPECT_TRUE(codec
                    .Encode({pg::Field::Of(id_bytes), pg::Field::Of(e),
                             pg::Field::Of(f_bytes),
                             tz_micros.has_value() ? pg::Field::Of(tz_bytes)
                                                   : pg::Field::Null()},
                            &r.key, &r.value)
                    .ok());
    return r;
  };
  const tree::Version v1 = At(1000), v2 = At(2000);
  const std::vector<pg::CanonicalRow> before = {row(1, "x", 1, std::nullopt),
                                                row(2, "y", 2, std::nullopt),
                                                row(3, "z", 3, std::nullopt)};
  // PostgreSQL's timestamptz counts microseconds from 2000-01-01.
  const int64_t year_2040 = int64_t{1262304000} * 1000000;
  const std::vector<pg::CanonicalRow> after = {
      row(1, "y", 10, std::nullopt),            // collides with row 2's e
      row(2, "y", std::nan(""), std::nullopt),  // NaN
      row(3, "z", 30, year_2040),               // past 2038
      row(4, "w", 40, 0)};                      // fine: an insert
  std::vector<RowChange> changes(after.size());
  for (size_t i = 0; i < after.size(); ++i) {
    changes[i].row = {"db1.u", 0, after[i].key};
    changes[i].value = after[i].value;
    changes[i].version = &v2;
    if (i < before.size()) {
      changes[i].expected.exists = true;
      changes[i].expected.version = &v1;
      changes[i].expected.digest =
          tree::RowDigest("db1.u", before[i].key, v1, false, before[i].value);
    }
  }
  std::vector<RowOutcome> outcomes;
  ASSERT_TRUE((*opened)->ApplyRows(changes, &outcomes).ok());
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_FALSE(outcomes[i].applied) << i;
    EXPECT_FALSE(outcomes[i].rejected.ok()) << i;
    EXPECT_THAT(outcomes[i].rejected.message(),
                HasSubstr(absl::StrCat("id=", i + 1)));
  }
  EXPECT_TRUE(outcomes[3].applied) << outcomes[3].rejected;
  EXPECT_EQ(Sql("SELECT id, e, f, tz IS NULL FROM db1.u ORDER BY id"),
            "1\tx\t1\t1\n2\ty\t2\t1\n3\tz\t3\t1\n4\tw\t40\t0");
}

TEST_F(MariaDbBackendTest, MarksItsWritesWithTheSessionServerId) {
  std::unique_ptr<MariaDbBackend> backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  const std::vector<std::string> status =
      absl::StrSplit(Sql("SHOW MASTER STATUS"), '\t');
  ASSERT_GE(status.size(), 2u);
  Sql("UPDATE db1.t SET b = 'app' WHERE id = 9");
  index_->Put(index_->Row(1, 1, "tally"), At(2000));
  index_->Put(index_->Row(8000, 1, "tally"), At(2000));
  std::vector<RowOutcome> outcomes = Apply(*backend);
  ASSERT_TRUE(outcomes[0].applied && outcomes[1].applied);
  int tally_rows = 0, app_rows = 0;
  for (absl::string_view line :
       absl::StrSplit(Sql(absl::StrCat("SHOW BINLOG EVENTS IN '", status[0],
                                       "' FROM ", status[1])),
                      '\n')) {
    std::vector<std::string> f = absl::StrSplit(line, '\t');
    if (f.size() < 4 || absl::StartsWith(f[2], "Annotate") ||
        !absl::StrContains(f[2], "_rows")) {
      continue;
    }
    std::printf("%s\n", std::string(line).c_str());
    (f[3] == absl::StrCat(kServerId) ? tally_rows : app_rows)++;
  }
  // The apply's update, insert and apply log row; the application's update.
  EXPECT_GE(tally_rows, 3);
  EXPECT_EQ(app_rows, 1);

  Sql("CREATE USER plain@'%'; GRANT ALL ON db1.* TO plain@'%'; "
      "GRANT ALL ON tally.* TO plain@'%'");
  MariaDbBackendOptions o = Options();
  o.url = server_->Url("db1", "plain");
  absl::StatusOr<std::unique_ptr<MariaDbBackend>> refused =
      MariaDbBackend::Open(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(refused.status())) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("BINLOG REPLAY"));

  // BINLOG REPLAY, but no CREATE for a missing apply log.
  Sql("DROP DATABASE tally; CREATE USER replay@'%'; GRANT ALL ON db1.* TO "
      "replay@'%'; GRANT BINLOG REPLAY ON *.* TO replay@'%'");
  o.url = server_->Url("db1", "replay");
  refused = MariaDbBackend::Open(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(refused.status())) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("needs CREATE on `tally`"));
}

TEST_F(MariaDbBackendTest, ReadsCurrentRowsAndTellsChangedFromGone) {
  std::unique_ptr<MariaDbBackend> backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  std::vector<pg::CanonicalRow> rows = {index_->Row(1, 1, "r1"),
                                        index_->Row(2, 2, "r2"),
                                        index_->Row(3, 3, "r3")};
  for (const auto& r : rows) index_->Put(r, At(2000));
  std::vector<RowOutcome> outcomes = Apply(*backend);
  std::vector<storage::RowLocation> locations;
  std::vector<absl::string_view> payloads;
  for (size_t i = 0; i < rows.size(); ++i) {
    ASSERT_TRUE(outcomes[i].applied);
    locations.push_back({kKeyspace, 0, rows[i].key});
    payloads.push_back(outcomes[i].payload);
  }
  auto values = backend->ReadValues(locations, payloads);
  ASSERT_TRUE(values.ok()) << values.status();
  for (size_t i = 0; i < rows.size(); ++i) {
    ASSERT_TRUE((*values)[i].ok()) << (*values)[i].status();
    EXPECT_EQ(*(*values)[i], rows[i].value);
  }
  absl::StatusOr<std::string> one =
      backend->ReadValue(locations[0], payloads[0]);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(*one, rows[0].value);

  Sql("UPDATE db1.t SET b = 'app' WHERE id = 2; DELETE FROM db1.t WHERE id = "
      "3");
  payloads.push_back("not a payload");
  locations.push_back({kKeyspace, 0, rows[0].key});
  values = backend->ReadValues(locations, payloads);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_TRUE((*values)[0].ok());
  EXPECT_TRUE(absl::IsAborted((*values)[1].status())) << (*values)[1].status();
  EXPECT_TRUE(absl::IsUnavailable((*values)[2].status()))
      << (*values)[2].status();
  EXPECT_TRUE(absl::IsDataLoss((*values)[3].status())) << (*values)[3].status();
}

TEST_F(MariaDbBackendTest, FailsTheCallWhenTheServerIsLostAndReconnects) {
  std::unique_ptr<MariaDbBackend> backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  ASSERT_TRUE(server_->Kill().ok());
  index_->Put(index_->Row(1, 1, "tally"), At(2000));
  std::vector<RowOutcome> outcomes;
  absl::Status lost = backend->ApplyRows(index_->changes(), &outcomes);
  EXPECT_TRUE(absl::IsUnavailable(lost)) << lost;
  const std::string key = index_->Key(1);
  storage::RowLocation where{kKeyspace, 0, key};
  const std::string payload = MariaDbBackend::PayloadOf("x");
  EXPECT_FALSE(backend->ReadValue(where, payload).ok());

  ASSERT_TRUE(server_->Restart().ok());
  // The same call again, on a new session with the same settings.
  absl::Status again = backend->ApplyRows(index_->changes(), &outcomes);
  ASSERT_TRUE(again.ok()) << again;
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_TRUE(outcomes[0].applied);
  EXPECT_EQ(Sql("SELECT b FROM db1.t WHERE id = 1"), "tally");
  absl::StatusOr<std::string> read =
      backend->ReadValue(where, outcomes[0].payload);
  EXPECT_TRUE(read.ok()) << read.status();
}

TEST_F(MariaDbBackendTest, ReadsFromManyThreadsWhileApplying) {
  std::unique_ptr<MariaDbBackend> backend = OpenBackend();
  ASSERT_NE(backend, nullptr);
  std::vector<pg::CanonicalRow> rows;
  for (int id = 1; id <= 200; ++id) {
    rows.push_back(index_->Row(id, id, "first"));
    index_->Put(rows.back(), At(2000));
  }
  std::vector<RowOutcome> first = Apply(*backend);
  std::vector<storage::RowLocation> locations;
  std::vector<absl::string_view> payloads;
  for (size_t i = 0; i < rows.size(); ++i) {
    ASSERT_TRUE(first[i].applied);
    locations.push_back({kKeyspace, 0, rows[i].key});
    payloads.push_back(first[i].payload);
  }
  index_->Commit(first);
  std::atomic<bool> stop{false};
  std::atomic<int> values{0}, changed{0}, other{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 4; ++r) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        auto got = backend->ReadValues(locations, payloads);
        if (!got.ok()) {
          other++;
          continue;
        }
        for (size_t i = 0; i < got->size(); ++i) {
          if ((*got)[i].ok() && *(*got)[i] == rows[i].value) {
            values++;
          } else if (absl::IsAborted((*got)[i].status())) {
            changed++;
          } else {
            other++;
          }
        }
      }
    });
  }
  for (int round = 0; round < 5; ++round) {
    for (int id = 1; id <= 200; ++id) {
      index_->Put(index_->Row(id, id, absl::StrCat("round", round)),
                  At(3000 + round));
    }
    std::vector<RowOutcome> outcomes = Apply(*backend);
    for (const RowOutcome& o : outcomes) EXPECT_TRUE(o.applied);
    index_->Commit(outcomes);
  }
  stop = true;
  for (std::thread& t : readers) t.join();
  // Every answer is the indexed value or "changed since"; never an error.
  EXPECT_EQ(other.load(), 0);
  EXPECT_GT(changed.load(), 0);
  EXPECT_GT(values.load() + changed.load(), 0);
}

}  // namespace
}  // namespace mariadb
}  // namespace tally
