// Tests of the store's maintenance: change-log retention and tombstone
// purge.
#include <leveldb/db.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/internal/records.h"
#include "storage/store.h"
#include "support/temp_dir.h"

namespace tally {
namespace storage {
namespace {

using ::tally::testing::TempDir;
using tree::HlcTimestamp;
using tree::Version;

StoreOptions Options(const std::string& name = "node-a") {
  StoreOptions options;
  options.node_name = name;
  options.sync = false;
  options.default_depth = 8;
  return options;
}

std::unique_ptr<Store> OpenOrDie(const std::string& dir,
                                 StoreOptions options = Options()) {
  auto store = Store::Open(dir, std::move(options));
  EXPECT_TRUE(store.ok()) << store.status();
  return std::move(store).value();
}

void Write(Store& store, Mutation m) {
  WriteRequest request;
  request.mutations.push_back(std::move(m));
  ASSERT_TRUE(store.Write(std::move(request)).ok());
}

void PutMany(Store& store, int n, const std::string& prefix = "k") {
  for (int i = 0; i < n; ++i) {
    Write(store, Mutation::Put("ks", absl::StrCat(prefix, i), "v"));
  }
}

void ExpectSound(Store& store) {
  auto report = store.Verify();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok()) << report->problems.front();
}

HlcTimestamp MillisAgo(int64_t ms) {
  return HlcTimestamp::FromParts(absl::ToUnixMillis(absl::Now()) - ms, 0);
}

// ------------------------------------------------------------ retention

TEST(LogRetention, TrimsOldEntriesAndRefusesOlderPositions) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  PutMany(*store, 100);
  EXPECT_EQ(store->first_sequence(), 1u);
  auto removed = store->TrimChangeLog(60);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, 60u);
  EXPECT_EQ(store->first_sequence(), 61u);

  // A reader at the new start reads on; one before it is told.
  auto entries = store->ReadChanges(60, 1000);
  ASSERT_TRUE(entries.ok());
  ASSERT_EQ(entries->size(), 40u);
  EXPECT_EQ(entries->front().sequence, 61u);
  auto stale = store->ReadChanges(59, 1000);
  EXPECT_TRUE(absl::IsFailedPrecondition(stale.status())) << stale.status();
  EXPECT_NE(stale.status().message().find("older than the retained"),
            std::string::npos);

  // Trimming again, or below the start, removes nothing; beyond the end is
  // clamped to the end.
  EXPECT_EQ(*store->TrimChangeLog(30), 0u);
  EXPECT_EQ(*store->TrimChangeLog(1'000'000), 40u);
  EXPECT_EQ(store->first_sequence(), 101u);
  auto empty = store->ReadChanges(100, 10);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());

  // New entries follow on; the start survives a reopen.
  PutMany(*store, 5, "later");
  store.reset();
  store = OpenOrDie(dir.path());
  EXPECT_EQ(store->first_sequence(), 101u);
  EXPECT_EQ(store->last_sequence(), 105u);
  ASSERT_EQ(store->ReadChanges(100, 10)->size(), 5u);
  ExpectSound(*store);
}

// Leaves are rebuilt at open from the last checkpoint plus the entries
// after it, so a trim must checkpoint first. The child trims everything
// and dies without a clean close (which would checkpoint anyway).
TEST(LogRetention, ATrimSurvivesACrashWithTheTreeIntact) {
  TempDir dir;
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    StoreOptions options = Options();
    options.sync = true;
    options.leaf_checkpoint_interval = 1'000'000;  // never on its own
    auto store = Store::Open(dir.path(), options);
    if (!store.ok()) _exit(3);
    for (int i = 0; i < 300; ++i) {
      WriteRequest request;
      request.mutations.push_back(
          Mutation::Put("ks", absl::StrCat("k", i), "v"));
      if (!(*store)->Write(std::move(request)).ok()) _exit(4);
    }
    if (!(*store)->TrimChangeLog(300).ok()) _exit(5);
    _exit(0);  // no destructor: no clean-close checkpoint
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << wstatus;
  auto store = OpenOrDie(dir.path());
  EXPECT_EQ(store->first_sequence(), 301u);
  auto ks = store->GetKeyspace("ks");
  ASSERT_TRUE(ks.ok());
  EXPECT_EQ(ks->row_count, 300u);
  ExpectSound(*store);
}

