// Durability under disk faults: a full disk, a power loss after it, a
// missing or damaged LevelDB file. Every acknowledged write must be there
// after the store is reopened, and a store must never be created over
// another's files.
#include <leveldb/db.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/internal/fault_injection_env.h"
#include "storage/internal/records.h"
#include "storage/store.h"
#include "support/temp_dir.h"
#include "tests/disk_damage.h"

namespace tally {
namespace storage {
namespace {

using internal::FaultInjectionEnv;
using ::tally::testing::ScopedTmpfs;
using ::tally::testing::TempDir;
using ::testing::HasSubstr;

StoreOptions DurableOptions(leveldb::Env* env) {
  StoreOptions options;
  options.node_name = "node-a";
  options.sync = true;  // what tallyd runs with: acknowledged means synced
  options.default_depth = 8;
  options.env = env;
  return options;
}

absl::Status PutOne(Store& store, const std::string& key,
                    const std::string& value) {
  WriteRequest request;
  request.mutations.push_back(Mutation::Put("ks", key, value));
  return store.Write(std::move(request)).status();
}

// Every acknowledged key has its value in `store`.
void ExpectAllPresent(Store& store,
                      const std::map<std::string, std::string>& acknowledged) {
  size_t missing = 0;
  for (const auto& [key, value] : acknowledged) {
    absl::StatusOr<Row> row = store.Get("ks", key);
    if (!row.ok() || row->value != value) {
      if (++missing <= 3) {
        ADD_FAILURE() << "acknowledged " << key << " is "
                      << (row.ok() ? "changed" : row.status().ToString());
      }
    }
  }
  EXPECT_EQ(missing, 0u) << "of " << acknowledged.size()
                         << " acknowledged writes";
  absl::StatusOr<VerifyReport> report = store.Verify();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok()) << report->problems.front();
}

// A disk-full episode, in process: the disk fills while writes go on, space
// is freed, more writes come, the machine loses power (unsynced bytes are
// dropped), the store is reopened. Before the fix LevelDB's log writer kept
// appending after the failed append at offsets that no longer matched the
// file, and every write acknowledged after the episode was dropped at the
// next open ("checksum mismatch"). Several rounds on one store, with random
// free space, some with a small write buffer so that table files fill the
// disk too.
TEST(StoreDiskFull, AcknowledgedWritesAfterADiskFullEpisodeSurviveReopen) {
  const uint32_t seed = std::random_device()();
  std::printf("seed %u\n", seed);
  std::mt19937 random(seed);
  TempDir dir;
  FaultInjectionEnv env;
  std::map<std::string, std::string> acknowledged;
  int refused_after_failure = 0;
  for (int round = 0; round < 8; ++round) {
    SCOPED_TRACE(absl::StrCat("seed ", seed, " round ", round));
    StoreOptions options = DurableOptions(&env);
    if (round % 2 == 1) options.write_buffer_bytes = 64 * 1024;
    {
      absl::StatusOr<std::unique_ptr<Store>> store =
          Store::Open(dir.path(), options);
      ASSERT_TRUE(store.ok()) << store.status();
      ExpectAllPresent(**store, acknowledged);
      const std::string value(500 + random() % 1500, 'a' + round);
      int i = 0;
      auto put = [&](absl::string_view phase) {
        const std::string key = absl::StrCat("r", round, "-", phase, "-", i++);
        const absl::Status s = PutOne(**store, key, value);
        if (s.ok()) acknowledged[key] = value;
        return s;
      };
      for (int n = 0; n < 50; ++n) ASSERT_TRUE(put("before").ok());
      // The disk fills: write until a write fails.
      env.SetFreeBytes(random() % (200 * 1024));
      absl::Status failure;
      for (int n = 0; n < 100'000 && failure.ok(); ++n) failure = put("full");
      ASSERT_FALSE(failure.ok()) << "the disk never filled";
      // Space is freed; writes go on.
      env.SetFreeBytes(FaultInjectionEnv::kUnlimited);
      for (int n = 0; n < 100; ++n) {
        const absl::Status s = put("after");
        if (!s.ok()) {
          EXPECT_TRUE(absl::IsUnavailable(s)) << s;
          ++refused_after_failure;
        }
      }
    }
    // Power loss: only what was synced survives.
    ASSERT_TRUE(env.DropUnsyncedData().ok());
  }
  absl::StatusOr<std::unique_ptr<Store>> store =
      Store::Open(dir.path(), DurableOptions(nullptr));
  ASSERT_TRUE(store.ok()) << store.status();
  ExpectAllPresent(**store, acknowledged);
  EXPECT_GT(env.failed_appends(), 0u);
  EXPECT_GT(refused_after_failure, 0);
}

// After a failed write the handle refuses every write, naming the first
// failure and what to do, until the store is reopened; reads go on.
TEST(StoreDiskFull, AFailedWriteMakesTheStoreRefuseWritesUntilReopened) {
  TempDir dir;
  FaultInjectionEnv env;
  {
    absl::StatusOr<std::unique_ptr<Store>> store =
        Store::Open(dir.path(), DurableOptions(&env));
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE(PutOne(**store, "kept", "v").ok());
    EXPECT_TRUE((*store)->write_status().ok());
    env.SetFreeBytes(10);
    const absl::Status failed = PutOne(**store, "lost", std::string(4096, 'x'));
    ASSERT_FALSE(failed.ok());
    env.SetFreeBytes(FaultInjectionEnv::kUnlimited);
    const absl::Status refused = PutOne(**store, "refused", "v");
    EXPECT_TRUE(absl::IsUnavailable(refused)) << refused;
    EXPECT_THAT(refused.message(), HasSubstr("No space left on device"));
    EXPECT_THAT(refused.message(), HasSubstr("restart"));
    EXPECT_TRUE(absl::IsUnavailable((*store)->write_status()));
    EXPECT_TRUE(absl::IsUnavailable((*store)->CreateKeyspace("other", 4)));
    absl::StatusOr<Row> row = (*store)->Get("ks", "kept");
    ASSERT_TRUE(row.ok()) << row.status();
    EXPECT_EQ(row->value, "v");
  }
  absl::StatusOr<std::unique_ptr<Store>> store =
      Store::Open(dir.path(), DurableOptions(&env));
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE((*store)->write_status().ok());
  EXPECT_TRUE(PutOne(**store, "after", "v").ok());
  EXPECT_TRUE((*store)->Get("ks", "kept").ok());
  EXPECT_FALSE((*store)->Get("ks", "refused").ok());
}

// The node's maintenance and scrubber go on after a failed write: the
// tombstone purge and the damage marks wrote to LevelDB without asking
// whether writes had failed, so each landed in the log after the cut
// record, and the next open refused the store as damaged ("checksum
// mismatch") although nothing acknowledged was lost. A store that refuses
// writes must write nothing at all until reopened.
TEST(StoreDiskFull, PurgeAndScrubAfterAFailedWriteLeaveTheLogReadable) {
  TempDir dir;
  FaultInjectionEnv env;
  std::map<std::string, std::string> acknowledged;
  {
    absl::StatusOr<std::unique_ptr<Store>> store =
        Store::Open(dir.path(), DurableOptions(&env));
    ASSERT_TRUE(store.ok()) << store.status();
    for (int i = 0; i < 20; ++i) {
      const std::string key = absl::StrCat("k", i);
      ASSERT_TRUE(PutOne(**store, key, "v").ok());
      acknowledged[key] = "v";
    }
    // The append that fills the disk writes a prefix of its record.
    env.SetFreeBytes(100);
    ASSERT_FALSE(PutOne(**store, "lost", std::string(4096, 'x')).ok());
    env.SetFreeBytes(FaultInjectionEnv::kUnlimited);
    const tree::HlcTimestamp now = tree::HlcTimestamp::FromParts(
        static_cast<uint64_t>(absl::ToUnixMillis(absl::Now())), 0);
    // Enough maintenance passes to write past the cut record's length.
    int purges_done = 0;
    for (int i = 0; i < 400; ++i) {
      if ((*store)->PurgeTombstones(now, 1000).ok()) ++purges_done;
      (void)(*store)->ScrubLeaves("ks", 0, 256);
    }
    EXPECT_EQ(purges_done, 0) << "purges ran on a store that refuses writes";
  }
  absl::StatusOr<std::unique_ptr<Store>> store =
      Store::Open(dir.path(), DurableOptions(&env));
  ASSERT_TRUE(store.ok()) << store.status();
  ExpectAllPresent(**store, acknowledged);
}

// The same episode on a real file system that fills up: a small tmpfs.
// Needs root (mount); skipped otherwise.
TEST(StoreDiskFull, AcknowledgedWritesSurviveAFullTmpfs) {
  TempDir dir;
  absl::StatusOr<std::unique_ptr<ScopedTmpfs>> fs =
      ScopedTmpfs::Mount(dir.path() + "/fs", 3 << 20);
  if (!fs.ok()) GTEST_SKIP() << fs.status();
  const std::string& mount_point = (*fs)->path();
  const std::string store_dir = mount_point + "/store";
  const std::string filler = mount_point + "/filler";
  {
    std::ofstream out(filler, std::ios::binary);
    const std::string block(1024 * 1024, 'f');
    out << block;
  }
  std::map<std::string, std::string> acknowledged;
  int refused_after_failure = 0;
  // The default write buffer (32 MiB): the log, not a table, fills the disk.
  const StoreOptions options = DurableOptions(nullptr);
  {
    absl::StatusOr<std::unique_ptr<Store>> store =
        Store::Open(store_dir, options);
    ASSERT_TRUE(store.ok()) << store.status();
    const std::string value(1000, 'v');
    absl::Status failure;
    int i = 0;
    for (; i < 100'000 && failure.ok(); ++i) {
      const std::string key = absl::StrCat("full-", i);
      failure = PutOne(**store, key, value);
      if (failure.ok()) acknowledged[key] = value;
    }
    ASSERT_FALSE(failure.ok()) << "the tmpfs never filled";
    EXPECT_THAT(failure.message(), HasSubstr("No space left on device"));
    std::filesystem::remove(filler);
    for (int n = 0; n < 100; ++n) {
      const std::string key = absl::StrCat("after-", n);
      const absl::Status s = PutOne(**store, key, value);
      if (s.ok()) {
        acknowledged[key] = value;
      } else {
        ++refused_after_failure;
      }
    }
  }
  absl::StatusOr<std::unique_ptr<Store>> store =
      Store::Open(store_dir, options);
  ASSERT_TRUE(store.ok()) << store.status();
  ExpectAllPresent(**store, acknowledged);
  EXPECT_TRUE(PutOne(**store, "reopened", "v").ok());
  EXPECT_GT(refused_after_failure, 0);
}

std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> LogsIn(const std::string& dir) {
  std::vector<std::string> logs;
  for (const std::string& name : FilesIn(dir)) {
    if (absl::EndsWith(name, ".log")) logs.push_back(dir + "/" + name);
  }
  return logs;
}

std::string OnlyLogIn(const std::string& dir) {
  std::string log;
  for (const std::string& name : FilesIn(dir)) {
    if (absl::EndsWith(name, ".log")) {
      EXPECT_TRUE(log.empty()) << "two logs: " << log << ", " << name;
      log = dir + "/" + name;
    }
  }
  EXPECT_FALSE(log.empty());
  return log;
}

// Writes `n` rows, one commit each, overwriting and deleting some, and
// returns what the store holds.
std::map<std::string, std::string> WriteRows(Store& store, int n) {
  std::map<std::string, std::string> rows;
  for (int i = 0; i < n; ++i) {
    const std::string key = absl::StrCat("key-", i % (n / 2 + 1));
    if (i % 7 == 6) {
      WriteRequest request;
      request.mutations.push_back(Mutation::Delete("ks", key));
      EXPECT_TRUE(store.Write(std::move(request)).ok());
      rows.erase(key);
    } else {
      const std::string value =
          absl::StrCat("value-", i, std::string(200, 'v'));
      EXPECT_TRUE(PutOne(store, key, value).ok());
      rows[key] = value;
    }
  }
  return rows;
}

void ExpectSoundAndWritable(Store& store) {
  absl::StatusOr<VerifyReport> report = store.Verify();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok()) << report->problems.size() << " problems, first "
                            << report->problems.front();
  EXPECT_TRUE(PutOne(store, "after-recovery", "v").ok());
}

// A lost CURRENT: the 16-byte CURRENT file deleted. Before the fix LevelDB made
// a new, empty store in the directory and deleted the old tables.
TEST(StoreDirectory, AMissingCurrentFileIsRefusedAndNothingIsDeleted) {
  TempDir dir;
  StoreOptions options = DurableOptions(nullptr);
  options.write_buffer_bytes = 64 * 1024;  // several tables
  std::map<std::string, std::string> rows;
  {
    absl::StatusOr<std::unique_ptr<Store>> store =
        Store::Open(dir.path(), options);
    ASSERT_TRUE(store.ok()) << store.status();
    rows = WriteRows(**store, 3000);
  }
  ASSERT_TRUE(std::filesystem::remove(dir.path() + "/CURRENT"));
  const std::vector<std::string> files = FilesIn(dir.path());

  absl::StatusOr<std::unique_ptr<Store>> refused =
      Store::Open(dir.path(), options);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("CURRENT file is missing"));
  EXPECT_THAT(refused.status().message(),
              HasSubstr("tally recover --data-dir " + dir.path()));
  EXPECT_EQ(FilesIn(dir.path()), files) << "the refusal changed the directory";

