// Dropping a keyspace (Store::DropKeyspace): its rows, leaves and record go,
// the other keyspaces and the per-origin counts stay right, writers (local
// or a peer's) are refused the name from then on, across a reopen, and the
// change log's entries of the dropped keyspace read as erases.
#include <leveldb/db.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/internal/records.h"
#include "storage/store.h"
#include "support/temp_dir.h"

namespace tally {
namespace storage {
namespace {

using ::tally::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

StoreOptions Options() {
  StoreOptions options;
  options.node_name = "node-a";
  options.sync = false;
  options.default_depth = 8;
  // Several erase batches for the keyspace dropped below.
  options.max_batch_mutations = 64;
  return options;
}

std::unique_ptr<Store> OpenOrDie(const std::string& dir) {
  auto store = Store::Open(dir, Options());
  EXPECT_TRUE(store.ok()) << store.status();
  return std::move(store).value();
}

absl::StatusOr<WriteResult> WriteOne(Store& store, Mutation m) {
  WriteRequest request;
  request.mutations.push_back(std::move(m));
  return store.Write(std::move(request));
}

// Rows of `keyspace`: `n` puts, every fifth then deleted, some of them
// written as a peer's ("node-b").
void Fill(Store& store, const std::string& keyspace, int n) {
  for (int i = 0; i < n; ++i) {
    Mutation m = Mutation::Put(keyspace, absl::StrCat("k", i), "value");
    if (i % 3 == 0) {
      m.version = tree::Version{
          tree::HlcTimestamp::FromParts(1700000000000 + i, 0), "node-b"};
    }
    ASSERT_TRUE(WriteOne(store, std::move(m)).ok());
  }
  for (int i = 0; i < n; i += 5) {
    ASSERT_TRUE(
        WriteOne(store, Mutation::Delete(keyspace, absl::StrCat("k", i))).ok());
  }
}

std::vector<std::string> Names(const std::vector<KeyspaceInfo>& keyspaces) {
  std::vector<std::string> names;
  for (const KeyspaceInfo& ks : keyspaces) names.push_back(ks.name);
  return names;
}

void ExpectSound(Store& store) {
  absl::StatusOr<VerifyReport> report = store.Verify();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok()) << report->problems.front();
}

// Records whose key starts with `prefix`, read from the closed store.
int RecordsWithPrefix(const std::string& dir, const std::string& prefix) {
  leveldb::DB* raw = nullptr;
  EXPECT_TRUE(leveldb::DB::Open(leveldb::Options(), dir, &raw).ok());
  std::unique_ptr<leveldb::DB> db(raw);
  std::unique_ptr<leveldb::Iterator> it(db->NewIterator({}));
  int n = 0;
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    ++n;
  }
  return n;
}

TEST(StoreDrop, RemovesTheRowsAndRefusesTheNameForGood) {
  TempDir dir;
  uint32_t dropped_id = 0;
  uint64_t users_rows = 0;
  {
    std::unique_ptr<Store> store = OpenOrDie(dir.path());
    Fill(*store, "users", 300);
    Fill(*store, "usres", 500);
    users_rows = store->GetKeyspace("users")->row_count;
    const std::vector<OriginRowCount> before = store->OriginRowCounts();
    ASSERT_EQ(before.size(), 2u);
    // The second keyspace created.
    dropped_id = 2;

    absl::StatusOr<uint64_t> dropped = store->DropKeyspace("usres");
    ASSERT_TRUE(dropped.ok()) << dropped.status();
    EXPECT_EQ(*dropped, 500u);  // tombstones included
    EXPECT_THAT(Names(store->ListKeyspaces()), ElementsAre("users"));
    ASSERT_EQ(store->ListDroppedKeyspaces().size(), 1u);
    EXPECT_EQ(store->ListDroppedKeyspaces()[0].name, "usres");
    EXPECT_TRUE(absl::IsNotFound(store->GetKeyspace("usres").status()));
    EXPECT_EQ(store->GetKeyspace("users")->row_count, users_rows);
    // The per-origin counts lost exactly the dropped rows.
    uint64_t counted = 0;
    for (const OriginRowCount& c : store->OriginRowCounts()) {
      counted += c.rows;
    }
    EXPECT_EQ(counted, users_rows);
    ExpectSound(*store);

    // A write to the name, local or a peer's, is refused, not applied, and
    // the rest of its request commits.
    WriteRequest mixed;
    mixed.mutations.push_back(Mutation::Put("usres", "again", "v"));
    Mutation peer = Mutation::Put("users", "from-b", "v");
    peer.version = tree::Version{
        tree::HlcTimestamp::FromParts(1750000000000, 0), "node-b"};
    mixed.mutations.push_back(std::move(peer));
    absl::StatusOr<WriteResult> result = store->Write(std::move(mixed));
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(result->rejected.size(), 1u);
    EXPECT_TRUE(result->rejected[0].dropped);
    EXPECT_TRUE(result->rejected[0].not_taken);
    EXPECT_THAT(result->rejected[0].status.message(), HasSubstr("dropped"));
    EXPECT_THAT(result->applied, ElementsAre(false, true));
    EXPECT_THAT(Names(store->ListKeyspaces()), ElementsAre("users"));
    // Nor does an explicit creation bring it back.
    const absl::Status created = store->CreateKeyspace("usres", 8);
    EXPECT_TRUE(absl::IsFailedPrecondition(created)) << created;
    // Dropping it again says so.
    EXPECT_TRUE(absl::IsAlreadyExists(store->DropKeyspace("usres").status()));
    EXPECT_TRUE(absl::IsNotFound(store->DropKeyspace("nothing").status()));
  }
  // Nothing of it is left on disk but its drop record.
  EXPECT_EQ(RecordsWithPrefix(dir.path(), internal::RowKeyPrefix(dropped_id)),
            0);
  EXPECT_EQ(RecordsWithPrefix(dir.path(), internal::LeafKeyPrefix(dropped_id)),
            0);
  EXPECT_EQ(RecordsWithPrefix(dir.path(), internal::KeyspaceKey("usres")), 0);
  EXPECT_EQ(
      RecordsWithPrefix(dir.path(), internal::DroppedKeyspaceKey("usres")), 1);

  // Reopened: still dropped, still refused, still sound.
  std::unique_ptr<Store> store = OpenOrDie(dir.path());
  EXPECT_THAT(Names(store->ListKeyspaces()), ElementsAre("users"));
  ASSERT_EQ(store->ListDroppedKeyspaces().size(), 1u);
  absl::StatusOr<WriteResult> again =
      WriteOne(*store, Mutation::Put("usres", "again", "v"));
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->rejected.size(), 1u);
  EXPECT_TRUE(again->rejected[0].dropped);
  ExpectSound(*store);
  EXPECT_EQ(store->GetKeyspace("users")->row_count, users_rows + 1);
}