TEST(LogRetention, AReaderRacingATrimIsToldNotSkipped) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  PutMany(*store, 50'000);
  std::atomic<bool> done{false};
  std::thread trimmer([&] {
    for (Sequence s = 1000; s <= 50'000; s += 1000) {
      ASSERT_TRUE(store->TrimChangeLog(s).ok());
    }
    done = true;
  });
  // Every read either starts exactly after its position or is refused.
  Sequence position = 0;
  int refused = 0;
  while (!done.load() || position < store->last_sequence()) {
    auto entries = store->ReadChanges(position, 5000);
    if (!entries.ok()) {
      ASSERT_TRUE(absl::IsFailedPrecondition(entries.status()));
      ++refused;
      position = store->first_sequence() - 1;
      continue;
    }
    if (entries->empty()) break;
    ASSERT_EQ(entries->front().sequence, position + 1);
    for (size_t i = 1; i < entries->size(); ++i) {
      ASSERT_EQ((*entries)[i].sequence, (*entries)[i - 1].sequence + 1);
    }
    position = entries->back().sequence;
  }
  trimmer.join();
  (void)refused;  // how often depends on scheduling; the order is the test
}

// -------------------------------------------------------- tombstone purge

TEST(TombstonePurge, RemovesOldTombstonesAndTheirLeafEntries) {
  TempDir dir, fresh_dir;
  auto store = OpenOrDie(dir.path());
  PutMany(*store, 20);
  for (int i = 0; i < 10; ++i) {
    Write(*store, Mutation::Delete("ks", absl::StrCat("k", i)));
  }
  EXPECT_EQ(store->GetKeyspace("ks")->row_count, 20u);

  // A horizon before the deletes purges nothing.
  auto purged = store->PurgeTombstones(MillisAgo(60'000), 1000);
  ASSERT_TRUE(purged.ok()) << purged.status();
  EXPECT_EQ(*purged, 0u);

  purged = store->PurgeTombstones(MillisAgo(-1000), 1000);
  ASSERT_TRUE(purged.ok()) << purged.status();
  EXPECT_EQ(*purged, 10u);
  EXPECT_EQ(store->GetKeyspace("ks")->row_count, 10u);
  EXPECT_TRUE(absl::IsNotFound(store->Get("ks", "k3").status()));
  EXPECT_TRUE(store->Get("ks", "k13").ok());
  ExpectSound(*store);

  // The tree is the tree of the live rows alone.
  auto fresh = OpenOrDie(fresh_dir.path(), Options("node-b"));
  for (int i = 10; i < 20; ++i) {
    const std::string key = absl::StrCat("k", i);
    Mutation m = Mutation::Put("ks", key, "v");
    m.version = store->Get("ks", key)->version;
    Write(*fresh, std::move(m));
  }
  EXPECT_EQ(fresh->GetKeyspace("ks")->root, store->GetKeyspace("ks")->root);

  // Survives a reopen (the erase went through the change log).
  store.reset();
  store = OpenOrDie(dir.path());
  EXPECT_EQ(store->GetKeyspace("ks")->row_count, 10u);
  ExpectSound(*store);
}

TEST(TombstonePurge, KeepsNewerTombstonesAndRowsWrittenAgain) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  PutMany(*store, 3);
  Write(*store, Mutation::Delete("ks", "k0"));
  Write(*store, Mutation::Delete("ks", "k1"));
  Write(*store, Mutation::Put("ks", "k1", "back"));  // written again
  const HlcTimestamp horizon = store->clock().Now();
  absl::SleepFor(absl::Milliseconds(5));
  Write(*store, Mutation::Delete("ks", "k2"));  // after the horizon

  auto purged = store->PurgeTombstones(horizon, 1000);
  ASSERT_TRUE(purged.ok()) << purged.status();
  EXPECT_EQ(*purged, 1u);
  EXPECT_TRUE(absl::IsNotFound(store->Get("ks", "k0").status()));
  EXPECT_EQ(store->Get("ks", "k1")->value, "back");
  EXPECT_TRUE(store->Get("ks", "k2")->deleted);
  ExpectSound(*store);
}

TEST(TombstonePurge, HonoursTheLimit) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  PutMany(*store, 30);
  for (int i = 0; i < 30; ++i) {
    Write(*store, Mutation::Delete("ks", absl::StrCat("k", i)));
  }
  EXPECT_EQ(*store->PurgeTombstones(MillisAgo(-1000), 12), 12u);
  EXPECT_EQ(*store->PurgeTombstones(MillisAgo(-1000), 12), 12u);
  EXPECT_EQ(*store->PurgeTombstones(MillisAgo(-1000), 12), 6u);
  EXPECT_EQ(store->GetKeyspace("ks")->row_count, 0u);
  ExpectSound(*store);
}

