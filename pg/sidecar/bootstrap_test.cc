// pg::BuildIndex on a real PostgreSQL server, in process: a first build
// (its rows loaded through Store::LoadAbsent) leaves the store that writing
// the same rows one batch at a time through Store::Write leaves, but for
// the log (its bootstrap-versioned rows are unlogged); and a build cut short
// by a failed store write — the disk full, then a power loss — leaves no
// position, so that the next start builds again, and that build completes
// the store into the same one.
#include "pg/sidecar/bootstrap.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "pg/schema/names.h"
#include "pg/schema/table_schema.h"
#include "pg/sidecar/apply/pg_backend.h"
#include "pg/wire/connection.h"
#include "storage/internal/fault_injection_env.h"
#include "storage/store.h"
#include "support/pg_cluster.h"
#include "support/pg_test_macros.h"
#include "support/temp_dir.h"

namespace tally {
namespace pg {
namespace {

using ::tally::testing::PgCluster;
using ::tally::testing::TempDir;

constexpr char kKeyspace[] = "public.t";
constexpr int kRows = 30'000;

// What a reader sees of the keyspace: every index record, the root, the
// leaves, rows per origin and the number of change-log entries.
struct Contents {
  std::vector<std::string> index;
  uint64_t rows = 0;
  tree::Digest128 root;
  std::vector<uint64_t> leaves;
  std::vector<std::string> origins;
  storage::Sequence changes = 0;
};

Contents Read(storage::Store& store) {
  Contents c;
  EXPECT_TRUE(store
                  .ScanIndex(kKeyspace,
                             [&](const storage::IndexRecord& r) {
                               c.index.push_back(absl::StrCat(
                                   r.key, "|", r.version.timestamp.raw(), "|",
                                   r.version.origin, "|", r.deleted, "|",
                                   r.digest.ToHex(), "|", r.payload));
                               return absl::OkStatus();
                             })
                  .ok());
  absl::StatusOr<storage::KeyspaceInfo> info = store.GetKeyspace(kKeyspace);
  EXPECT_TRUE(info.ok()) << info.status();
  if (info.ok()) {
    c.rows = info->row_count;
    c.root = info->root;
  }
  absl::StatusOr<std::vector<uint64_t>> leaves = store.LeafCounts(kKeyspace);
  if (leaves.ok()) c.leaves = *leaves;
  for (const storage::OriginRowCount& o : store.OriginRowCounts()) {
    c.origins.push_back(absl::StrCat(o.origin, "=", o.rows));
  }
  c.changes = store.last_sequence() - store.first_sequence() + 1;
  absl::StatusOr<storage::VerifyReport> report = store.Verify();
  EXPECT_TRUE(report.ok()) << report.status();
  if (report.ok()) {
    EXPECT_TRUE(report->ok()) << report->problems.front();
  }
  return c;
}

// `same_log`: the change logs hold as many entries too.
void ExpectSame(const Contents& a, const Contents& b, bool same_log = true) {
  EXPECT_EQ(a.index, b.index);
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.root, b.root);
  EXPECT_EQ(a.leaves, b.leaves);
  EXPECT_EQ(a.origins, b.origins);
  if (same_log) {
    EXPECT_EQ(a.changes, b.changes);
  }
}

class BootstrapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TALLY_SKIP_UNLESS_POSTGRES();
    absl::StatusOr<std::unique_ptr<PgCluster>> pg = PgCluster::Start();
    ASSERT_TRUE(pg.ok()) << pg.status();
    pg_ = std::move(*pg);
    ASSERT_TRUE(
        pg_->Execute("CREATE TABLE public.t (id bigint PRIMARY KEY, a int, b "
                     "text)")
            .ok());
    ASSERT_TRUE(
        pg_->Execute(
               absl::StrCat("INSERT INTO t SELECT g, g % 1000, md5(g::text) "
                            "FROM generate_series(1, ",
                            kRows, ") g"))
            .ok());
    absl::StatusOr<std::unique_ptr<Connection>> conn =
        Connection::Open(pg_->Uri(), {});
    ASSERT_TRUE(conn.ok()) << conn.status();
    conn_ = std::move(*conn);
    absl::StatusOr<TableSchema> schema = TableSchema::Read(*conn_, kKeyspace);
    ASSERT_TRUE(schema.ok()) << schema.status();
    schema_.push_back(*schema);
    PgBackendOptions o;
    o.conninfo = pg_->Uri();
    o.tables = {kKeyspace};
    o.origin_name = "tally_test";
    absl::StatusOr<std::unique_ptr<PgBackend>> backend = PgBackend::Open(o);
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(*backend);
  }

