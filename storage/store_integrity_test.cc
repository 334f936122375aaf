// Damage on disk and clocks that disagree: a byte flipped inside a table
// file must never be served nor hidden from anti-entropy, and a tombstone
// written by a node whose clock runs behind must not be purged early.
#include <leveldb/db.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/internal/coding.h"
#include "storage/internal/records.h"
#include "storage/store.h"
#include "support/temp_dir.h"
#include "tests/disk_damage.h"

namespace tally {
namespace storage {
namespace {

using ::tally::testing::FlipByteInTable;
using ::tally::testing::TempDir;
using ::testing::HasSubstr;

StoreOptions Options(const std::string& name = "node-a") {
  StoreOptions options;
  options.node_name = name;
  options.sync = false;
  options.default_depth = 10;
  return options;
}

std::unique_ptr<Store> OpenOrDie(const std::string& dir,
                                 StoreOptions options = Options()) {
  auto store = Store::Open(dir, std::move(options));
  EXPECT_TRUE(store.ok()) << store.status();
  return std::move(store).value();
}

// Incompressible, so that a flipped byte in a table stays one.
std::string ValueOf(int i) {
  return ::tally::testing::IncompressibleValue(1000 + i, 48,
                                               absl::StrCat("value-", i, "-"));
}

// Writes `rows` rows and closes the store twice, so that they sit in a
// table file (an open turns the log into a level-0 table).
void WriteRowsToTables(const std::string& dir, int rows) {
  {
    auto store = OpenOrDie(dir);
    WriteRequest request;
    for (int i = 0; i < rows; ++i) {
      request.mutations.push_back(
          Mutation::Put("ks", absl::StrCat("k", i), ValueOf(i)));
    }
    ASSERT_TRUE(store->Write(std::move(request)).ok());
  }
  OpenOrDie(dir);
}

tree::Digest128 RootOf(Store& store) {
  auto info = store.GetKeyspace("ks");
  EXPECT_TRUE(info.ok()) << info.status();
  return info->root;
}

// A flipped byte in a table must cost that row, not the store's writes:
// LevelDB's paranoid checks, if kept on after the open, fail the first
// compaction that reads the damaged block, and a failed compaction makes
// LevelDB refuse every later write (the node would stop taking writes
// until `tally recover`, and again at every restart).
TEST(StoreCorruption, AFlippedByteInATableDoesNotStopWritesWhenCompacted) {
  TempDir dir;
  StoreOptions options = Options();
  options.write_buffer_bytes = 64 * 1024;  // many small tables: compactions
  // No block cache: a block cached by an unchecked read would hide the
  // damage from the compaction, which happens in production only by luck.
  options.block_cache_bytes = 0;
  const std::string filler(200, 'x');
  auto fill = [&](Store& store, int batches, const std::string& tag) {
    for (int batch = 0; batch < batches; ++batch) {
      WriteRequest request;
      for (int i = 0; i < 500; ++i) {
        request.mutations.push_back(
            Mutation::Put("ks", absl::StrCat(tag, "-", batch, "-", i), filler));
      }
      absl::StatusOr<WriteResult> written = store.Write(std::move(request));
      ASSERT_TRUE(written.ok())
          << tag << " " << batch << ": " << written.status();
    }
  };
  // Tables over the whole token range first, so that the table holding the
  // rows below stays at level 0 and the next compaction reads it.
  fill(*OpenOrDie(dir.path(), options), 10, "before");
  WriteRowsToTables(dir.path(), 50);
  ASSERT_TRUE(FlipByteInTable(dir.path(), ValueOf(7)));

  auto store = OpenOrDie(dir.path(), options);
  fill(*store, 200, "after");
  EXPECT_TRUE(store->write_status().ok()) << store->write_status();
  // The damaged row is still not served.
  EXPECT_EQ(store->Get("ks", "k7").status().code(),
            absl::StatusCode::kDataLoss);
}

// A block LevelDB cannot decode at all (a run of bad bytes inside a
// compressed block) fails every compaction that reads it, and LevelDB then
// refuses every write. Before, the store said nothing of it: writes and
// sessions failed with DATA_LOSS for good, at every restart, until an
// operator ran `tally recover`. Now the store reports it (callback and the
// damaged-tables file), and RepairStore salvages the table and clears it;
// every acknowledged write survives.
TEST(StoreCorruption, AnUndecodableBlockIsReportedAndSalvagedByRepair) {
  TempDir dir;
  StoreOptions options = Options();
  options.write_buffer_bytes = 64 * 1024;
  options.block_cache_bytes = 0;
  const std::string filler(200, 'x');  // compressible: snappy blocks
  std::vector<std::string> acknowledged;
  auto fill = [&](Store& store, int batches, const std::string& tag) {
    for (int batch = 0; batch < batches; ++batch) {
      WriteRequest request;
      std::vector<std::string> keys;
      for (int i = 0; i < 500; ++i) {
        keys.push_back(absl::StrCat(tag, "-", batch, "-", i));
        request.mutations.push_back(Mutation::Put("ks", keys.back(), filler));
      }
      if (!store.Write(std::move(request)).ok()) return false;
      acknowledged.insert(acknowledged.end(), keys.begin(), keys.end());
    }
    return true;
  };
  ASSERT_TRUE(fill(*OpenOrDie(dir.path(), options), 20, "before"));
  OpenOrDie(dir.path(), options);  // the log into a table
  // The first flush's table, mid-way: rows (the leaves are checkpointed
  // into later tables at each close).
  ASSERT_EQ(::tally::testing::InvertByteRun(dir.path(), 20000, 64,
                                            /*oldest_only=*/true),
            1);
  ASSERT_FALSE(TablesReportedDamaged(dir.path()));

  std::atomic<int> reported{0};
  StoreOptions reporting = options;
  reporting.on_table_damage = [&](const absl::Status& status) {
    EXPECT_TRUE(absl::IsDataLoss(status)) << status;
    reported.fetch_add(1);
  };
  {
    auto store = OpenOrDie(dir.path(), reporting);
    // Writes go on until one reads the damaged block (its row's lookup,
    // before it writes) or a compaction does (LevelDB then refuses every
    // write).
    EXPECT_FALSE(fill(*store, 400, "after"));
  }
  EXPECT_EQ(reported.load(), 1);
  ASSERT_TRUE(TablesReportedDamaged(dir.path()));

  absl::StatusOr<RepairReport> repaired = RepairStore(dir.path(), options);
  ASSERT_TRUE(repaired.ok()) << repaired.status();
  EXPECT_FALSE(repaired->damaged_tables.empty());
  EXPECT_FALSE(TablesReportedDamaged(dir.path()));

  auto store = OpenOrDie(dir.path(), reporting);
  ASSERT_TRUE(fill(*store, 200, "again"));
  EXPECT_TRUE(store->write_status().ok()) << store->write_status();
  EXPECT_EQ(reported.load(), 1);
  absl::StatusOr<VerifyReport> verified = store->Verify();
  ASSERT_TRUE(verified.ok()) << verified.status();
  EXPECT_TRUE(verified->ok()) << verified->problems.front();
  // Every acknowledged write after the damage is there (the rows of the
  // damaged blocks, written before it, come back from peers).
  for (const std::string& key : acknowledged) {
    if (absl::StartsWith(key, "before")) continue;
    ASSERT_TRUE(store->Get("ks", key).ok()) << key;
  }
}

TEST(StoreCorruption, FlippedValueByteInATableIsNotServed) {
  TempDir dir;
  WriteRowsToTables(dir.path(), 50);
  tree::Digest128 sound_root;
  Row sound;
  {
    auto store = OpenOrDie(dir.path());
    sound_root = RootOf(*store);
    sound = store->Get("ks", "k7").value();
  }
  ASSERT_TRUE(FlipByteInTable(dir.path(), ValueOf(7)));

  auto store = OpenOrDie(dir.path());
  absl::StatusOr<Row> row = store->Get("ks", "k7");
  EXPECT_EQ(row.status().code(), absl::StatusCode::kDataLoss)
      << (row.ok() ? row->value : "");
  EXPECT_THAT(row.status().message(), HasSubstr("damaged"));
  // Asked again: still refused, never the damaged value.
  EXPECT_EQ(store->Get("ks", "k7").status().code(),
            absl::StatusCode::kDataLoss);
  // The rest of the table is served.
  for (int i = 0; i < 50; ++i) {
    if (i == 7) continue;
    absl::StatusOr<Row> other = store->Get("ks", absl::StrCat("k", i));
    ASSERT_TRUE(other.ok()) << i << ": " << other.status();
    EXPECT_EQ(other->value, ValueOf(i));
  }
  // The tree no longer claims the row, so anti-entropy sees a difference.
  EXPECT_NE(RootOf(*store), sound_root);
  EXPECT_EQ(store->GetKeyspace("ks")->row_count, 49u);
  auto report = store->Verify();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_FALSE(report->ok());
}

TEST(StoreCorruption, APeersCopyOfTheSameVersionReplacesADamagedRow) {
  TempDir dir;
  WriteRowsToTables(dir.path(), 50);
  tree::Digest128 sound_root;
  Row sound;
  {
    auto store = OpenOrDie(dir.path());
    sound_root = RootOf(*store);
    sound = store->Get("ks", "k7").value();
  }
  ASSERT_TRUE(FlipByteInTable(dir.path(), ValueOf(7)));
  auto store = OpenOrDie(dir.path());
  ASSERT_EQ(store->Get("ks", "k7").status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(store->damaged_rows(), 1u);

  // What anti-entropy applies: the peer's row, with the very version the
  // damaged copy carries. Last writer wins alone would refuse it.
  Mutation m = Mutation::Put("ks", "k7", sound.value);
  m.version = sound.version;
  WriteRequest request;
  request.mutations.push_back(std::move(m));
  auto result = store->Write(std::move(request));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->applied[0]);

  auto row = store->Get("ks", "k7");
  ASSERT_TRUE(row.ok()) << row.status();
  EXPECT_EQ(row->value, ValueOf(7));
  EXPECT_EQ(RootOf(*store), sound_root);
  EXPECT_EQ(store->damaged_rows(), 0u);
  auto report = store->Verify();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok()) << report->problems.front();
  // The mark is durable and cleared durably.
  store.reset();
  store = OpenOrDie(dir.path());
  EXPECT_EQ(store->Get("ks", "k7")->value, ValueOf(7));
  EXPECT_EQ(store->damaged_rows(), 0u);
}

// 50 rows of "ks" in table files, "k7"'s record then overwritten with one
// that does not decode (its origin, in its header, is lost with it).
void StoreWithAnUndecodableK7(const std::string& dir) {
  WriteRowsToTables(dir, 50);
  leveldb::DB* db = nullptr;
  ASSERT_TRUE(leveldb::DB::Open(leveldb::Options(), dir, &db).ok());
  std::unique_ptr<leveldb::DB> owned(db);
  // Keyspace "ks" is the store's first: id 1.
  ASSERT_TRUE(owned
                  ->Put(leveldb::WriteOptions(),
                        internal::RowKey(1, tree::TokenOf("k7"), "k7"), "x")
                  .ok());
}

// A damaged row whose record does not even decode has an unknown origin:
// the peer's copy that replaces it cannot take it off its origin's count.
// Before, that origin kept one row too many for good and `tally verify`
// stayed unsound; now the count is corrected by a recount (the maintenance
// loop's, or the next open's).
TEST(StoreCorruption, ReplacingARowOfUnknownOriginCorrectsTheOriginCounts) {
  TempDir dir;
  ASSERT_NO_FATAL_FAILURE(StoreWithAnUndecodableK7(dir.path()));
  auto store = OpenOrDie(dir.path());
  ASSERT_EQ(store->Get("ks", "k7").status().code(),
            absl::StatusCode::kDataLoss);
  ASSERT_EQ(store->damaged_rows(), 1u);

  // The peer's copy, written by another origin.
  Mutation m = Mutation::Put("ks", "k7", ValueOf(7));
  m.version = tree::Version{
      tree::HlcTimestamp::FromParts(
          static_cast<uint64_t>(absl::ToUnixMillis(absl::Now())), 0),
      "node-b"};
  WriteRequest request;
  request.mutations.push_back(std::move(m));
  auto written = store->Write(std::move(request));
  ASSERT_TRUE(written.ok()) << written.status();
  ASSERT_TRUE(written->applied[0]);
  EXPECT_EQ(store->damaged_rows(), 0u);
  auto report = store->Verify();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_FALSE(report->ok()) << "node-a still counts the replaced row";

  auto recounted = store->RecountOriginRows();
  ASSERT_TRUE(recounted.ok()) << recounted.status();
  EXPECT_EQ(*recounted, 1u);  // node-a's count
  report = store->Verify();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok()) << report->problems.front();
  EXPECT_EQ(*store->RecountOriginRows(), 0u);  // nothing more to do

