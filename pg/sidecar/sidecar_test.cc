// The sidecar on real PostgreSQL servers: the first build, capture of every
// change kind, split transactions, the replay of the node's own applies,
// confirmation and slot lag, resuming after a restart, and the rebuild
// reasons.
#include "pg/sidecar/sidecar.h"

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pg/schema/names.h"
#include "pg/schema/row_codec.h"
#include "pg/sidecar/apply/pg_backend.h"
#include "pg/sidecar/bootstrap.h"
#include "pg/sidecar/capture_position.h"
#include "pg/wire/internal/big_endian.h"
#include "pg/wire/lsn.h"
#include "storage/store.h"
#include "support/pg_cluster.h"
#include "support/pg_test_macros.h"
#include "support/temp_dir.h"
#include "tree/token.h"

namespace tally {
namespace pg {
namespace {

using ::tally::testing::PgCluster;
using ::tally::testing::TempDir;

constexpr char kNode[] = "node-a";
constexpr char kKeyspace[] = "public.t";

std::string Key(int64_t id) {
  std::string bytes, key;
  internal::PutBigEndian64(&bytes, static_cast<uint64_t>(id));
  AppendFields({Field::Of(bytes)}, &key);
  return key;
}

class SidecarTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TALLY_SKIP_UNLESS_POSTGRES();
    absl::StatusOr<std::unique_ptr<PgCluster>> pg = PgCluster::Start();
    ASSERT_TRUE(pg.ok()) << pg.status();
    pg_ = std::move(*pg);
    Sql("CREATE TABLE public.t (id bigint PRIMARY KEY, a int, b text)");
    Sql("CREATE TABLE public.other (id bigint PRIMARY KEY, a int)");
  }

  void TearDown() override { Close(); }

  std::string Sql(absl::string_view sql) {
    absl::StatusOr<std::string> r = pg_->Execute(sql);
    EXPECT_TRUE(r.ok()) << sql << ": " << r.status();
    return r.ok() ? *r : "";
  }
  int64_t SqlInt(absl::string_view sql) {
    int64_t v = -1;
    EXPECT_TRUE(absl::SimpleAtoi(Sql(sql), &v)) << sql;
    return v;
  }

  // Prepares and starts the sidecar on a store in dir_ (reopened), whose
  // clock runs `clock_behind` behind the system's.
  void Open(absl::Duration clock_behind = absl::ZeroDuration()) {
    ASSERT_NO_FATAL_FAILURE(Prepare(clock_behind));
    ASSERT_TRUE(sidecar_->Start(store_.get()).ok());
  }

  // Open without starting the sidecar: no build has run.
  void Prepare(absl::Duration clock_behind = absl::ZeroDuration()) {
    SidecarOptions o;
    o.conninfo = pg_->Uri();
    o.tables = {kKeyspace};
    o.node_name = kNode;
    o.log = [](absl::string_view line) { std::cerr << line << "\n"; };
    absl::StatusOr<std::unique_ptr<Sidecar>> s = Sidecar::Prepare(o);
    ASSERT_TRUE(s.ok()) << s.status();
    sidecar_ = std::move(*s);
    storage::StoreOptions so;
    so.node_name = kNode;
    so.backend = sidecar_->backend();
    if (clock_behind != absl::ZeroDuration()) {
      so.physical_clock = [clock_behind] {
        return static_cast<uint64_t>(
            absl::ToUnixMillis(absl::Now() - clock_behind));
      };
    }
    absl::StatusOr<std::unique_ptr<storage::Store>> store =
        storage::Store::Open(dir_.path(), so);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }

  void Close() {
    if (sidecar_ != nullptr) sidecar_->Stop();
    store_.reset();
    sidecar_.reset();
  }

  void CaughtUp() {
    absl::Status s = sidecar_->AwaitCaughtUp(absl::Seconds(20));
    ASSERT_TRUE(s.ok()) << s;
  }