  ASSERT_TRUE(RepairStore(dir.path(), options).ok());
  absl::StatusOr<std::unique_ptr<Store>> store =
      Store::Open(dir.path(), options);
  ASSERT_TRUE(store.ok()) << store.status();
  for (const auto& [key, value] : rows) {
    absl::StatusOr<Row> row = (*store)->Get("ks", key);
    ASSERT_TRUE(row.ok()) << key << ": " << row.status();
    EXPECT_EQ(row->value, value);
  }
  ExpectSoundAndWritable(**store);
}

TEST(StoreDirectory, ADirectoryWithOtherFilesGetsNoStore) {
  TempDir dir;
  { std::ofstream(dir.path() + "/notes.txt") << "not a store\n"; }
  absl::StatusOr<std::unique_ptr<Store>> store =
      Store::Open(dir.path(), DurableOptions(nullptr));
  ASSERT_FALSE(store.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(store.status())) << store.status();
  EXPECT_THAT(store.status().message(), HasSubstr("notes.txt"));
  EXPECT_THAT(store.status().message(), HasSubstr("empty or new directory"));
  EXPECT_EQ(FilesIn(dir.path()), std::vector<std::string>{"notes.txt"});
}

// A file system's own root holds lost+found (ext4 makes it at mkfs): a
// data directory that is a fresh disk's mount point is empty to an
// operator, and the refusal of foreign files must not refuse it.
TEST(StoreDirectory, AFreshFileSystemsLostAndFoundIsNoStore) {
  TempDir dir;
  std::filesystem::create_directory(dir.path() + "/lost+found");
  absl::StatusOr<std::unique_ptr<Store>> store =
      Store::Open(dir.path(), DurableOptions(nullptr));
  ASSERT_TRUE(store.ok()) << store.status();
  ExpectSoundAndWritable(**store);
}

TEST(StoreDirectory, AnEmptyOrNewDirectoryGetsANewStore) {
  TempDir dir;
  for (const std::string& path : {dir.path(), dir.path() + "/new/store"}) {
    absl::StatusOr<std::unique_ptr<Store>> store =
        Store::Open(path, DurableOptions(nullptr));
    ASSERT_TRUE(store.ok()) << path << ": " << store.status();
    EXPECT_TRUE(PutOne(**store, "k", "v").ok());
  }
}

// A damaged log: LevelDB used to drop the records it could not read at
// open, and the node started without them. Now the open fails, naming the
// recovery; after RepairStore the store opens, sound, without what was lost.
TEST(StoreDamagedLog, ADamagedLogIsRefusedUntilRecovered) {
  TempDir dir;
  const StoreOptions options = DurableOptions(nullptr);
  std::map<std::string, std::string> rows;
  {
    absl::StatusOr<std::unique_ptr<Store>> store =
        Store::Open(dir.path(), options);
    ASSERT_TRUE(store.ok()) << store.status();
    rows = WriteRows(**store, 600);
  }
  const std::string log = OnlyLogIn(dir.path());
  const uintmax_t size = std::filesystem::file_size(log);
  ASSERT_GT(size, 3 * 32768u);
  {
    std::fstream f(log, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size / 3));
    f.write("\xde\xad\xbe\xef", 4);
  }
  absl::StatusOr<std::unique_ptr<Store>> refused =
      Store::Open(dir.path(), options);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsDataLoss(refused.status())) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("is damaged"));
  EXPECT_THAT(refused.status().message(), HasSubstr("tally recover"));

  ASSERT_TRUE(RepairStore(dir.path(), options).ok());
  absl::StatusOr<std::unique_ptr<Store>> store =
      Store::Open(dir.path(), options);
  ASSERT_TRUE(store.ok()) << store.status();
  ExpectSoundAndWritable(**store);
}