  // Sound after a restart too.
  store.reset();
  store = OpenOrDie(dir.path());
  report = store->Verify();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok()) << report->problems.front();
}

// The same when the store restarts before the recount: the open recounts.
TEST(StoreCorruption, AnOpenRecountsTheOriginsAfterARowOfUnknownOrigin) {
  TempDir dir;
  ASSERT_NO_FATAL_FAILURE(StoreWithAnUndecodableK7(dir.path()));
  {
    auto store = OpenOrDie(dir.path());
    ASSERT_EQ(store->Get("ks", "k7").status().code(),
              absl::StatusCode::kDataLoss);
    WriteRequest request;
    request.mutations.push_back(Mutation::Put("ks", "k7", "local"));
    ASSERT_TRUE(store->Write(std::move(request)).ok());
  }
  auto store = OpenOrDie(dir.path());
  auto report = store->Verify();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok()) << report->problems.front();
}

TEST(StoreCorruption, ReadingEveryRowNeverServesAFlippedValue) {
  TempDir dir;
  WriteRowsToTables(dir.path(), 50);
  ASSERT_TRUE(FlipByteInTable(dir.path(), ValueOf(7)));
  auto store = OpenOrDie(dir.path());
  // Every row of the keyspace, by key: the sound ones are served, the
  // damaged one answers kDataLoss.
  auto read_all = [&store](std::vector<std::string>* served) {
    std::vector<absl::StatusCode> damaged;
    for (int i = 0; i < 50; ++i) {
      auto row = store->Get("ks", absl::StrCat("k", i));
      if (row.ok()) {
        served->push_back(row->value);
      } else {
        damaged.push_back(row.status().code());
      }
    }
    return damaged;
  };
  std::vector<std::string> served;
  EXPECT_THAT(read_all(&served),
              ::testing::ElementsAre(absl::StatusCode::kDataLoss));
  EXPECT_EQ(served.size(), 49u);
  EXPECT_THAT(
      served,
      ::testing::Not(::testing::Contains(::testing::HasSubstr("value-7-"))));
  // Once marked, a read still says so rather than skip the row quietly.
  EXPECT_EQ(store->damaged_rows(), 1u);
  served.clear();
  EXPECT_THAT(read_all(&served),
              ::testing::ElementsAre(absl::StatusCode::kDataLoss));
  EXPECT_EQ(store->Get("ks", "k7").status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(StoreCorruption, TreeViewLeavesADamagedRowOutOfItsListing) {
  TempDir dir;
  WriteRowsToTables(dir.path(), 50);
  ASSERT_TRUE(FlipByteInTable(dir.path(), ValueOf(7)));
  auto store = OpenOrDie(dir.path());
  auto view = store->NewTreeView("ks");
  ASSERT_TRUE(view.ok());
  std::vector<std::string> keys;
  ASSERT_TRUE((*view)
                  ->Scan({tree::NodeRef{0, 0}},
                         [&](const tree::RowEntry& e) {
                           keys.push_back(e.key);
                           return absl::OkStatus();
                         })
                  .ok());
  EXPECT_EQ(keys.size(), 49u);
  EXPECT_THAT(keys, ::testing::Not(::testing::Contains("k7")));
  EXPECT_EQ(store->damaged_rows(), 1u);
}

TEST(StoreCorruption, ScrubFindsAFlippedValueNobodyReadAndCorrectsItsLeaf) {
  TempDir dir;
  WriteRowsToTables(dir.path(), 50);
  tree::Digest128 sound_root;
  {
    auto store = OpenOrDie(dir.path());
    sound_root = RootOf(*store);
  }
  ASSERT_TRUE(FlipByteInTable(dir.path(), ValueOf(23)));
  auto store = OpenOrDie(dir.path());
  EXPECT_EQ(RootOf(*store), sound_root);  // nothing read it yet
  ScrubReport total;
  for (uint64_t leaf = 0; leaf < 1024; leaf += 100) {
    auto report = store->ScrubLeaves("ks", leaf, 100);
    ASSERT_TRUE(report.ok()) << report.status();
    total.leaves += report->leaves;
    total.rows_checked += report->rows_checked;
    total.damaged_rows += report->damaged_rows;
    total.leaves_repaired += report->leaves_repaired;
  }
  EXPECT_EQ(total.leaves, 1024u);
  EXPECT_EQ(total.rows_checked, 50u);
  EXPECT_EQ(total.damaged_rows, 1u);
  EXPECT_EQ(total.leaves_repaired, 1u);
  EXPECT_NE(RootOf(*store), sound_root);
  EXPECT_EQ(store->Get("ks", "k23").status().code(),
            absl::StatusCode::kDataLoss);
  // A second pass finds nothing new.
  auto again = store->ScrubLeaves("ks", 0, 1024);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->damaged_rows, 0u);
  EXPECT_EQ(again->leaves_repaired, 0u);
  // The corrected leaf survives a restart.
  const tree::Digest128 scrubbed_root = RootOf(*store);
  store.reset();
  store = OpenOrDie(dir.path());
  EXPECT_EQ(RootOf(*store), scrubbed_root);
  EXPECT_EQ(store->damaged_rows(), 1u);
}

// ------------------------------------------------------- clocks and purge

constexpr int kSlowBySeconds = 600;

TEST(StoreTombstonePurge, TombstonesOfASlowClockAreAgedByTheirArrival) {
  TempDir dir;
  uint64_t now_millis = static_cast<uint64_t>(absl::ToUnixMillis(absl::Now()));
  StoreOptions options = Options();
  options.physical_clock = [&now_millis] { return now_millis; };
  auto store = OpenOrDie(dir.path(), options);
  // 50 rows, then their deletes from a node whose clock is 600 s behind:
  // the tombstones carry timestamps 600 s old the moment they arrive.
  for (int i = 0; i < 50; ++i) {
    Mutation put = Mutation::Put("ks", absl::StrCat("k", i), "v");
    put.version = tree::Version{
        tree::HlcTimestamp::FromParts(now_millis - 2000 * 1000, 0), "slow"};
    Mutation del = Mutation::Delete("ks", absl::StrCat("k", i));
    del.version = tree::Version{
        tree::HlcTimestamp::FromParts(now_millis - kSlowBySeconds * 1000, 0),
        "slow"};
    WriteRequest request;
    request.mutations.push_back(std::move(put));
    request.mutations.push_back(std::move(del));
    ASSERT_TRUE(store->Write(std::move(request)).ok());
  }
  // 30 s later, with a one-minute minimum age, none may go: they have
  // been here 30 s, whatever their timestamps say.
  now_millis += 30 * 1000;
  auto purged = store->PurgeTombstones(
      tree::HlcTimestamp::FromParts(now_millis - 60 * 1000, 0), 1000);
  ASSERT_TRUE(purged.ok()) << purged.status();
  EXPECT_EQ(*purged, 0u);
  EXPECT_TRUE(store->Get("ks", "k3")->deleted);
  // Once they have been here long enough, they go.
  now_millis += 60 * 1000;
  purged = store->PurgeTombstones(
      tree::HlcTimestamp::FromParts(now_millis - 60 * 1000, 0), 1000);
  ASSERT_TRUE(purged.ok()) << purged.status();
  EXPECT_EQ(*purged, 50u);
  EXPECT_EQ(store->Get("ks", "k3").status().code(),
            absl::StatusCode::kNotFound);
  auto report = store->Verify();
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok());
}

