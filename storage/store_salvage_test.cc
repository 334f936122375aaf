// Recovering a store whose table files have damaged bytes (RepairStore,
// CheckTableFiles). Before the fix LevelDB's own repair read the damaged
// blocks unchecked and died on one of its assertions (key order) halfway
// through, having already turned the log into a table, so the store was
// left worse than it was found; verify read garbage keys or aborted.
#include <leveldb/db.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/internal/records.h"
#include "storage/store.h"
#include "support/temp_dir.h"
#include "tests/disk_damage.h"

namespace tally {
namespace storage {
namespace {

using ::tally::testing::TempDir;
using ::testing::HasSubstr;

constexpr char kKeyspace[] = "users";

StoreOptions Options() {
  StoreOptions options;
  options.node_name = "node-a";
  options.default_depth = 8;
  // Small tables, so that one store has many of them.
  options.write_buffer_bytes = 64 * 1024;
  return options;
}

StoreOptions Adopting() {
  StoreOptions options = Options();
  options.node_name.clear();  // the stored name
  return options;
}

// A closed store of `n` rows in kKeyspace, in several table files; returns
// its rows.
std::map<std::string, std::string> MakeStore(const std::string& dir, int n) {
  std::map<std::string, std::string> rows;
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(dir, Options());
  EXPECT_TRUE(store.ok()) << store.status();
  if (!store.ok()) return rows;
  for (int i = 0; i < n; i += 100) {
    WriteRequest request;
    for (int j = i; j < i + 100 && j < n; ++j) {
      const std::string key = absl::StrCat("key-", j);
      const std::string value = absl::StrCat("value-", j, "-", j * 7919 % 997,
                                             std::string(150, 'a' + j % 26));
      request.mutations.push_back(Mutation::Put(kKeyspace, key, value));
      rows[key] = value;
    }
    EXPECT_TRUE((*store)->Write(std::move(request)).ok());
  }
  return rows;
}

std::vector<std::string> TablesIn(const std::string& dir) {
  std::vector<std::string> tables;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".ldb") {
      tables.push_back(entry.path().string());
    }
  }
  return tables;
}

void CopyDir(const std::string& from, const std::string& to) {
  std::filesystem::copy(from, to, std::filesystem::copy_options::recursive);
}

// The rows of `dir` after recovery: the store opens, verifies sound, and
// every row it has carries the value that was written. Returns how many it
// has.
size_t ExpectSoundSubset(const std::string& dir,
                         const std::map<std::string, std::string>& written) {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(dir, Adopting());
  EXPECT_TRUE(store.ok()) << store.status();
  if (!store.ok()) return 0;
  absl::StatusOr<VerifyReport> report = (*store)->Verify();
  EXPECT_TRUE(report.ok()) << report.status();
  if (report.ok()) {
    EXPECT_TRUE(report->ok()) << report->problems.size() << " problems, first "
                              << report->problems.front();
  }
  size_t present = 0;
  for (const auto& [key, value] : written) {
    absl::StatusOr<Row> row = (*store)->Get(kKeyspace, key);
    if (!row.ok()) {
      EXPECT_TRUE(absl::IsNotFound(row.status()) ||
                  absl::IsInvalidArgument(row.status()))
          << key << ": " << row.status();
      continue;
    }
    ++present;
    EXPECT_EQ(row->value, value) << key;
  }
  WriteRequest request;
  request.mutations.push_back(Mutation::Put(kKeyspace, "after", "v"));
  EXPECT_TRUE((*store)->Write(std::move(request)).ok());
  return present;
}

// The damage fuzzer: many offsets and strides, in every table. Each
// recovery must finish (no signal, no allocation failure), keep only rows
// with their written values, leave a store that opens sound and takes
// writes, and keep the damaged originals in lost/.
TEST(StoreSalvage, RecoversFromEveryDamagePattern) {
  TempDir base;
  const std::map<std::string, std::string> written =
      MakeStore(base.path() + "/store", 12000);
  ASSERT_GE(TablesIn(base.path() + "/store").size(), 2u);
  int n = 0;
  for (size_t stride : {4096u, 50000u, 100003u, 500000u}) {
    for (size_t offset :
         {0u, 7u, 1000u, 1003u, 1017u, 2048u, 4093u, 7001u, 9999u, 12345u}) {
      SCOPED_TRACE(absl::StrCat("offset ", offset, " stride ", stride));
      const std::string dir = absl::StrCat(base.path(), "/copy-", n++);
      CopyDir(base.path() + "/store", dir);
      ::tally::testing::FlipBytesEvery(dir, offset, stride);
      const absl::StatusOr<std::vector<std::string>> damaged =
          CheckTableFiles(dir, Options());
      ASSERT_TRUE(damaged.ok()) << damaged.status();
      absl::StatusOr<RepairReport> repaired =
          RepairStore(dir, Options(), {kKeyspace});
      ASSERT_TRUE(repaired.ok()) << repaired.status();
      // Tables left over by a compaction a close interrupted are salvaged
      // too, but CheckTableFiles skips them.
      EXPECT_GE(repaired->damaged_tables.size(), damaged->size());
      EXPECT_EQ(repaired->rows_unattributed, 0u);
      if (!damaged->empty()) {
        EXPECT_FALSE(std::filesystem::is_empty(dir + "/lost"));
      }
      // How many rows survive depends on where the bytes fell: a table
      // whose compressed index block is hit loses all its rows (its file
      // is kept in lost/). Each row kept must be as written.
      ExpectSoundSubset(dir, written);
      // A second recovery finds nothing more to drop.
      absl::StatusOr<RepairReport> again =
          RepairStore(dir, Adopting(), {kKeyspace});
      ASSERT_TRUE(again.ok()) << again.status();
      EXPECT_TRUE(again->damaged_tables.empty());
      EXPECT_EQ(again->rows_removed, 0u);
      EXPECT_TRUE(CheckTableFiles(dir, Options())->empty());
      std::filesystem::remove_all(dir);
    }
  }
}

// One byte flipped in the middle of every table's index block, whose data
// blocks are all sound. A snappy-compressed index then does not decode at
// all, and recover used to lose every row of such a table; now its data
// blocks are found by their trailers and every row is kept.
TEST(StoreSalvage, ATableWhoseIndexDoesNotDecodeKeepsItsRows) {
  TempDir dir;
  const std::map<std::string, std::string> written =
      MakeStore(dir.path(), 12000);
  int damaged = 0;
  for (const std::string& table : TablesIn(dir.path())) {
    std::fstream f(table, std::ios::in | std::ios::out | std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)),
                      std::istreambuf_iterator<char>());
    // A table a compaction was writing when the store closed has no footer
    // yet (its bytes are whatever the file holds); only whole tables, which
    // end in the table magic, are damaged here.
    constexpr char kTableMagic[] = "\x57\xfb\x80\x8b\x24\x75\x47\xdb";
    if (bytes.size() < 48 ||
        bytes.compare(bytes.size() - 8, 8, kTableMagic, 8) != 0) {
      continue;
    }
    // The footer: the metaindex's handle, then the index's (varints).
    const char* p = bytes.data() + bytes.size() - 48;
    auto varint = [&p] {
      uint64_t v = 0;
      for (int shift = 0;; shift += 7) {
        const uint64_t byte = static_cast<unsigned char>(*p++);
        v |= (byte & 127) << shift;
        if ((byte & 128) == 0) return v;
      }
    };
    varint();
    varint();
    const uint64_t index_offset = varint();
    const uint64_t index_size = varint();
    if (index_size < 16 || index_offset + index_size > bytes.size() - 48) {
      continue;
    }
    bytes[index_offset + index_size / 2] ^= 0x5a;
    f.seekp(0);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ++damaged;
  }
  ASSERT_GT(damaged, 0);
  absl::StatusOr<RepairReport> repaired =
      RepairStore(dir.path(), Options(), {kKeyspace});
  ASSERT_TRUE(repaired.ok()) << repaired.status();
  EXPECT_FALSE(repaired->damaged_tables.empty());
  EXPECT_EQ(ExpectSoundSubset(dir.path(), written), written.size());
}