// A deleted log loses the writes since the last table; LevelDB opened the
// store without them and it looked sound. A store always has a log, so its
// absence is refused.
TEST(StoreDamagedLog, ADeletedLogIsRefusedUntilRecovered) {
  TempDir dir;
  StoreOptions options = DurableOptions(nullptr);
  options.write_buffer_bytes = 64 * 1024;
  {
    absl::StatusOr<std::unique_ptr<Store>> store =
        Store::Open(dir.path(), options);
    ASSERT_TRUE(store.ok()) << store.status();
    WriteRows(**store, 1000);
  }
  // Usually one log; two when the close interrupted a table write (the old
  // log stays until its table is written).
  const std::vector<std::string> logs = LogsIn(dir.path());
  ASSERT_FALSE(logs.empty());
  for (const std::string& log : logs) {
    ASSERT_TRUE(std::filesystem::remove(log));
  }
  absl::StatusOr<std::unique_ptr<Store>> refused =
      Store::Open(dir.path(), options);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsDataLoss(refused.status())) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("no LevelDB log"));
  EXPECT_THAT(refused.status().message(), HasSubstr("tally recover"));

  ASSERT_TRUE(RepairStore(dir.path(), options).ok());
  absl::StatusOr<std::unique_ptr<Store>> store =
      Store::Open(dir.path(), options);
  ASSERT_TRUE(store.ok()) << store.status();
  ExpectSoundAndWritable(**store);
}

