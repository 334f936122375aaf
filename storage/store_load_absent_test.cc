// Store::LoadAbsent, the bulk load of rows a keyspace does not hold: it must
// leave exactly the store Write leaves for the same rows (records, leaves,
// root, change log, per-origin counts, after a reopen too), refuse what
// breaks its order rule without writing anything, and stay crash-consistent
// (a load cut short by a failed write or a power loss leaves whole batches,
// and no backend position unless the batch carrying it is there).
#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/internal/fault_injection_env.h"
#include "storage/store.h"
#include "support/temp_dir.h"
#include "tree/token.h"

namespace tally {
namespace storage {
namespace {

using internal::FaultInjectionEnv;
using ::tally::testing::TempDir;
using ::testing::HasSubstr;

constexpr char kKeyspace[] = "public.t";

StoreOptions Options(leveldb::Env* env = nullptr) {
  StoreOptions options;
  options.node_name = "node-a";
  options.default_depth = 10;
  options.env = env;
  return options;
}

std::unique_ptr<Store> OpenStore(const std::string& dir,
                                 leveldb::Env* env = nullptr) {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(dir, Options(env));
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

// A captured row as a build gives it: a version (most at the bootstrap
// version, some at their own). No captured payload: the embedded backend
// keeps the value itself, which Verify reads back.
Mutation Row(int i) {
  Mutation m = Mutation::Put(kKeyspace, absl::StrCat("key-", i),
                             std::string(20 + i % 50, 'a' + i % 26));
  m.version =
      tree::Version{tree::HlcTimestamp::FromParts(i % 7 == 0 ? 1000 + i : 0, 1),
                    i % 7 == 0 ? "node-b" : "tally.bootstrap"};
  return m;
}

std::vector<Mutation> Rows(int n) {
  std::vector<Mutation> rows;
  for (int i = 0; i < n; ++i) rows.push_back(Row(i));
  return rows;
}

// `rows` in the index's (token, key) order.
std::vector<Mutation> Sorted(std::vector<Mutation> rows) {
  std::sort(rows.begin(), rows.end(), [](const Mutation& a, const Mutation& b) {
    const tree::Token ta = tree::TokenOf(a.key), tb = tree::TokenOf(b.key);
    if (ta != tb) return ta < tb;
    return a.key < b.key;
  });
  return rows;
}

WriteRequest Captured(std::vector<Mutation> rows) {
  WriteRequest request;
  request.mode = ApplyMode::kCaptured;
  request.mutations = std::move(rows);
  return request;
}

// Writes `rows` in batches of `batch`, through LoadAbsent or Write.
void WriteAll(Store& store, const std::vector<Mutation>& rows, size_t batch,
              bool load_absent) {
  for (size_t i = 0; i < rows.size(); i += batch) {
    std::vector<Mutation> part(rows.begin() + i,
                               rows.begin() + std::min(rows.size(), i + batch));
    const size_t n = part.size();
    absl::StatusOr<WriteResult> r =
        load_absent ? store.LoadAbsent(Captured(std::move(part)))
                    : store.Write(Captured(std::move(part)));
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->applied.size(), n);
    EXPECT_EQ(std::count(r->applied.begin(), r->applied.end(), true),
              static_cast<long>(n));
  }
}

// Everything a reader can see of a store's keyspace and log.
struct Contents {
  std::vector<std::string> index;  // one line per record
  KeyspaceInfo info;
  std::vector<uint64_t> leaves;
  std::vector<std::string> origins;
  std::vector<std::string> changes;
};

Contents Read(Store& store) {
  Contents c;
  EXPECT_TRUE(store
                  .ScanIndex(kKeyspace,
                             [&](const IndexRecord& r) {
                               c.index.push_back(absl::StrCat(
                                   r.key, "|", r.version.timestamp.raw(), "|",
                                   r.version.origin, "|", r.deleted, "|",
                                   r.digest.ToHex(), "|", r.payload));
                               return absl::OkStatus();
                             })
                  .ok());
  absl::StatusOr<KeyspaceInfo> info = store.GetKeyspace(kKeyspace);
  EXPECT_TRUE(info.ok()) << info.status();
  if (info.ok()) c.info = *info;
  absl::StatusOr<std::vector<uint64_t>> leaves = store.LeafCounts(kKeyspace);
  EXPECT_TRUE(leaves.ok());
  if (leaves.ok()) c.leaves = *leaves;
  for (const OriginRowCount& o : store.OriginRowCounts()) {
    c.origins.push_back(absl::StrCat(o.origin, "=", o.rows));
  }
  absl::StatusOr<std::vector<ChangeEntry>> changes =
      store.ReadChanges(0, 1'000'000);
  EXPECT_TRUE(changes.ok()) << changes.status();
  if (changes.ok()) {
    for (const ChangeEntry& e : *changes) {
      c.changes.push_back(absl::StrCat(e.sequence, "|", e.keyspace, "|", e.key,
                                       "|", e.version.timestamp.raw(), "|",
                                       e.version.origin, "|", e.deleted));
    }
  }
  absl::StatusOr<VerifyReport> report = store.Verify();
  EXPECT_TRUE(report.ok()) << report.status();
  if (report.ok()) {
    EXPECT_TRUE(report->ok()) << report->problems.front();
  }
  return c;
}

void ExpectSame(const Contents& a, const Contents& b) {
  EXPECT_EQ(a.index, b.index);
  EXPECT_EQ(a.info.row_count, b.info.row_count);
  EXPECT_EQ(a.info.root, b.info.root);
  EXPECT_EQ(a.leaves, b.leaves);
  EXPECT_EQ(a.origins, b.origins);
  EXPECT_EQ(a.changes.size(), b.changes.size());
}

// The same rows, written by Write in the scan's order or by LoadAbsent in
// the index's order, give the same store — also once both are reopened
// (leaves recovered from the log replay, then from a checkpoint).
TEST(StoreLoadAbsent, LeavesTheStoreWriteLeavesForTheSameRows) {
  const std::vector<Mutation> rows = Rows(25'000);
  TempDir slow_dir, bulk_dir;
  std::unique_ptr<Store> slow = OpenStore(slow_dir.path());
  std::unique_ptr<Store> bulk = OpenStore(bulk_dir.path());
  ASSERT_NE(slow, nullptr);
  ASSERT_NE(bulk, nullptr);
  ASSERT_NO_FATAL_FAILURE(WriteAll(*slow, rows, 10'000, /*load_absent=*/false));
  ASSERT_NO_FATAL_FAILURE(
      WriteAll(*bulk, Sorted(rows), 10'000, /*load_absent=*/true));
  const Contents expected = Read(*slow);
  ASSERT_EQ(expected.info.row_count, rows.size());
  ExpectSame(expected, Read(*bulk));
  bulk.reset();
  bulk = OpenStore(bulk_dir.path());
  ASSERT_NE(bulk, nullptr);
  ExpectSame(expected, Read(*bulk));
  // A later ordinary write of a loaded key meets it as stored: not newer,
  // nothing changes; a newer one replaces it.
  Mutation same = Sorted(rows)[7];
  absl::StatusOr<WriteResult> r = bulk->Write(Captured({same}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->applied[0]);
  same.version->timestamp = tree::HlcTimestamp::FromParts(5000, 0);
  r = bulk->Write(Captured({same}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->applied[0]);
}

// A keyspace that already holds rows takes a load of the keys after its
// last one, as Write would have written them.
TEST(StoreLoadAbsent, LoadsAfterTheRowsAKeyspaceHolds) {
  const std::vector<Mutation> rows = Sorted(Rows(3'000));
  TempDir slow_dir, bulk_dir;
  std::unique_ptr<Store> slow = OpenStore(slow_dir.path());
  std::unique_ptr<Store> bulk = OpenStore(bulk_dir.path());
  ASSERT_NO_FATAL_FAILURE(WriteAll(*slow, rows, 1'000, /*load_absent=*/false));
  const std::vector<Mutation> first(rows.begin(), rows.begin() + 1'000);
  const std::vector<Mutation> rest(rows.begin() + 1'000, rows.end());
  ASSERT_NO_FATAL_FAILURE(WriteAll(*bulk, first, 1'000, /*load_absent=*/false));
  ASSERT_NO_FATAL_FAILURE(WriteAll(*bulk, rest, 700, /*load_absent=*/true));
  ExpectSame(Read(*slow), Read(*bulk));
}

// What breaks the rule is refused and writes nothing: a key at or before
// the keyspace's last row (a row it holds, or one its order puts before),
// keys out of order in the request, deletes, other modes, two keyspaces.
TEST(StoreLoadAbsent, RefusesWhatBreaksTheRuleAndWritesNothing) {
  const std::vector<Mutation> rows = Sorted(Rows(100));
  TempDir dir;
  std::unique_ptr<Store> store = OpenStore(dir.path());
  ASSERT_NO_FATAL_FAILURE(WriteAll(
      *store, std::vector<Mutation>(rows.begin(), rows.begin() + 50), 50,
      /*load_absent=*/true));
  const Contents before = Read(*store);

  auto expect_refused = [&](WriteRequest request, absl::StatusCode code,
                            absl::string_view message) {
    absl::StatusOr<WriteResult> r = store->LoadAbsent(std::move(request));
    EXPECT_EQ(r.status().code(), code) << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr(message));
    const Contents after = Read(*store);
    EXPECT_EQ(after.index, before.index);
    EXPECT_EQ(after.changes, before.changes);
    EXPECT_EQ(after.info.root, before.info.root);
  };
  // The keyspace's last row again.
  expect_refused(Captured({rows[49]}), absl::StatusCode::kFailedPrecondition,
                 "does not order after");
  // A key the keyspace does not hold, but ordering before its last row.
  {
    std::vector<Mutation> late = {rows[70]};
    ASSERT_NO_FATAL_FAILURE(WriteAll(*store, late, 1, /*load_absent=*/true));
  }
  const Contents with_70 = Read(*store);
  {
    absl::StatusOr<WriteResult> r = store->LoadAbsent(Captured({rows[60]}));
    EXPECT_TRUE(absl::IsFailedPrecondition(r.status())) << r.status();
    EXPECT_EQ(Read(*store).index, with_70.index);
  }
  // Out of order within the request: nothing of it is written, not even
  // the rows before the one out of order.
  {
    absl::StatusOr<WriteResult> r =
        store->LoadAbsent(Captured({rows[80], rows[90], rows[85]}));
    EXPECT_TRUE(absl::IsFailedPrecondition(r.status())) << r.status();
    const Contents after = Read(*store);
    EXPECT_EQ(after.index, with_70.index);
    EXPECT_EQ(after.changes, with_70.changes);
  }
  // The same key twice.
  {
    absl::StatusOr<WriteResult> r =
        store->LoadAbsent(Captured({rows[80], rows[80]}));
    EXPECT_TRUE(absl::IsFailedPrecondition(r.status())) << r.status();
    EXPECT_EQ(Read(*store).index, with_70.index);
  }
  {
    Mutation d = Mutation::Delete(kKeyspace, rows[95].key);
    d.version = rows[95].version;
    absl::StatusOr<WriteResult> r = store->LoadAbsent(Captured({d}));
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr("puts only"));
  }
  {
    WriteRequest lww;
    lww.mutations = {rows[95]};
    absl::StatusOr<WriteResult> r = store->LoadAbsent(std::move(lww));
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr("captured rows only"));
  }
  {
    Mutation other = rows[99];
    other.keyspace = "public.other";
    absl::StatusOr<WriteResult> r =
        store->LoadAbsent(Captured({rows[95], other}));
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr("one keyspace"));
  }
  EXPECT_EQ(Read(*store).index, with_70.index);
  // Another keyspace is its own order: its first load is accepted.
  Mutation other = rows[0];
  other.keyspace = "public.other";
  EXPECT_TRUE(store->LoadAbsent(Captured({other})).ok());
}

// A load cut short — the disk fills at a random point, then the machine
// loses power — leaves whole batches only, each with all its records: the
// reopened store verifies, holds a prefix of the load and no backend
// position (it went with the last batch, which did not commit), so that a
// builder sees an unfinished build. Loading the rest then (the keys after
// the keyspace's last row) completes it into the store an uninterrupted
// load gives.
TEST(StoreLoadAbsent, ALoadCutShortLeavesWholeBatchesAndNoPosition) {
  const uint32_t seed = std::random_device()();
  std::printf("seed %u\n", seed);
  std::mt19937 random(seed);
  const std::vector<Mutation> rows = Sorted(Rows(20'000));
  constexpr size_t kBatch = 2'000;
  TempDir whole_dir;
  Contents whole;
  {
    std::unique_ptr<Store> store = OpenStore(whole_dir.path());
    ASSERT_NO_FATAL_FAILURE(WriteAll(*store, rows, kBatch, true));
    whole = Read(*store);
  }
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE(absl::StrCat("seed ", seed, " round ", round));
    TempDir dir;
    FaultInjectionEnv env;
    size_t acknowledged = 0;
    {
      std::unique_ptr<Store> store = OpenStore(dir.path(), &env);
      ASSERT_NE(store, nullptr);
      // The keyspace first, as a build's first batch would create it: what
      // follows may fail before any row is in.
      ASSERT_TRUE(store->CreateKeyspace(kKeyspace, 10).ok());
      env.SetFreeBytes(200'000 + random() % 1'500'000);
      for (size_t i = 0; i < rows.size(); i += kBatch) {
        WriteRequest request = Captured(std::vector<Mutation>(
            rows.begin() + i,
            rows.begin() + std::min(rows.size(), i + kBatch)));
        if (i + kBatch >= rows.size()) {
          request.backend_position = BackendPosition{"end"};
        }
        if (!store->LoadAbsent(std::move(request)).ok()) break;
        acknowledged = std::min(rows.size(), i + kBatch);
      }
      ASSERT_LT(acknowledged, rows.size()) << "the disk never filled";
      env.SetFreeBytes(FaultInjectionEnv::kUnlimited);
    }
    ASSERT_TRUE(env.DropUnsyncedData().ok());
    std::unique_ptr<Store> store = OpenStore(dir.path());
    ASSERT_NE(store, nullptr);
    absl::StatusOr<std::optional<BackendPosition>> position =
        store->backend_position();
    ASSERT_TRUE(position.ok());
    EXPECT_FALSE(position->has_value());
    const Contents cut = Read(*store);
    EXPECT_GE(cut.index.size(), acknowledged);  // acknowledged = synced
    EXPECT_EQ(cut.index.size() % kBatch, 0u) << "a batch was cut in two";
    EXPECT_EQ(cut.changes.size(), cut.index.size());
    ASSERT_TRUE(
        std::equal(cut.index.begin(), cut.index.end(), whole.index.begin()));
    // The rest, after what the store holds.
    ASSERT_NO_FATAL_FAILURE(WriteAll(
        *store,
        std::vector<Mutation>(rows.begin() + cut.index.size(), rows.end()),
        kBatch, true));
    ExpectSame(whole, Read(*store));
  }
}

// Rows at the bootstrap version marked unlogged, the others not.
std::vector<Mutation> MarkBootstrapUnlogged(std::vector<Mutation> rows) {
  for (Mutation& m : rows) m.unlogged = m.version->origin == "tally.bootstrap";
  return rows;
}

// Unlogged rows get no change-log entry, and otherwise leave the store a
// logged load leaves: records, leaves, root, per-origin counts — with
// ordinary writes before (their leaves' changes still only in the log)
// and after, and after a power loss before the store's clean close (no
// closing checkpoint): the leaves the loads changed were persisted with
// their rows.
TEST(StoreLoadAbsent, UnloggedRowsGetNoEntryAndTheirLeavesSurviveACrash) {
  const std::vector<Mutation> all = Sorted(Rows(12'000));
  // Written by Write around the load: the first 1,000 keys before it,
  // and 50 rows of another keyspace before and after it.
  const std::vector<Mutation> first(all.begin(), all.begin() + 1'000);
  const std::vector<Mutation> rest(all.begin() + 1'000, all.end());
  std::vector<Mutation> other;
  for (int i = 0; i < 100; ++i) {
    Mutation m = Row(100'000 + i);
    m.keyspace = "public.other";
    other.push_back(m);
  }
  const std::vector<Mutation> other_before(other.begin(), other.begin() + 50);
  const std::vector<Mutation> other_after(other.begin() + 50, other.end());
  const size_t logged_in_rest = std::count_if(
      rest.begin(), rest.end(),
      [](const Mutation& m) { return m.version->origin != "tally.bootstrap"; });
  ASSERT_GT(logged_in_rest, 0u);
  ASSERT_LT(logged_in_rest, rest.size());

  TempDir logged_dir, unlogged_dir;
  Contents expected;
  {
    std::unique_ptr<Store> store = OpenStore(logged_dir.path());
    ASSERT_NO_FATAL_FAILURE(WriteAll(*store, other_before, 50, false));
    ASSERT_NO_FATAL_FAILURE(WriteAll(*store, first, 1'000, false));
    ASSERT_NO_FATAL_FAILURE(WriteAll(*store, rest, 2'000, true));
    ASSERT_NO_FATAL_FAILURE(WriteAll(*store, other_after, 50, false));
    expected = Read(*store);
    ASSERT_EQ(expected.changes.size(), all.size() + other.size());
  }
  FaultInjectionEnv env;
  {
    std::unique_ptr<Store> store = OpenStore(unlogged_dir.path(), &env);
    ASSERT_NE(store, nullptr);
    ASSERT_NO_FATAL_FAILURE(WriteAll(*store, other_before, 50, false));
    ASSERT_NO_FATAL_FAILURE(WriteAll(*store, first, 1'000, false));
    const Sequence before_load = store->last_sequence();
    ASSERT_EQ(before_load, 1'050u);
    ASSERT_NO_FATAL_FAILURE(
        WriteAll(*store, MarkBootstrapUnlogged(rest), 2'000, true));
    // Only the rows the load logged (not at the bootstrap version).
    EXPECT_EQ(store->last_sequence(), before_load + logged_in_rest);
    ASSERT_NO_FATAL_FAILURE(WriteAll(*store, other_after, 50, false));
    const Contents loaded = Read(*store);
    EXPECT_EQ(loaded.index, expected.index);
    EXPECT_EQ(loaded.info.row_count, expected.info.row_count);
    EXPECT_EQ(loaded.info.root, expected.info.root);
    EXPECT_EQ(loaded.leaves, expected.leaves);
    EXPECT_EQ(loaded.origins, expected.origins);
    EXPECT_EQ(loaded.changes.size(), 1'100 + logged_in_rest);
    // No entry for a loaded row at the bootstrap version.
    absl::flat_hash_set<std::string> unlogged_keys;
    for (const Mutation& m : MarkBootstrapUnlogged(rest)) {
      if (m.unlogged) unlogged_keys.insert(m.key);
    }
    absl::StatusOr<std::vector<ChangeEntry>> entries =
        store->ReadChanges(0, 1'000'000);
    ASSERT_TRUE(entries.ok()) << entries.status();
    for (const ChangeEntry& e : *entries) {
      EXPECT_FALSE(e.keyspace == kKeyspace && unlogged_keys.contains(e.key))
          << e.key;
    }
    // The power goes before the clean close could checkpoint the leaves.
    env.SetFreeBytes(0);
  }
  ASSERT_TRUE(env.DropUnsyncedData().ok());
  std::unique_ptr<Store> store = OpenStore(unlogged_dir.path());
  ASSERT_NE(store, nullptr);
  const Contents reopened = Read(*store);  // Verify: leaves match the rows
  EXPECT_EQ(reopened.index, expected.index);
  EXPECT_EQ(reopened.info.root, expected.info.root);
  EXPECT_EQ(reopened.leaves, expected.leaves);
  EXPECT_EQ(reopened.origins, expected.origins);
  EXPECT_EQ(reopened.changes.size(), 1'100 + logged_in_rest);
  absl::StatusOr<KeyspaceInfo> other_info = store->GetKeyspace("public.other");
  ASSERT_TRUE(other_info.ok()) << other_info.status();
  EXPECT_EQ(other_info->row_count, other.size());
}

// The first load of a keyspace creates it in the same commit: its leaves
// start empty, and a crash right after keeps them.
TEST(StoreLoadAbsent, AnUnloggedFirstLoadCreatesTheKeyspaceWithItsLeaves) {
  std::vector<Mutation> rows = Sorted(Rows(3'000));
  for (Mutation& m : rows) {
    m.version =
        tree::Version{tree::HlcTimestamp::FromParts(0, 1), "tally.bootstrap"};
    m.unlogged = true;
  }
  TempDir dir;
  FaultInjectionEnv env;
  Contents loaded;
  {
    std::unique_ptr<Store> store = OpenStore(dir.path(), &env);
    ASSERT_NE(store, nullptr);
    ASSERT_NO_FATAL_FAILURE(WriteAll(*store, rows, 3'000, true));
    EXPECT_EQ(store->last_sequence(), 0u);
    loaded = Read(*store);
    EXPECT_EQ(loaded.info.row_count, rows.size());
    EXPECT_TRUE(loaded.changes.empty());
    env.SetFreeBytes(0);
  }
  ASSERT_TRUE(env.DropUnsyncedData().ok());
  std::unique_ptr<Store> store = OpenStore(dir.path());
  ASSERT_NE(store, nullptr);
  const Contents reopened = Read(*store);
  EXPECT_EQ(reopened.index, loaded.index);
  EXPECT_EQ(reopened.info.root, loaded.info.root);
  EXPECT_EQ(reopened.leaves, loaded.leaves);
}

// Write decides rows against the stored ones and may replace what a peer
// holds: it refuses unlogged rows, writing nothing.
TEST(StoreLoadAbsent, WriteRefusesUnloggedRows) {
  TempDir dir;
  std::unique_ptr<Store> store = OpenStore(dir.path());
  ASSERT_NE(store, nullptr);
  Mutation m = Row(1);
  m.unlogged = true;
  absl::StatusOr<WriteResult> r = store->Write(Captured({Row(2), m}));
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("unlogged"));
  EXPECT_TRUE(absl::IsNotFound(store->GetKeyspace(kKeyspace).status()));
}

}  // namespace
}  // namespace storage
}  // namespace tally