TEST(TombstonePurge, OldReplicatedTombstonesDoNotComeBack) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  const HlcTimestamp old_time = MillisAgo(10'000);
  Mutation live = Mutation::Put("ks", "live", "v");
  live.version = Version{MillisAgo(20'000), "node-b"};
  Write(*store, std::move(live));
  ASSERT_TRUE(store->PurgeTombstones(MillisAgo(5'000), 1000).ok());

  // A peer that has not purged yet sends its old tombstone: this node has
  // nothing to delete and does not take it.
  Mutation stale = Mutation::Delete("ks", "gone");
  stale.version = Version{old_time, "node-b"};
  WriteRequest request;
  request.mutations.push_back(std::move(stale));
  auto result = store->Write(std::move(request));
  ASSERT_TRUE(result.ok());
  EXPECT_FALSE(result->applied[0]);
  EXPECT_TRUE(absl::IsNotFound(store->Get("ks", "gone").status()));

  // An old tombstone for a row this node still holds deletes it.
  Mutation delete_live = Mutation::Delete("ks", "live");
  delete_live.version = Version{old_time, "node-b"};
  Write(*store, std::move(delete_live));
  EXPECT_TRUE(store->Get("ks", "live")->deleted);

  // A recent tombstone is taken as always.
  Mutation recent = Mutation::Delete("ks", "recent");
  recent.version = Version{MillisAgo(10), "node-b"};
  Write(*store, std::move(recent));
  EXPECT_TRUE(store->Get("ks", "recent")->deleted);
}

TEST(TombstonePurge, PurgeRequestsAreValidated) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  WriteRequest request;
  request.mode = ApplyMode::kPurgeTombstones;
  request.mutations.push_back(Mutation::Delete("ks", "k"));
  auto result = store->Write(std::move(request));
  EXPECT_TRUE(absl::IsInvalidArgument(result.status())) << result.status();

  WriteRequest erase_without_version;
  erase_without_version.mode = ApplyMode::kPurgeTombstones;
  erase_without_version.mutations.push_back(Mutation::Erase("ks", "k"));
  EXPECT_TRUE(absl::IsInvalidArgument(
      store->Write(std::move(erase_without_version)).status()));
}

// A store written before the tombstone index existed gets one at open.
TEST(TombstonePurge, AStoreWithoutTheIndexIsIndexedAtOpen) {
  TempDir dir;
  {
    auto store = OpenOrDie(dir.path());
    PutMany(*store, 5);
    Write(*store, Mutation::Delete("ks", "k1"));
    Write(*store, Mutation::Delete("ks", "k2"));
  }
  {
    // Remove the index and its marker, as an older build left them.
    leveldb::DB* raw = nullptr;
    leveldb::Options options;
    ASSERT_TRUE(leveldb::DB::Open(options, dir.path(), &raw).ok());
    std::unique_ptr<leveldb::DB> db(raw);
    std::unique_ptr<leveldb::Iterator> it(
        db->NewIterator(leveldb::ReadOptions()));
    std::vector<std::string> keys;
    for (it->Seek(std::string(1, internal::kTombstoneTag));
         it->Valid() && it->key()[0] == internal::kTombstoneTag; it->Next()) {
      keys.push_back(it->key().ToString());
    }
    ASSERT_EQ(keys.size(), 2u);
    keys.push_back(
        internal::TaggedKey(internal::kMetaTag, internal::kMetaTombstoneIndex));
    for (const std::string& k : keys) {
      ASSERT_TRUE(db->Delete(leveldb::WriteOptions(), k).ok());
    }
  }
  auto store = OpenOrDie(dir.path());
  EXPECT_EQ(*store->PurgeTombstones(MillisAgo(-1000), 100), 2u);
  EXPECT_EQ(store->GetKeyspace("ks")->row_count, 3u);
  ExpectSound(*store);
}

}  // namespace
}  // namespace storage
}  // namespace tally