  std::unique_ptr<storage::Store> OpenStore(const std::string& dir,
                                            leveldb::Env* env = nullptr) {
    storage::StoreOptions so;
    so.node_name = "node-a";
    so.backend = backend_;
    so.env = env;
    absl::StatusOr<std::unique_ptr<storage::Store>> store =
        storage::Store::Open(dir, so);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }

  absl::StatusOr<BuildResult> Build(storage::Store& store,
                                    bool rebuild = false) {
    BuildOptions o;
    o.rebuild = rebuild;
    o.conninfo = pg_->Uri();
    o.names = NamesForNode("node-a");
    o.tables = schema_;
    o.node_name = "node-a";
    o.batch_rows = 2'000;
    return BuildIndex(o, &store);
  }

  std::unique_ptr<PgCluster> pg_;
  std::unique_ptr<Connection> conn_;
  std::vector<TableSchema> schema_;
  std::shared_ptr<PgBackend> backend_;
};

// The build's estimate is the planner's row count (of a plain table: its
// own; pg_partition_tree of one is empty), and the publication it makes
// publishes via the partition root — also one made without it before.
TEST_F(BootstrapTest, TheEstimateCountsRowsAndThePublicationIsViaTheRoot) {
  ASSERT_TRUE(
      pg_->Execute("ANALYZE t; CREATE PUBLICATION tally_old FOR TABLE t").ok());
  TempDir dir;
  std::unique_ptr<storage::Store> store = OpenStore(dir.path());
  ASSERT_NE(store, nullptr);
  absl::StatusOr<BuildResult> result = Build(*store);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->progress.rows_estimated, static_cast<uint64_t>(kRows));
  EXPECT_EQ(*pg_->Execute(absl::StrCat(
                "SELECT pubviaroot FROM pg_publication WHERE pubname = '",
                NamesForNode("node-a").publication, "'")),
            "t");
  ASSERT_TRUE(EnsurePublication(*conn_, "tally_old", schema_).ok());
  EXPECT_EQ(*pg_->Execute("SELECT pubviaroot FROM pg_publication WHERE "
                          "pubname = 'tally_old'"),
            "t");
}

// The same rows at the bootstrap version with their tokens, written by
// Store::Write in the scan's order, as every build did before LoadAbsent.
TEST_F(BootstrapTest, AFirstBuildLeavesTheStoreThatWriteLeaves) {
  TempDir built_dir, written_dir;
  std::unique_ptr<storage::Store> built = OpenStore(built_dir.path());
  ASSERT_NE(built, nullptr);
  absl::StatusOr<BuildResult> result = Build(*built);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->progress.rows_done, static_cast<uint64_t>(kRows));
  EXPECT_EQ(result->progress.rows_written, static_cast<uint64_t>(kRows));
  absl::StatusOr<std::optional<storage::BackendPosition>> position =
      built->backend_position();
  ASSERT_TRUE(position.ok() && position->has_value());

  std::unique_ptr<storage::Store> written = OpenStore(written_dir.path());
  ASSERT_NE(written, nullptr);
  ASSERT_TRUE(conn_->Exec("BEGIN ISOLATION LEVEL REPEATABLE READ").ok());
  storage::WriteRequest batch;
  auto flush = [&]() {
    batch.mode = storage::ApplyMode::kCaptured;
    absl::StatusOr<storage::WriteResult> r = written->Write(std::move(batch));
    batch = storage::WriteRequest();
    return r.status();
  };
  ASSERT_TRUE(ScanTable(*conn_, schema_[0], "",
                        [&](const ScannedRow& row) -> absl::Status {
                          storage::Mutation m = storage::Mutation::Put(
                              kKeyspace, std::string(row.key),
                              std::string(row.value));
                          m.version = BootstrapVersion();
                          m.captured_payload = row.token.Encode();
                          batch.mutations.push_back(std::move(m));
                          if (batch.mutations.size() < 2'000) {
                            return absl::OkStatus();
                          }
                          return flush();
                        })
                  .ok());
  ASSERT_TRUE(flush().ok());
  ASSERT_TRUE(conn_->Exec("COMMIT").ok());

  const Contents expected = Read(*written);
  ASSERT_EQ(expected.rows, static_cast<uint64_t>(kRows));
  ASSERT_EQ(expected.changes, static_cast<storage::Sequence>(kRows));
  // Except the log: the build's rows, at the bootstrap version, are
  // unlogged (no peer needs them from the feed).
  const Contents got = Read(*built);
  ExpectSame(expected, got, /*same_log=*/false);
  EXPECT_EQ(got.changes, 0u);
  // And once reopened (leaves recovered).
  built.reset();
  built = OpenStore(built_dir.path());
  ASSERT_NE(built, nullptr);
  const Contents reopened = Read(*built);
  ExpectSame(expected, reopened, /*same_log=*/false);
  EXPECT_EQ(reopened.changes, 0u);
}