// A store is damaged where its identity lives: the node's name, its origin
// records and the keyspace's record (the first block of a table holds them
// all). Its rows must not be removed for it: the name comes from the
// operator (and a wrong one is refused), the keyspace's name from its rows'
// digests, and rows whose keyspace cannot be named are set aside, to be
// named by a later recovery.
TEST(StoreSalvage, AStoreThatLostItsIdentityIsNamedAgain) {
  TempDir dir;
  const std::map<std::string, std::string> written =
      MakeStore(dir.path(), 3000);
  auto lose = [&dir](const std::vector<std::string>& keys) {
    leveldb::DB* raw = nullptr;
    ASSERT_TRUE(leveldb::DB::Open(leveldb::Options(), dir.path(), &raw).ok());
    std::unique_ptr<leveldb::DB> db(raw);
    for (const std::string& key : keys) {
      ASSERT_TRUE(db->Delete(leveldb::WriteOptions(), key).ok());
    }
  };
  const std::vector<std::string> identity = {
      internal::MetaKey(internal::kMetaNodeName),
      internal::MetaKey(internal::kMetaEpoch), internal::OriginByIdKey(1),
      internal::OriginByNameKey("node-a")};
  lose(identity);
  absl::StatusOr<RepairReport> refused = RepairStore(dir.path(), Adopting());
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("--node-name"));
  // A wrong name is refused before anything is written: the rows, which
  // digest under the node's name, tell.
  StoreOptions wrong = Options();
  wrong.node_name = "node-b";
  refused = RepairStore(dir.path(), wrong, {kKeyspace});
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("not this node's name"));
  ASSERT_TRUE(RepairStore(dir.path(), Options(), {kKeyspace}).ok());
  EXPECT_EQ(ExpectSoundSubset(dir.path(), written), written.size());

  // Then the keyspace's record too.
  std::vector<std::string> everything = identity;
  everything.push_back(internal::KeyspaceKey(kKeyspace));
  lose(everything);
  // The right name, but not the keyspace's: its rows are set aside.
  absl::StatusOr<RepairReport> repaired =
      RepairStore(dir.path(), Options(), {"default"});
  ASSERT_TRUE(repaired.ok()) << repaired.status();
  // ...and the row ExpectSoundSubset wrote.
  EXPECT_EQ(repaired->rows_unattributed, written.size() + 1);
  EXPECT_EQ(repaired->rows_removed, 0u);
  {
    absl::StatusOr<std::unique_ptr<Store>> store =
        Store::Open(dir.path(), Adopting());
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ((*store)->node_name(), "node-a");
    EXPECT_TRUE((*store)->ListKeyspaces().empty());
    absl::StatusOr<VerifyReport> report = (*store)->Verify();
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_TRUE(report->ok()) << report->problems.front();
  }
  // The keyspace's name given: every row is back.
  repaired = RepairStore(dir.path(), Adopting(), {"default", kKeyspace});
  ASSERT_TRUE(repaired.ok()) << repaired.status();
  EXPECT_EQ(repaired->rows_unattributed, 0u);
  ASSERT_EQ(repaired->renamed_keyspaces.size(), 1u);
  EXPECT_THAT(repaired->renamed_keyspaces[0], HasSubstr("'users'"));
  EXPECT_EQ(ExpectSoundSubset(dir.path(), written), written.size());
}