  // Index == table.
  void ExpectVerified() {
    absl::StatusOr<VerifyResult> v = sidecar_->Verify(kKeyspace);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_TRUE(v->ok()) << v->mismatched_keys.size() << " mismatched, "
                         << v->missing_from_index.size()
                         << " missing from the index, "
                         << v->missing_from_table.size()
                         << " missing from the table; first mismatched: "
                         << (v->mismatched_keys.empty()
                                 ? std::string("none")
                                 : absl::CHexEscape(v->mismatched_keys[0]));
    EXPECT_EQ(v->table_rows, v->index_rows);
  }

  absl::flat_hash_map<std::string, IndexEntry> Index() {
    absl::StatusOr<absl::flat_hash_map<std::string, IndexEntry>> index =
        ReadIndex(store_.get(), kKeyspace);
    EXPECT_TRUE(index.ok()) << index.status();
    return index.ok() ? *index : absl::flat_hash_map<std::string, IndexEntry>();
  }

  CapturePosition StoredPosition() {
    auto p = store_->backend_position();
    EXPECT_TRUE(p.ok() && p->has_value());
    auto d = CapturePosition::Decode((*p)->bytes);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? *d : CapturePosition();
  }

  const std::string slot_ = ReplicationBaseName(kNode);
  std::unique_ptr<PgCluster> pg_;
  TempDir dir_;
  std::unique_ptr<Sidecar> sidecar_;
  std::unique_ptr<storage::Store> store_;
};

TEST_F(SidecarTest, FirstBuildIndexesTheTableWithTheBootstrapVersion) {
  Sql("INSERT INTO t SELECT g, g, 'row ' || g FROM generate_series(1, 2000) g");
  Open();
  CaughtUp();
  ExpectVerified();
  const auto index = Index();
  ASSERT_EQ(index.size(), 2000u);
  for (const auto& [key, e] : index) {
    EXPECT_EQ(e.version, BootstrapVersion());
    EXPECT_FALSE(e.deleted);
  }
  const SidecarStatus s = sidecar_->status();
  EXPECT_EQ(s.phase, "following");
  EXPECT_EQ(s.slot, slot_);
  EXPECT_EQ(s.build_rows_done, 2000u);
  ASSERT_EQ(s.keyspaces.size(), 1u);
  EXPECT_EQ(s.keyspaces[0].state, "ready");
  EXPECT_EQ(s.keyspaces[0].rows, 2000u);
  EXPECT_EQ(std::to_string(StoredPosition().system_id),
            Sql("SELECT system_identifier FROM pg_control_system()"));
  EXPECT_EQ(Sql("SELECT count(*) FROM pg_publication_tables WHERE pubname = '" +
                slot_ + "'"),
            "1");
}

// A first build that stopped half way leaves the node's slot and origin,
// as a lost index does, but no build mark: the next start is a first start
// still, every row the bootstrap version.
TEST_F(SidecarTest, ASlotAndOriginWithoutTheMarkAreStillAFirstStart) {
  Sql("INSERT INTO t SELECT g, g, 'row ' || g FROM generate_series(1, 50) g");
  Sql("SELECT 1 FROM pg_create_logical_replication_slot('" + slot_ +
      "', 'pgoutput')");
  Sql("SELECT pg_replication_origin_create('" + slot_ + "')");
  Open();
  CaughtUp();
  const auto index = Index();
  ASSERT_EQ(index.size(), 50u);
  for (const auto& [key, e] : index) EXPECT_EQ(e.version, BootstrapVersion());
  EXPECT_FALSE(sidecar_->status().index_lost);
  // The build marked the database.
  EXPECT_THAT(Sql("SELECT obj_description(oid, 'pg_publication') FROM "
                  "pg_publication WHERE pubname = '" +
                  slot_ + "'"),
              ::testing::StartsWith("tally: index built on system "));
}

// The store lost (a new directory) while the marked database was written:
// rows written locally since the first build get a fresh version of this
// node, newer than every version the lost index could have held; rows from
// before the first build, and rows tally applied, the bootstrap version.
TEST_F(SidecarTest, ALostIndexGivesLocalWritesSinceTheFirstBuildFreshVersions) {
  Sql("INSERT INTO t SELECT g, g, 'old' FROM generate_series(1, 30) g");
  Open();
  CaughtUp();
  // Written while the sidecar follows (captured), then while it is down.
  Sql("UPDATE t SET b = 'captured' WHERE id <= 10");
  CaughtUp();
  const tree::Version captured = Index().at(Key(1)).version;
  EXPECT_EQ(captured.origin, kNode);
  Close();
  Sql("UPDATE t SET b = 'down' WHERE id BETWEEN 11 AND 20");
  // A row tally applied: under the node's origin.
  Sql("SELECT pg_replication_origin_session_setup('" + slot_ +
      "'); UPDATE t SET b = 'applied' WHERE id = 21");

  // The index is lost.
  std::filesystem::remove_all(dir_.path());
  std::filesystem::create_directories(dir_.path());
  Open();
  CaughtUp();
  ExpectVerified();
  const SidecarStatus status = sidecar_->status();
  EXPECT_TRUE(status.index_lost);
  EXPECT_EQ(status.index_loss_fresh_rows, 20u);
  const auto index = Index();
  ASSERT_EQ(index.size(), 30u);
  for (int64_t id = 1; id <= 30; ++id) {
    const tree::Version& v = index.at(Key(id)).version;
    if (id <= 20) {
      EXPECT_EQ(v.origin, kNode) << id;
      EXPECT_GT(tree::CompareVersions(v, captured), 0) << id;
    } else {
      EXPECT_EQ(v, BootstrapVersion()) << id;
    }
  }
}

TEST_F(SidecarTest, BuildUnderConcurrentWritesLeavesNoGapAndNoOverlap) {
  Sql("INSERT INTO t SELECT g, 0, 'x' FROM generate_series(1, 20000) g");
  std::atomic<bool> done{false};
  std::thread writer([&] {
    auto conn = Connection::Open(pg_->Uri(), {});
    ASSERT_TRUE(conn.ok());
    for (int i = 0; i < 300 && !done.load(); ++i) {
      const std::string sql = absl::StrCat(
          "UPDATE t SET a = a + 1 WHERE id = ", 1 + (i * 67) % 20000,
          "; INSERT INTO t VALUES (", 100000 + i, ", ", i, ", 'new')");
      ASSERT_TRUE((*conn)->Exec(sql).ok());
    }
  });
  Open();
  writer.join();
  done.store(true);
  CaughtUp();
  ExpectVerified();
  EXPECT_EQ(Index().size(), 20300u);
}

TEST_F(SidecarTest, CapturesEveryChangeKind) {
  Sql("ALTER TABLE t ALTER COLUMN b SET STORAGE EXTERNAL");
  Sql("INSERT INTO t VALUES (1, 1, 'one'), (2, 2, 'two'), (3, 3, 'three')");
  Open();
  CaughtUp();
  const tree::Version bootstrap = BootstrapVersion();

  Sql("INSERT INTO t VALUES (4, 4, 'four')");  // insert
  Sql("UPDATE t SET a = 20 WHERE id = 2");     // update
  Sql("UPDATE t SET id = 30 WHERE id = 3");    // key update
  Sql("DELETE FROM t WHERE id = 1");           // delete
  Sql("BEGIN; INSERT INTO t VALUES (5, 5, 'five'); SAVEPOINT s; "
      "INSERT INTO t VALUES (6, 6, 'six'); RELEASE s; SAVEPOINT r; "
      "INSERT INTO t VALUES (7, 7, 'seven'); ROLLBACK TO r; COMMIT");
  // An unchanged TOAST value: the update sends 'u' for b.
  Sql("INSERT INTO t VALUES (8, 8, repeat('toast', 2000))");
  Sql("UPDATE t SET a = 80 WHERE id = 8");
  CaughtUp();
  ExpectVerified();
  auto index = Index();
  EXPECT_TRUE(index[Key(1)].deleted);
  EXPECT_TRUE(index[Key(3)].deleted);  // the old key of the key update
  EXPECT_FALSE(index[Key(30)].deleted);
  EXPECT_EQ(index[Key(4)].version.origin, kNode);
  EXPECT_TRUE(bootstrap < index[Key(2)].version);
  EXPECT_EQ(index.count(Key(6)), 1u);
  EXPECT_EQ(index.count(Key(7)), 0u);                       // rolled back
  EXPECT_EQ(index[Key(5)].version, index[Key(6)].version);  // one txn
  const SidecarStatus s = sidecar_->status();
  EXPECT_EQ(s.transactions_captured, 7u);

  Sql("TRUNCATE t");
  CaughtUp();
  ExpectVerified();
  index = Index();
  for (const auto& [key, e] : index) EXPECT_TRUE(e.deleted);
}

// A write is versioned when it committed, not when the capture read it:
// a sidecar that was down (or lags) must not make its database's older
// writes win over newer ones made elsewhere meanwhile. Two transactions
// committed in the same order as their stamps.
TEST_F(SidecarTest, AWriteCapturedLateIsVersionedAtItsCommitTime) {
  Open();
  CaughtUp();
  Close();
  Sql("INSERT INTO t VALUES (1, 1, 'one')");
  Sql("INSERT INTO t VALUES (2, 2, 'two')");
  const int64_t commit_ms = SqlInt(
      "SELECT floor(extract(epoch FROM pg_xact_commit_timestamp(xmin)) * "
      "1000)::bigint FROM t WHERE id = 1");
  absl::SleepFor(absl::Milliseconds(1500));
  Open();
  CaughtUp();
  auto index = Index();
  EXPECT_EQ(index[Key(1)].version.origin, kNode);
  EXPECT_EQ(
      static_cast<int64_t>(index[Key(1)].version.timestamp.physical_millis()),
      commit_ms)
      << index[Key(1)].version.timestamp.DebugString();
  EXPECT_TRUE(index[Key(1)].version < index[Key(2)].version);
  ExpectVerified();
}

// A database whose clock runs further ahead of tallyd's host than the
// store's max clock skew (60 s): its commit times would be versions the
// peers refuse, so this node's clock stamps the write instead.
TEST_F(SidecarTest, ACommitTimeTooFarAheadIsStampedWithTheNodesClock) {
  Open(/*clock_behind=*/absl::Minutes(5));
  CaughtUp();
  Sql("INSERT INTO t VALUES (1, 1, 'one')");
  const int64_t commit_ms = SqlInt(
      "SELECT floor(extract(epoch FROM pg_xact_commit_timestamp(xmin)) * "
      "1000)::bigint FROM t WHERE id = 1");
  CaughtUp();
  auto index = Index();
  const int64_t stamped_ms =
      static_cast<int64_t>(index[Key(1)].version.timestamp.physical_millis());
  EXPECT_LT(stamped_ms, commit_ms - 4 * 60 * 1000)
      << index[Key(1)].version.timestamp.DebugString();
  EXPECT_EQ(index[Key(1)].version.origin, kNode);
  Sql("UPDATE t SET a = 2 WHERE id = 1");
  CaughtUp();
  EXPECT_TRUE(index[Key(1)].version < Index()[Key(1)].version);
  ExpectVerified();
}

// A TRUNCATE removes a row whose index version orders after the
// TRUNCATE's commit time (a peer's clock ahead: a version 30 s in the
// future, applied here before the TRUNCATE): the index follows the table.
TEST_F(SidecarTest, ATruncateRemovesARowWhoseVersionIsAhead) {
  Open();
  CaughtUp();
  Sql("INSERT INTO t VALUES (1, 1, 'one')");
  std::string a, value;
  internal::PutBigEndian32(&a, 42);
  AppendFields({Field::Of(a), Field::Of("from-b")}, &value);
  storage::Mutation m = storage::Mutation::Put(kKeyspace, Key(2), value);
  m.version = tree::Version{
      tree::HlcTimestamp::FromParts(
          static_cast<uint64_t>(absl::ToUnixMillis(absl::Now())) + 30000, 0),
      "node-b"};
  storage::WriteRequest request;
  request.mutations.push_back(m);
  absl::StatusOr<storage::WriteResult> r = store_->Write(std::move(request));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->applied, std::vector<bool>{true});
  CaughtUp();
  EXPECT_EQ(SqlInt("SELECT count(*) FROM t"), 2);