// The store's disk fills mid-build: the build fails, and after a power
// loss the store holds some of the rows and no position, which is how the
// sidecar's next start knows to build again. That build (keys the index
// holds are checked and kept, the others loaded) completes it into the
// store an uninterrupted build leaves.
TEST_F(BootstrapTest, ABuildCutShortIsCompletedByTheNextBuild) {
  TempDir whole_dir, cut_dir;
  Contents whole;
  {
    std::unique_ptr<storage::Store> store = OpenStore(whole_dir.path());
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(Build(*store).ok());
    whole = Read(*store);
  }
  storage::internal::FaultInjectionEnv env;
  {
    std::unique_ptr<storage::Store> store = OpenStore(cut_dir.path(), &env);
    ASSERT_NE(store, nullptr);
    env.SetFreeBytes(1'000'000);
    absl::StatusOr<BuildResult> cut = Build(*store);
    EXPECT_FALSE(cut.ok());
    env.SetFreeBytes(storage::internal::FaultInjectionEnv::kUnlimited);
  }
  ASSERT_TRUE(env.DropUnsyncedData().ok());
  std::unique_ptr<storage::Store> store = OpenStore(cut_dir.path());
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::optional<storage::BackendPosition>> position =
      store->backend_position();
  ASSERT_TRUE(position.ok());
  EXPECT_FALSE(position->has_value());
  const Contents cut = Read(*store);
  EXPECT_GT(cut.rows, 0u);
  EXPECT_LT(cut.rows, static_cast<uint64_t>(kRows));

  absl::StatusOr<BuildResult> again = Build(*store);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->progress.rows_written, kRows - cut.rows);
  ExpectSame(whole, Read(*store));
}

// A rebuild after ADD COLUMN over rows the store marked damaged (read with
// the new column before the rebuild, their values no longer matched their
// digests): they are in the index still, and the rebuild rewrites them.
// It took them for absent, and a bulk load of absent rows must order after
// every row the keyspace holds, damaged ones too: each attempt failed with
// "the index changed during its build", and the sidecar rebuilt in a loop.
TEST_F(BootstrapTest, ARebuildRewritesTheRowsTheStoreMarkedDamaged) {
  TempDir dir;
  std::unique_ptr<storage::Store> store = OpenStore(dir.path());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(Build(*store).ok());
  std::string last_key;
  ASSERT_TRUE(store
                  ->ScanIndex(kKeyspace,
                              [&](const storage::IndexRecord& r) {
                                last_key = std::string(r.key);
                                return absl::OkStatus();
                              })
                  .ok());
  ASSERT_TRUE(
      pg_->Execute("ALTER TABLE t ADD COLUMN c int NOT NULL DEFAULT 7").ok());
  ASSERT_TRUE(backend_->ReloadSchema(kKeyspace).ok());
  // The read marks the damaged rows of the last row's leaf: all of them.
  EXPECT_TRUE(absl::IsDataLoss(store->Get(kKeyspace, last_key).status()));
  ASSERT_GT(store->damaged_rows(), 0u);
  uint64_t marked = 0;
  ASSERT_TRUE(store
                  ->ScanIndex(kKeyspace,
                              [&](const storage::IndexRecord& r) {
                                marked += r.damaged;
                                return absl::OkStatus();
                              })
                  .ok());
  EXPECT_EQ(marked, store->damaged_rows());

  absl::StatusOr<TableSchema> schema = TableSchema::Read(*conn_, kKeyspace);
  ASSERT_TRUE(schema.ok()) << schema.status();
  schema_ = {*schema};
  absl::StatusOr<BuildResult> rebuilt = Build(*store, /*rebuild=*/true);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
  EXPECT_EQ(store->damaged_rows(), 0u);
  absl::StatusOr<storage::Row> row = store->Get(kKeyspace, last_key);
  ASSERT_TRUE(row.ok()) << row.status();
  const Contents c = Read(*store);
  EXPECT_EQ(c.rows, static_cast<uint64_t>(kRows));
}

}  // namespace
}  // namespace pg
}  // namespace tally