// verify's check of the tables: a damaged live table is named; a table
// file the MANIFEST does not name (the partial output of a compaction a
// close interrupted, which LevelDB deletes at the next open) is not damage.
TEST(StoreSalvage, CheckTableFilesNamesDamageAndSkipsLeftovers) {
  TempDir dir;
  MakeStore(dir.path(), 3000);
  absl::StatusOr<std::vector<std::string>> damaged =
      CheckTableFiles(dir.path(), Options());
  ASSERT_TRUE(damaged.ok()) << damaged.status();
  EXPECT_TRUE(damaged->empty());
  {
    std::ofstream leftover(dir.path() + "/999999.ldb", std::ios::binary);
    leftover << std::string(5000, 'x');
  }
  damaged = CheckTableFiles(dir.path(), Options());
  ASSERT_TRUE(damaged.ok()) << damaged.status();
  EXPECT_TRUE(damaged->empty()) << damaged->front();

  // Recover sets the leftover aside without calling it damage (it did:
  // a store whose close cut a compaction short reported a "damaged table"
  // at every recovery).
  absl::StatusOr<RepairReport> repaired =
      RepairStore(dir.path(), Options(), {kKeyspace});
  ASSERT_TRUE(repaired.ok()) << repaired.status();
  EXPECT_TRUE(repaired->damaged_tables.empty())
      << repaired->damaged_tables.front();
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/lost/999999.ldb"));
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/999999.ldb"));

  ::tally::testing::FlipBytesEvery(dir.path(), 1000, 1 << 30);
  damaged = CheckTableFiles(dir.path(), Options());
  ASSERT_TRUE(damaged.ok()) << damaged.status();
  ASSERT_FALSE(damaged->empty());
  EXPECT_THAT(damaged->front(), HasSubstr("checksum"));
}