  Sql("TRUNCATE t");
  CaughtUp();
  ExpectVerified();
  auto index = Index();
  EXPECT_TRUE(index[Key(1)].deleted);
  EXPECT_TRUE(index[Key(2)].deleted);
  EXPECT_TRUE(m.version.value() < index[Key(2)].version);
}

// Before its build, a sidecar takes no peer's rows: with its index empty
// every row looks new, and applying one would put back a row the
// application deleted while the index was lost (seen as a flaky
// PgIndexLoss test: a peer's session reached the node before its build).
TEST_F(SidecarTest, NoRowIsAppliedBeforeTheBuild) {
  ASSERT_NO_FATAL_FAILURE(Prepare());

  std::string a, value;
  internal::PutBigEndian32(&a, 7);
  AppendFields({Field::Of(a), Field::Of("from-a-peer")}, &value);
  storage::Mutation m = storage::Mutation::Put(kKeyspace, Key(7), value);
  m.version =
      tree::Version{tree::HlcTimestamp::FromParts(1764590000000, 0), "node-b"};
  storage::WriteRequest request;
  request.mutations.push_back(m);
  absl::StatusOr<storage::WriteResult> r = store_->Write(std::move(request));
  // The keyspace takes no rows yet: the row is rejected alone, as not
  // taken, with the reason.
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->applied, std::vector<bool>{false});
  ASSERT_EQ(r->rejected.size(), 1u);
  EXPECT_TRUE(r->rejected[0].not_taken);
  EXPECT_TRUE(absl::IsUnavailable(r->rejected[0].status))
      << r->rejected[0].status;
  EXPECT_EQ(SqlInt("SELECT count(*) FROM t"), 0);

  ASSERT_TRUE(sidecar_->Start(store_.get()).ok());
  CaughtUp();
  storage::WriteRequest again;
  again.mutations.push_back(m);
  r = store_->Write(std::move(again));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->applied, std::vector<bool>{true});
  EXPECT_EQ(SqlInt("SELECT count(*) FROM t"), 1);
}