// A feed's request (refuse_when_none_taken) whose rows are all of a dropped
// keyspace commits its progress: refusing it whole, as for a backend's
// passing trouble, would hold the feed at that batch for good.
TEST(StoreDrop, AFeedBatchOfADroppedKeyspaceMovesOn) {
  TempDir dir;
  std::unique_ptr<Store> store = OpenOrDie(dir.path());
  Fill(*store, "usres", 10);
  ASSERT_TRUE(store->DropKeyspace("usres").ok());
  WriteRequest batch;
  Mutation m = Mutation::Put("usres", "k1", "v");
  m.version =
      tree::Version{tree::HlcTimestamp::FromParts(1750000000000, 0), "node-b"};
  batch.mutations.push_back(std::move(m));
  batch.progress = UpstreamProgress{"node-b", 7, 42};
  batch.refuse_when_none_taken = true;
  absl::StatusOr<WriteResult> result = store->Write(std::move(batch));
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->rejected.size(), 1u);
  EXPECT_TRUE(result->rejected[0].dropped);
  absl::StatusOr<UpstreamProgress> progress = store->GetProgress("node-b");
  ASSERT_TRUE(progress.ok()) << progress.status();
  EXPECT_EQ(progress->sequence, 42u);
}

// The change log still holds the dropped keyspace's entries (until
// retention trims them): they read as erases of its name, which a feed
// skips, not as a corrupted log.
TEST(StoreDrop, TheChangeLogReadsTheDroppedKeyspaceAsErases) {
  TempDir dir;
  for (int open = 0; open < 2; ++open) {
    std::unique_ptr<Store> store = OpenOrDie(dir.path());
    if (open == 0) {
      Fill(*store, "usres", 20);
      Fill(*store, "users", 5);
      ASSERT_TRUE(store->DropKeyspace("usres").ok());
    }
    absl::StatusOr<std::vector<ChangeEntry>> changes =
        store->ReadChanges(0, 1000);
    ASSERT_TRUE(changes.ok()) << changes.status();
    int users = 0;
    int usres = 0;
    for (const ChangeEntry& e : *changes) {
      if (e.keyspace == "usres") {
        ++usres;
        EXPECT_TRUE(e.erased) << e.key;
      } else {
        ++users;
        EXPECT_FALSE(e.erased) << e.key;
      }
    }
    EXPECT_EQ(users, 6);        // 5 puts, 1 delete
    EXPECT_EQ(usres, 24 + 20);  // 20 puts, 4 deletes, 20 erases
  }
}