TEST(StoreTombstonePurge, ARewrittenTombstoneIsPurgedByItsOwnArrival) {
  TempDir dir;
  uint64_t now_millis = static_cast<uint64_t>(absl::ToUnixMillis(absl::Now()));
  StoreOptions options = Options();
  options.physical_clock = [&now_millis] { return now_millis; };
  auto store = OpenOrDie(dir.path(), options);
  auto write = [&](Mutation m) {
    WriteRequest request;
    request.mutations.push_back(std::move(m));
    ASSERT_TRUE(store->Write(std::move(request)).ok());
  };
  write(Mutation::Put("ks", "k", "v1"));
  write(Mutation::Delete("ks", "k"));
  now_millis += 100 * 1000;
  write(Mutation::Put("ks", "k", "v2"));
  write(Mutation::Delete("ks", "k"));
  // The first tombstone's index record is stale; the second is young.
  auto purged = store->PurgeTombstones(
      tree::HlcTimestamp::FromParts(now_millis - 50 * 1000, 0), 1000);
  ASSERT_TRUE(purged.ok()) << purged.status();
  EXPECT_EQ(*purged, 0u);
  EXPECT_TRUE(store->Get("ks", "k")->deleted);
  now_millis += 100 * 1000;
  purged = store->PurgeTombstones(
      tree::HlcTimestamp::FromParts(now_millis - 50 * 1000, 0), 1000);
  ASSERT_TRUE(purged.ok()) << purged.status();
  EXPECT_EQ(*purged, 1u);
}