TEST_F(SidecarTest, ATransactionOverOneBatchIsSplitAndEndsWithItsLastValues) {
  Open();
  CaughtUp();
  // 15,000 inserts then 15,000 updates of the same keys: the two changes of
  // a key fall into different store batches.
  Sql("BEGIN; INSERT INTO t SELECT g, 0, 'a' FROM generate_series(1, 15000) g;"
      " UPDATE t SET a = 1, b = 'b'; COMMIT");
  CaughtUp();
  ExpectVerified();
  EXPECT_EQ(Index().size(), 15000u);
  EXPECT_FALSE(StoredPosition().partial.has_value());
}

TEST_F(SidecarTest, OwnAppliesAreIndexedWithTheirMessagesVersions) {
  Open();
  CaughtUp();
  // An apply through a backend of the node's origin, without the store:
  // as if tallyd died between the PostgreSQL commit and the store's.
  sidecar_->Stop();
  PgBackendOptions bo;
  bo.conninfo = pg_->Uri();
  bo.tables = {kKeyspace};
  bo.origin_name = slot_;
  // The sidecar's own backend holds the origin; release it first.
  Close();
  {
    auto backend = PgBackend::Open(bo);
    ASSERT_TRUE(backend.ok()) << backend.status();
    std::string a, value;
    internal::PutBigEndian32(&a, 42);
    AppendFields({Field::Of(a), Field::Of("applied")}, &value);
    const std::string key = Key(9);
    const tree::Version version{tree::HlcTimestamp::FromParts(1700000000000, 7),
                                "node-b"};
    storage::RowChange c;
    c.row = storage::RowLocation{kKeyspace, tree::TokenOf(key), key};
    c.kind = storage::RowChange::Kind::kPut;
    c.value = value;
    c.version = &version;
    std::vector<storage::RowOutcome> out;
    ASSERT_TRUE((*backend)->ApplyRows({c}, &out).ok());
    ASSERT_EQ(out.size(), 1u);
    ASSERT_TRUE(out[0].applied);
  }
  Open();
  CaughtUp();
  ExpectVerified();
  auto index = Index();
  ASSERT_EQ(index.count(Key(9)), 1u);
  EXPECT_EQ(index[Key(9)].version.origin, "node-b");
  EXPECT_EQ(index[Key(9)].version.timestamp.raw(),
            tree::HlcTimestamp::FromParts(1700000000000, 7).raw());
  EXPECT_EQ(sidecar_->status().own_transactions_replayed, 1u);
  EXPECT_EQ(sidecar_->status().transactions_captured, 0u);
}