// A view taken before the drop still reads (an empty tree), and the name
// can be given back: undone, a write creates it again, under a new id.
TEST(StoreDrop, AnUndoneDropLetsTheNameBeWrittenAgain) {
  TempDir dir;
  {
    std::unique_ptr<Store> store = OpenOrDie(dir.path());
    Fill(*store, "usres", 50);
    absl::StatusOr<std::unique_ptr<tree::TreeView>> view =
        store->NewTreeView("usres");
    ASSERT_TRUE(view.ok()) << view.status();
    ASSERT_TRUE(store->DropKeyspace("usres").ok());
    EXPECT_TRUE(absl::IsNotFound(store->NewTreeView("usres").status()));
    EXPECT_TRUE(absl::IsNotFound(store->UndropKeyspace("users")));
    ASSERT_TRUE(store->UndropKeyspace("usres").ok());
    EXPECT_TRUE(store->ListDroppedKeyspaces().empty());
    absl::StatusOr<WriteResult> result =
        WriteOne(*store, Mutation::Put("usres", "back", "v"));
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_TRUE(result->rejected.empty());
    EXPECT_EQ(store->GetKeyspace("usres")->row_count, 1u);
    ExpectSound(*store);
  }
  std::unique_ptr<Store> store = OpenOrDie(dir.path());
  EXPECT_TRUE(store->ListDroppedKeyspaces().empty());
  EXPECT_EQ(store->GetKeyspace("usres")->row_count, 1u);
  ExpectSound(*store);
  absl::StatusOr<std::vector<ChangeEntry>> changes =
      store->ReadChanges(0, 1000);
  ASSERT_TRUE(changes.ok()) << changes.status();
}

// Writers keep writing both keyspaces while one is dropped: each write to
// it either lands before the drop (and is erased with the rest) or is
// refused; none survives, none of the other keyspace's is lost, and the
// store verifies sound.
TEST(StoreDrop, WritersDuringTheDropLoseNothingElseAndLeaveNoRow) {
  TempDir dir;
  std::unique_ptr<Store> store = OpenOrDie(dir.path());
  Fill(*store, "usres", 2000);
  std::atomic<bool> stop{false};
  std::atomic<int> users_written{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < 3; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; !stop.load(); ++i) {
        const std::string key = absl::StrCat("w", t, "-", i);
        WriteRequest request;
        request.mutations.push_back(Mutation::Put("usres", key, "v"));
        request.mutations.push_back(Mutation::Put("users", key, "v"));
        absl::StatusOr<WriteResult> r = store->Write(std::move(request));
        ASSERT_TRUE(r.ok()) << r.status();
        ASSERT_TRUE(r->applied[1]);
        users_written.fetch_add(1);
      }
    });
  }
  while (users_written.load() < 100) std::this_thread::yield();
  absl::StatusOr<uint64_t> dropped = store->DropKeyspace("usres");
  const int after_drop = users_written.load();
  while (users_written.load() < after_drop + 100) std::this_thread::yield();
  stop.store(true);
  for (std::thread& w : writers) w.join();
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_GE(*dropped, 2000u);
  EXPECT_THAT(Names(store->ListKeyspaces()), ElementsAre("users"));
  EXPECT_EQ(store->GetKeyspace("users")->row_count,
            static_cast<uint64_t>(users_written.load()));
  uint64_t counted = 0;
  for (const OriginRowCount& c : store->OriginRowCounts()) counted += c.rows;
  EXPECT_EQ(counted, static_cast<uint64_t>(users_written.load()));
  ExpectSound(*store);
}

// Two operators drop the same keyspace at once: one drop does it, the
// other is told it was done (or is under way); nothing breaks.
TEST(StoreDrop, TwoDropsAtOnceDropItOnce) {
  TempDir dir;
  std::unique_ptr<Store> store = OpenOrDie(dir.path());
  for (int round = 0; round < 20; ++round) {
    const std::string name = absl::StrCat("ks", round);
    Fill(*store, name, 100);
    absl::StatusOr<uint64_t> results[2];
    std::thread other([&] { results[1] = store->DropKeyspace(name); });
    results[0] = store->DropKeyspace(name);
    other.join();
    int done = 0;
    for (const absl::StatusOr<uint64_t>& r : results) {
      if (r.ok()) {
        ++done;
        EXPECT_EQ(*r, 100u);
      } else {
        EXPECT_TRUE(absl::IsAlreadyExists(r.status()) ||
                    absl::IsFailedPrecondition(r.status()))
            << r.status();
      }
    }
    EXPECT_EQ(done, 1) << name;
  }
  EXPECT_TRUE(store->ListKeyspaces().empty());
  EXPECT_EQ(store->ListDroppedKeyspaces().size(), 20u);
  ExpectSound(*store);
}

}  // namespace
}  // namespace storage
}  // namespace tally