// Another program's LevelDB database: before, recover rewrote it into a
// tally store (RepairDB, then tally's metadata). Now it is refused and not
// one file changes; a tally store whose records are only in its log (never
// compacted) is still recovered.
// Keeps each value elsewhere, as a PostgreSQL sidecar's backend does (its
// payload stands in for the value: here "P:" + value).
class ElsewhereBackend : public RowBackend {
 public:
  absl::string_view name() const override { return "elsewhere"; }
  absl::Status ApplyRows(absl::Span<const RowChange> rows,
                         std::vector<RowOutcome>* outcomes) override {
    outcomes->resize(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      (*outcomes)[i].applied = true;
      (*outcomes)[i].payload = absl::StrCat("P:", rows[i].value);
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ReadValue(
      const RowLocation&, absl::string_view payload) const override {
    return std::string(payload.substr(std::min<size_t>(2, payload.size())));
  }
  absl::StatusOr<std::vector<absl::StatusOr<std::string>>> ReadValues(
      absl::Span<const RowLocation> rows,
      absl::Span<const absl::string_view> payloads) const override {
    std::vector<absl::StatusOr<std::string>> values;
    for (size_t i = 0; i < rows.size(); ++i) {
      values.push_back(ReadValue(rows[i], payloads[i]));
    }
    return values;
  }
  absl::StatusOr<std::string> SchemaFingerprint(
      absl::string_view) const override {
    return std::string("elsewhere/1");
  }
};

// `tally recover` on a PostgreSQL sidecar's store judged its rows with the
// embedded backend, found no value matching its digest and removed every
// live row, leaving an index the sidecar then resumed from as if whole.
// Now such a store is refused, saying how to rebuild it: before anything
// is changed when its capture position is in a table, and before its rows
// are touched when the position is in its log only.
TEST(StoreSalvage, ASidecarsStoreIsRefusedWithTheWayToRebuildIt) {
  for (const bool with_position : {true, false}) {
    SCOPED_TRACE(with_position ? "position in a table" : "log only");
    TempDir dir;
    {
      StoreOptions options = Options();
      options.backend = std::make_shared<ElsewhereBackend>();
      absl::StatusOr<std::unique_ptr<Store>> store =
          Store::Open(dir.path(), options);
      ASSERT_TRUE(store.ok()) << store.status();
      for (int i = 0; i < 2000; i += 100) {
        WriteRequest request;
        for (int j = i; j < i + 100; ++j) {
          request.mutations.push_back(Mutation::Put(
              kKeyspace, absl::StrCat("key-", j), std::string(200, 'v')));
        }
        if (with_position) {
          request.backend_position = BackendPosition{absl::StrCat("lsn-", i)};
        }
        ASSERT_TRUE((*store)->Write(std::move(request)).ok());
      }
    }
    absl::StatusOr<RepairReport> refused = RepairStore(dir.path(), Options());
    ASSERT_FALSE(refused.ok());
    EXPECT_TRUE(absl::IsFailedPrecondition(refused.status()))
        << refused.status();
    EXPECT_THAT(refused.status().message(),
                HasSubstr("PostgreSQL sidecar's index"));
    EXPECT_THAT(refused.status().message(), HasSubstr("index lost"));
    // Every row is still there, as its backend reads it.
    StoreOptions options = Options();
    options.backend = std::make_shared<ElsewhereBackend>();
    absl::StatusOr<std::unique_ptr<Store>> store =
        Store::Open(dir.path(), options);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_TRUE((*store)->Get(kKeyspace, "key-1999").ok());
    absl::StatusOr<VerifyReport> verified = (*store)->Verify();
    ASSERT_TRUE(verified.ok()) << verified.status();
    EXPECT_EQ(verified->rows, 2000u);
  }
}

TEST(StoreSalvage, AnotherProgramsDatabaseIsRefusedUnchanged) {
  TempDir dir;
  {
    leveldb::DB* raw = nullptr;
    leveldb::Options options;
    options.create_if_missing = true;
    options.write_buffer_size = 64 * 1024;
    ASSERT_TRUE(leveldb::DB::Open(options, dir.path(), &raw).ok());
    std::unique_ptr<leveldb::DB> db(raw);
    for (int i = 0; i < 5000; ++i) {
      ASSERT_TRUE(db->Put(leveldb::WriteOptions(), absl::StrCat("user:", i),
                          std::string(100, 'u'))
                      .ok());
    }
  }
  auto contents = [&dir] {
    std::map<std::string, std::string> files;
    for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
      if (entry.path().filename() == "LOCK") continue;
      std::ifstream in(entry.path(), std::ios::binary);
      files[entry.path().filename().string()] =
          std::string(std::istreambuf_iterator<char>(in), {});
    }
    return files;
  };
  const auto before = contents();
  ASSERT_GE(TablesIn(dir.path()).size(), 1u);
  absl::StatusOr<RepairReport> refused = RepairStore(dir.path(), Options());
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("not one record"));
  EXPECT_TRUE(contents() == before) << "recover changed the directory";

  TempDir fresh;
  {
    absl::StatusOr<std::unique_ptr<Store>> store =
        Store::Open(fresh.path(), Options());
    ASSERT_TRUE(store.ok()) << store.status();
    WriteRequest request;
    request.mutations.push_back(Mutation::Put(kKeyspace, "k", "v"));
    ASSERT_TRUE((*store)->Write(std::move(request)).ok());
  }
  EXPECT_TRUE(RepairStore(fresh.path(), Options()).ok());
}

}  // namespace
}  // namespace storage
}  // namespace tally