TEST_F(SidecarTest, ConfirmsAfterTheStoreAndIdleLagReturnsToZero) {
  Open();
  CaughtUp();
  Sql("INSERT INTO t VALUES (1, 1, 'one')");
  CaughtUp();
  const Lsn stored = StoredPosition().resume_lsn;
  auto confirmed = ParseLsn(Sql(absl::StrCat(
      "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name "
      "= '",
      slot_, "'")));
  ASSERT_TRUE(confirmed.ok());
  EXPECT_LE(*confirmed, stored);  // never beyond what the store holds
  // Traffic the publication filters out: the slot must not retain it.
  Sql("INSERT INTO other SELECT g, g FROM generate_series(1, 50000) g");
  CaughtUp();
  const int64_t lag = SqlInt(
      absl::StrCat("SELECT pg_current_wal_lsn() - confirmed_flush_lsn FROM "
                   "pg_replication_slots WHERE slot_name = '",
                   slot_, "'"));
  EXPECT_LT(lag, 64 * 1024) << "slot retains " << lag << " bytes";
}

TEST_F(SidecarTest, RestartResumesExactlyWithoutASecondLogEntry) {
  Open();
  CaughtUp();
  // A copy of the slot from before the transaction: put back after the
  // restart, it is a slot that never got the confirmation.
  Sql(absl::StrCat("SELECT pg_copy_logical_replication_slot('", slot_,
                   "', 'backup')"));
  Sql("INSERT INTO t VALUES (1, 1, 'one'), (2, 2, 'two')");
  CaughtUp();
  const storage::Sequence before = store_->last_sequence();
  Close();
  Sql(absl::StrCat("SELECT pg_drop_replication_slot('", slot_, "')"));
  Sql(absl::StrCat("SELECT pg_copy_logical_replication_slot('backup', '", slot_,
                   "')"));
  Sql("SELECT pg_drop_replication_slot('backup')");
  Open();
  CaughtUp();
  EXPECT_EQ(store_->last_sequence(), before);
  EXPECT_EQ(sidecar_->status().transactions_captured, 0u);
  ExpectVerified();
  Sql("UPDATE t SET a = 3 WHERE id = 1");
  CaughtUp();
  EXPECT_EQ(store_->last_sequence(), before + 1);
}