// A store whose index is keyed by the tombstones' own timestamps (an older
// build) is rekeyed at open, every tombstone counted as arriving then: none
// is purged earlier than its arrival here allows.
TEST(StoreTombstonePurge, AnIndexByTimestampIsRekeyedByArrivalAtOpen) {
  TempDir dir;
  uint64_t now_millis = static_cast<uint64_t>(absl::ToUnixMillis(absl::Now()));
  StoreOptions options = Options();
  options.physical_clock = [&now_millis] { return now_millis; };
  {
    auto store = OpenOrDie(dir.path(), options);
    for (int i = 0; i < 10; ++i) {
      Mutation del = Mutation::Delete("ks", absl::StrCat("k", i));
      del.version = tree::Version{
          tree::HlcTimestamp::FromParts(now_millis - kSlowBySeconds * 1000, i),
          "slow"};
      WriteRequest request;
      request.mutations.push_back(std::move(del));
      ASSERT_TRUE(store->Write(std::move(request)).ok());
    }
  }
  {
    // Rewrite the index as the older build kept it.
    leveldb::DB* raw = nullptr;
    ASSERT_TRUE(leveldb::DB::Open(leveldb::Options(), dir.path(), &raw).ok());
    std::unique_ptr<leveldb::DB> db(raw);
    std::unique_ptr<leveldb::Iterator> it(
        db->NewIterator(leveldb::ReadOptions()));
    std::vector<std::pair<std::string, std::string>> records;
    for (it->Seek(std::string(1, internal::kTombstoneTag));
         it->Valid() && it->key()[0] == internal::kTombstoneTag; it->Next()) {
      records.emplace_back(it->key().ToString(), it->value().ToString());
    }
    ASSERT_EQ(records.size(), 10u);
    for (const auto& [key, value] : records) {
      tree::HlcTimestamp timestamp;
      ASSERT_TRUE(internal::DecodeTombstoneValue(value, &timestamp));
      internal::ParsedTombstoneKey index;
      ASSERT_TRUE(internal::ParseTombstoneKey(key, &index));
      ASSERT_TRUE(db->Delete(leveldb::WriteOptions(), key).ok());
      ASSERT_TRUE(db->Put(leveldb::WriteOptions(),
                          internal::TombstoneKey(timestamp, index.row_key), "")
                      .ok());
    }
    ASSERT_TRUE(db->Delete(leveldb::WriteOptions(),
                           internal::TaggedKey(internal::kMetaTag,
                                               internal::kMetaTombstoneArrival))
                    .ok());
  }
  now_millis += 30 * 1000;
  auto store = OpenOrDie(dir.path(), options);
  // By their timestamps they are 630 s old; they arrived (as far as this
  // store knows) at the open, 0 s ago.
  auto purged = store->PurgeTombstones(
      tree::HlcTimestamp::FromParts(now_millis - 60 * 1000, 0), 1000);
  ASSERT_TRUE(purged.ok()) << purged.status();
  EXPECT_EQ(*purged, 0u);
  now_millis += 61 * 1000;
  purged = store->PurgeTombstones(
      tree::HlcTimestamp::FromParts(now_millis - 60 * 1000, 0), 1000);
  ASSERT_TRUE(purged.ok()) << purged.status();
  EXPECT_EQ(*purged, 10u);
  auto report = store->Verify();
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok());
}

}  // namespace
}  // namespace storage
}  // namespace tally