TEST(StoreRepair, RefusesALockedOrEmptyDirectory) {
  TempDir dir;
  EXPECT_TRUE(absl::IsNotFound(
      RepairStore(dir.path(), DurableOptions(nullptr)).status()));
  absl::StatusOr<std::unique_ptr<Store>> store =
      Store::Open(dir.path(), DurableOptions(nullptr));
  ASSERT_TRUE(store.ok()) << store.status();
  const absl::StatusOr<RepairReport> locked =
      RepairStore(dir.path(), DurableOptions(nullptr));
  EXPECT_TRUE(absl::IsUnavailable(locked.status())) << locked.status();
}

// RepairDB reads logs without checksums, so a damaged record can come back
// with a wrong value: such a row is removed (a peer's copy replaces it),
// never kept under a digest it does not match.
TEST(StoreRepair, RowsThatDoNotMatchTheirDigestAreRemoved) {
  TempDir dir;
  const StoreOptions options = DurableOptions(nullptr);
  {
    absl::StatusOr<std::unique_ptr<Store>> store =
        Store::Open(dir.path(), options);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE(PutOne(**store, "good", "v").ok());
    ASSERT_TRUE(PutOne(**store, "bad", "original").ok());
  }
  {
    leveldb::DB* raw = nullptr;
    leveldb::Options ldb;
    ASSERT_TRUE(leveldb::DB::Open(ldb, dir.path(), &raw).ok());
    std::unique_ptr<leveldb::DB> db(raw);
    const std::string row_key =
        internal::RowKey(1, tree::TokenOf("bad"), "bad");
    std::string record;
    ASSERT_TRUE(db->Get(leveldb::ReadOptions(), row_key, &record).ok());
    record.back() ^= 0x20;  // one bit of the value
    ASSERT_TRUE(db->Put(leveldb::WriteOptions(), row_key, record).ok());
  }
  absl::StatusOr<RepairReport> repaired = RepairStore(dir.path(), options);
  ASSERT_TRUE(repaired.ok()) << repaired.status();
  EXPECT_EQ(repaired->rows_removed, 1u);
  EXPECT_TRUE(repaired->damaged_tables.empty());
  absl::StatusOr<std::unique_ptr<Store>> store =
      Store::Open(dir.path(), options);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE(absl::IsNotFound((*store)->Get("ks", "bad").status()));
  EXPECT_TRUE((*store)->Get("ks", "good").ok());
  ExpectSoundAndWritable(**store);
}

}  // namespace
}  // namespace storage
}  // namespace tally