TEST_F(SidecarTest, ADroppedSlotIsRebuiltKeepingUnchangedVersions) {
  Sql("INSERT INTO t VALUES (1, 1, 'one'), (2, 2, 'two'), (3, 3, 'three')");
  Open();
  CaughtUp();
  Sql("UPDATE t SET a = 10 WHERE id = 1");
  CaughtUp();
  const tree::Version v1 = Index()[Key(1)].version;
  Close();
  Sql(absl::StrCat("SELECT pg_drop_replication_slot('", slot_, "')"));
  // Changes the capture never sees: the rebuild's scan must find them.
  Sql("UPDATE t SET a = 20 WHERE id = 2");
  Sql("DELETE FROM t WHERE id = 3");
  Open();
  CaughtUp();
  ExpectVerified();
  auto index = Index();
  EXPECT_EQ(index[Key(1)].version, v1);  // unchanged: kept
  EXPECT_TRUE(BootstrapVersion() < index[Key(2)].version);
  EXPECT_TRUE(index[Key(3)].deleted);
}

TEST_F(SidecarTest, AnApplyTheStoreCommittedIsNotLoggedTwice) {
  Open();
  CaughtUp();
  // A replicated row through the store: the backend applies it under the
  // node's origin; the capture then meets it again in the stream.
  std::string a, value;
  internal::PutBigEndian32(&a, 5);
  AppendFields({Field::Of(a), Field::Of("peer row")}, &value);
  storage::Mutation m = storage::Mutation::Put(kKeyspace, Key(11), value);
  m.version =
      tree::Version{tree::HlcTimestamp::FromParts(1700000000000, 1), "node-b"};
  storage::WriteRequest w;
  w.mutations.push_back(m);
  auto r = store_->Write(std::move(w));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->applied, std::vector<bool>{true});
  const storage::Sequence after_apply = store_->last_sequence();
  CaughtUp();
  EXPECT_EQ(store_->last_sequence(), after_apply);
  EXPECT_EQ(sidecar_->status().own_transactions_replayed, 1u);
  EXPECT_EQ(sidecar_->status().rows_applied, 1u);
  ExpectVerified();
}

TEST_F(SidecarTest, ASchemaChangeRebuildsTheKeyspace) {
  Sql("INSERT INTO t VALUES (1, 1, 'one'), (2, 2, 'two')");
  Open();
  CaughtUp();
  const std::string before = sidecar_->status().keyspaces[0].fingerprint;
  Sql("ALTER TABLE t ADD COLUMN c int NOT NULL DEFAULT 7");
  Sql("INSERT INTO t VALUES (3, 3, 'three', 3)");
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  while (sidecar_->status().keyspaces[0].fingerprint == before &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  CaughtUp();
  EXPECT_NE(sidecar_->status().keyspaces[0].fingerprint, before);
  EXPECT_EQ(sidecar_->status().keyspaces[0].state, "ready");
  ExpectVerified();
  EXPECT_EQ(Index().size(), 3u);
}

TEST_F(SidecarTest, ADatabaseDownMidStreamIsRetriedAndResumed) {
  Open();
  CaughtUp();
  ASSERT_TRUE(pg_->Stop(PgCluster::StopMode::kFast).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (sidecar_->status().phase != "reconnecting" && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  const SidecarStatus down = sidecar_->status();
  EXPECT_EQ(down.phase, "reconnecting");
  EXPECT_FALSE(down.last_error.empty());
  ASSERT_TRUE(pg_->Restart().ok());
  Sql("INSERT INTO t VALUES (1, 1, 'after')");
  CaughtUp();
  ExpectVerified();
  EXPECT_EQ(Index().size(), 1u);
}

TEST_F(SidecarTest, PrepareRefusesATableThatIsNoKeyspaceName) {
  SidecarOptions o;
  o.conninfo = pg_->Uri();
  o.tables = {"public.t t"};
  o.node_name = kNode;
  EXPECT_EQ(Sidecar::Prepare(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pg
}  // namespace tally
