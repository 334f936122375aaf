#include "storage/store.h"

#include <leveldb/db.h>
#include <leveldb/write_batch.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/internal/coding.h"
#include "storage/internal/records.h"
#include "support/temp_dir.h"
#include "tests/killed_child.h"
#include "tree/diff/diff.h"

namespace tally {
namespace storage {
namespace {

using ::testing::HasSubstr;
using tree::HlcTimestamp;
using tree::Version;

using ::tally::testing::AcknowledgedBeforeSigkill;
using ::tally::testing::TempDir;

StoreOptions Options(const std::string& name = "node-a") {
  StoreOptions options;
  options.node_name = name;
  options.sync = false;  // tests do not need durability across power loss
  options.default_depth = 10;
  return options;
}

std::unique_ptr<Store> OpenOrDie(const std::string& dir,
                                 StoreOptions options = Options()) {
  auto store = Store::Open(dir, std::move(options));
  EXPECT_TRUE(store.ok()) << store.status();
  return std::move(store).value();
}

Mutation Remote(const std::string& key, const std::string& value,
                uint64_t millis, const std::string& origin,
                bool deleted = false) {
  Mutation m =
      deleted ? Mutation::Delete("ks", key) : Mutation::Put("ks", key, value);
  // Remote timestamps near "now", so the skew check passes.
  // One base for the whole test run, so equal offsets are equal versions.
  static const uint64_t base = absl::ToUnixMillis(absl::Now()) - 100000;
  m.version = Version{HlcTimestamp::FromParts(base + millis, 0), origin};
  return m;
}

absl::StatusOr<WriteResult> WriteOne(Store& store, Mutation m) {
  WriteRequest request;
  request.mutations.push_back(std::move(m));
  return store.Write(std::move(request));
}

void ExpectSound(Store& store) {
  auto report = store.Verify();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok()) << report->problems.front();
}

TEST(Store, PutGetDeleteLocally) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  ASSERT_TRUE(WriteOne(*store, Mutation::Put("ks", "alice", "v1")).ok());
  auto row = store->Get("ks", "alice");
  ASSERT_TRUE(row.ok()) << row.status();
  EXPECT_EQ(row->value, "v1");
  EXPECT_EQ(row->version.origin, "node-a");
  EXPECT_FALSE(row->deleted);

  ASSERT_TRUE(WriteOne(*store, Mutation::Delete("ks", "alice")).ok());
  row = store->Get("ks", "alice");
  ASSERT_TRUE(row.ok());
  EXPECT_TRUE(row->deleted);  // a tombstone, with its own version
  EXPECT_EQ(store->GetKeyspace("ks")->row_count, 1u);
  EXPECT_EQ(store->Get("ks", "bob").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store->Get("nope", "alice").status().code(),
            absl::StatusCode::kNotFound);
  ExpectSound(*store);
}

TEST(Store, LocalWritesWinOverStoredRowsFromTheFuture) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  // A peer's row stamped 50 s ahead (within the skew limit).
  Mutation m = Mutation::Put("ks", "k", "remote");
  m.version = Version{
      HlcTimestamp::FromParts(absl::ToUnixMillis(absl::Now()) + 50000, 0),
      "node-z"};
  ASSERT_TRUE(WriteOne(*store, m).ok());
  auto local = WriteOne(*store, Mutation::Put("ks", "k", "local"));
  ASSERT_TRUE(local.ok());
  EXPECT_TRUE(local->applied[0]);
  EXPECT_EQ(store->Get("ks", "k")->value, "local");
}

TEST(Store, OlderRemoteVersionIsIgnored) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  ASSERT_TRUE(WriteOne(*store, Remote("k", "new", 200, "node-b")).ok());
  const Sequence before = store->last_sequence();
  auto r = WriteOne(*store, Remote("k", "old", 100, "node-c"));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->applied[0]);
  EXPECT_EQ(store->Get("ks", "k")->value, "new");
  // A change not applied is not logged.
  EXPECT_EQ(store->last_sequence(), before);
}

TEST(Store, EqualVersionIsIdempotent) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  ASSERT_TRUE(WriteOne(*store, Remote("k", "v", 100, "node-b")).ok());
  const auto root = store->GetKeyspace("ks")->root;
  auto again = WriteOne(*store, Remote("k", "v", 100, "node-b"));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->applied[0]);
  EXPECT_EQ(store->GetKeyspace("ks")->root, root);
  EXPECT_EQ(store->GetKeyspace("ks")->row_count, 1u);
}

TEST(Store, TieOnTimestampIsBrokenByOriginName) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  ASSERT_TRUE(WriteOne(*store, Remote("k", "from-b", 100, "node-b")).ok());
  auto lower = WriteOne(*store, Remote("k", "from-a", 100, "node-a2"));
  ASSERT_TRUE(lower.ok());
  EXPECT_FALSE(lower->applied[0]);
  auto higher = WriteOne(*store, Remote("k", "from-c", 100, "node-c"));
  ASSERT_TRUE(higher.ok());
  EXPECT_TRUE(higher->applied[0]);
  EXPECT_EQ(store->Get("ks", "k")->value, "from-c");
  EXPECT_EQ(store->Get("ks", "k")->version.origin, "node-c");
}

TEST(Store, RemoteTombstoneWinsOnlyWhenNewer) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  ASSERT_TRUE(WriteOne(*store, Remote("k", "v", 100, "node-b")).ok());
  ASSERT_TRUE(WriteOne(*store, Remote("k", "", 90, "node-b", true)).ok());
  EXPECT_FALSE(store->Get("ks", "k")->deleted);
  ASSERT_TRUE(WriteOne(*store, Remote("k", "", 110, "node-b", true)).ok());
  EXPECT_TRUE(store->Get("ks", "k")->deleted);
  ExpectSound(*store);
}

TEST(Store, SameKeyTwiceInOneBatchKeepsTheWinner) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  WriteRequest request;
  request.mutations.push_back(Remote("k", "second", 200, "node-b"));
  request.mutations.push_back(Remote("k", "first", 100, "node-b"));
  request.mutations.push_back(Mutation::Put("ks", "j", "1"));
  request.mutations.push_back(Mutation::Put("ks", "j", "2"));
  auto r = store->Write(std::move(request));
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->applied, ::testing::ElementsAre(true, false, true, true));
  EXPECT_EQ(store->Get("ks", "k")->value, "second");
  EXPECT_EQ(store->Get("ks", "j")->value, "2");
  EXPECT_EQ(store->GetKeyspace("ks")->row_count, 2u);
  ExpectSound(*store);
}

TEST(Store, SourceOverrideReplacesNewerRowsAndErasesExtras) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  ASSERT_TRUE(WriteOne(*store, Mutation::Put("ks", "newer", "local")).ok());
  ASSERT_TRUE(WriteOne(*store, Mutation::Put("ks", "extra", "local")).ok());
  ASSERT_TRUE(WriteOne(*store, Remote("same", "v", 100, "src")).ok());

  WriteRequest request;
  request.mode = ApplyMode::kSourceOverride;
  request.mutations.push_back(Remote("newer", "from-source", 5, "src"));
  request.mutations.push_back(Remote("same", "v", 100, "src"));
  request.mutations.push_back(Mutation::Erase("ks", "extra"));
  request.mutations.push_back(Mutation::Erase("ks", "never-existed"));
  auto r = store->Write(std::move(request));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->applied, ::testing::ElementsAre(true, false, true, false));
  auto row = store->Get("ks", "newer");
  ASSERT_TRUE(row.ok());
  EXPECT_EQ(row->value, "from-source");
  EXPECT_EQ(row->version.origin, "src");  // the source's version, kept
  EXPECT_EQ(store->Get("ks", "extra").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store->GetKeyspace("ks")->row_count, 2u);
  auto changes = store->ReadChanges(0, 100);
  ASSERT_TRUE(changes.ok());
  EXPECT_TRUE(changes->back().erased);
  ExpectSound(*store);
}

TEST(Store, EraseAndVersionlessOverrideAreRefused) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  EXPECT_EQ(WriteOne(*store, Mutation::Erase("ks", "k")).status().code(),
            absl::StatusCode::kInvalidArgument);
  WriteRequest request;
  request.mode = ApplyMode::kSourceOverride;
  request.mutations.push_back(Mutation::Put("ks", "k", "v"));
  EXPECT_EQ(store->Write(std::move(request)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->last_sequence(), 0u);
}

TEST(Store, ChangeLogKeepsOriginalOrigins) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  ASSERT_TRUE(WriteOne(*store, Mutation::Put("ks", "local", "1")).ok());
  ASSERT_TRUE(
      WriteOne(*store, Remote("remote", "2", 100, "eu-west/db-3")).ok());
  ASSERT_TRUE(WriteOne(*store, Mutation::Delete("ks", "local")).ok());
  auto changes = store->ReadChanges(0, 100);
  ASSERT_TRUE(changes.ok()) << changes.status();
  ASSERT_EQ(changes->size(), 3u);
  EXPECT_EQ((*changes)[0].key, "local");
  EXPECT_EQ((*changes)[0].version.origin, "node-a");
  EXPECT_EQ((*changes)[1].key, "remote");
  EXPECT_EQ((*changes)[1].version.origin, "eu-west/db-3");
  EXPECT_TRUE((*changes)[2].deleted);
  EXPECT_EQ((*changes)[2].sequence, 3u);
  auto tail = store->ReadChanges(2, 100);
  ASSERT_TRUE(tail.ok());
  ASSERT_EQ(tail->size(), 1u);
  EXPECT_EQ((*tail)[0].sequence, 3u);
}

TEST(Store, ProgressCommitsWithTheRows) {
  TempDir dir;
  {
    auto store = OpenOrDie(dir.path());
    EXPECT_EQ(store->GetProgress("node-b").status().code(),
              absl::StatusCode::kNotFound);
    WriteRequest request;
    request.mutations.push_back(Remote("k", "v", 100, "node-b"));
    request.progress = UpstreamProgress{"node-b", 77, 1234};
    ASSERT_TRUE(store->Write(std::move(request)).ok());
  }
  auto store = OpenOrDie(dir.path());
  auto progress = store->GetProgress("node-b");
  ASSERT_TRUE(progress.ok());
  EXPECT_EQ(progress->epoch, 77u);
  EXPECT_EQ(progress->sequence, 1234u);
  EXPECT_EQ(store->Get("ks", "k")->value, "v");
}

TEST(Store, ListenersHearEveryCommit) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  std::vector<Sequence> heard;
  const int id =
      store->AddChangeListener([&](Sequence s) { heard.push_back(s); });
  ASSERT_TRUE(WriteOne(*store, Mutation::Put("ks", "a", "1")).ok());
  ASSERT_TRUE(WriteOne(*store, Mutation::Put("ks", "b", "1")).ok());
  store->RemoveChangeListener(id);
  ASSERT_TRUE(WriteOne(*store, Mutation::Put("ks", "c", "1")).ok());
  EXPECT_THAT(heard, ::testing::ElementsAre(1, 2));
}

TEST(Store, RandomOperationsKeepTreeEqualToRowsAcrossReopen) {
  const uint64_t seed = std::random_device{}();
  std::printf("seed=%llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  TempDir dir;
  std::vector<KeyspaceInfo> before;
  // Checkpoint leaves often, so that reopening mixes checkpointed leaves
  // with replayed changes.
  StoreOptions options = Options();
  options.leaf_checkpoint_interval = 37;
  {
    auto store = OpenOrDie(dir.path(), options);
    ASSERT_TRUE(store->CreateKeyspace("deep", 16).ok());
    for (int round = 0; round < 200; ++round) {
      WriteRequest request;
      for (int i = 0; i < 20; ++i) {
        const std::string ks = rng() % 2 ? "ks" : "deep";
        const std::string key = absl::StrCat("key-", rng() % 500);
        switch (rng() % 4) {
          case 0:
            request.mutations.push_back(Mutation::Delete(ks, key));
            break;
          case 1: {
            Mutation m = Remote(key, absl::StrCat("r", rng()), rng() % 150000,
                                absl::StrCat("node-", rng() % 3));
            m.keyspace = ks;
            request.mutations.push_back(m);
            break;
          }
          default:
            request.mutations.push_back(
                Mutation::Put(ks, key, absl::StrCat("v", rng())));
        }
      }
      const absl::Status s = store->Write(std::move(request)).status();
      ASSERT_TRUE(s.ok()) << s;
    }
    ExpectSound(*store);
    before = store->ListKeyspaces();
  }
  auto store = OpenOrDie(dir.path(), options);
  const std::vector<KeyspaceInfo> after = store->ListKeyspaces();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].name, before[i].name);
    EXPECT_EQ(after[i].depth, before[i].depth);
    EXPECT_EQ(after[i].root, before[i].root) << "seed " << seed;
    EXPECT_EQ(after[i].row_count, before[i].row_count);
  }
  ExpectSound(*store);
}

TEST(Store, ConcurrentWritersAreGroupedAndAllAcknowledgedWritesLand) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  constexpr int kThreads = 8;
  constexpr int kWrites = 300;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kWrites; ++i) {
        WriteRequest request;
        request.mutations.push_back(
            Mutation::Put("ks", absl::StrCat(t, "-", i), "v"));
        // Some keys are shared, so concurrent writes race on them.
        request.mutations.push_back(
            Mutation::Put("ks", absl::StrCat("shared-", i % 10), "v"));
        if (!store->Write(std::move(request)).ok()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(store->GetKeyspace("ks")->row_count, kThreads * kWrites + 10u);
  // Every write was logged exactly once.
  EXPECT_EQ(store->last_sequence(), 2u * kThreads * kWrites);
  ExpectSound(*store);
}

TEST(Store, LimitsAreEnforcedAndNothingIsWritten) {
  TempDir dir;
  StoreOptions options = Options();
  options.max_key_bytes = 100;
  options.max_value_bytes = 1000;
  options.max_batch_mutations = 5;
  options.max_batch_bytes = 3000;
  auto store = OpenOrDie(dir.path(), options);
  ASSERT_TRUE(WriteOne(*store, Mutation::Put("ks", "seed", "v")).ok());
  const Sequence before = store->last_sequence();

  auto status =
      WriteOne(*store, Mutation::Put("ks", std::string(101, 'k'), "v"))
          .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("key is 101 bytes; the limit is 100"));

  status = WriteOne(*store, Mutation::Put("ks", "k", std::string(1001, 'v')))
               .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("max_value_bytes"));

  WriteRequest many;
  for (int i = 0; i < 6; ++i) {
    many.mutations.push_back(Mutation::Put("ks", absl::StrCat(i), "v"));
  }
  status = store->Write(std::move(many)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("max_batch_mutations"));

  WriteRequest big;
  for (int i = 0; i < 4; ++i) {
    big.mutations.push_back(
        Mutation::Put("ks", absl::StrCat(i), std::string(900, 'v')));
  }
  status = store->Write(std::move(big)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("max_batch_bytes"));

  // One bad mutation spoils the whole request: nothing of it is written.
  WriteRequest mixed;
  mixed.mutations.push_back(Mutation::Put("ks", "good", "v"));
  mixed.mutations.push_back(Mutation::Put("bad keyspace!", "k", "v"));
  EXPECT_EQ(store->Write(std::move(mixed)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Get("ks", "good").status().code(),
            absl::StatusCode::kNotFound);

  EXPECT_EQ(WriteOne(*store, Mutation::Put("ks", "", "v")).status().code(),
            absl::StatusCode::kInvalidArgument);
  Mutation delete_with_value = Mutation::Delete("ks", "k");
  delete_with_value.value = "x";
  EXPECT_EQ(WriteOne(*store, delete_with_value).status().code(),
            absl::StatusCode::kInvalidArgument);
  Mutation bad_origin = Remote("k", "v", 1, "has space");
  EXPECT_EQ(WriteOne(*store, bad_origin).status().code(),
            absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(store->last_sequence(), before);
  EXPECT_EQ(store->GetKeyspace("ks")->row_count, 1u);
  ExpectSound(*store);
}

// Keyspaces once had no limit, and each holds its whole tree in
// memory (~2.2 MiB at depth 16): ~9,000 puts to new names used 20 GiB.
TEST(Store, AWriteThatWouldCreateAKeyspaceBeyondTheLimitIsRefused) {
  TempDir dir;
  StoreOptions options = Options();
  options.default_depth = 4;  // the limit, not the memory, is under test
  constexpr int kDefaultLimit = 256;  // StoreOptions::max_keyspaces
  {
    auto store = OpenOrDie(dir.path(), options);
    WriteRequest fill;
    for (int i = 0; i < kDefaultLimit; ++i) {
      fill.mutations.push_back(Mutation::Put(absl::StrCat("ks", i), "k", "v"));
    }
    ASSERT_TRUE(store->Write(std::move(fill)).ok());
    const Sequence before = store->last_sequence();

    absl::Status status =
        WriteOne(*store, Mutation::Put("one-more", "k", "v")).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(status.message(),
                HasSubstr("keyspace 'one-more' would be a new keyspace; this "
                          "store holds 256 and the limit is 256 "
                          "(max_keyspaces)"));
    // A request that would create one spoils whole: nothing of it written.
    WriteRequest mixed;
    mixed.mutations.push_back(Mutation::Put("ks0", "other", "v"));
    mixed.mutations.push_back(Mutation::Put("one-more", "k", "v"));
    EXPECT_EQ(store->Write(std::move(mixed)).status().code(),
              absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(store->Get("ks0", "other").status().code(),
              absl::StatusCode::kNotFound);
    EXPECT_EQ(store->CreateKeyspace("made", 4).code(),
              absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(store->last_sequence(), before);
    // The keyspaces that exist still take writes.
    EXPECT_TRUE(WriteOne(*store, Mutation::Put("ks7", "k2", "v")).ok());
    EXPECT_EQ(store->ListKeyspaces().size(),
              static_cast<size_t>(kDefaultLimit));
  }
  // Reopened with a higher limit, one more fits.
  options.max_keyspaces = kDefaultLimit + 1;
  auto store = OpenOrDie(dir.path(), options);
  EXPECT_TRUE(WriteOne(*store, Mutation::Put("one-more", "k", "v")).ok());
  EXPECT_EQ(
      WriteOne(*store, Mutation::Put("two-more", "k", "v")).status().code(),
      absl::StatusCode::kResourceExhausted);
  ExpectSound(*store);
}

TEST(Store, RemoteTimestampTooFarAheadIsRefused) {
  TempDir dir;
  StoreOptions options = Options();
  options.max_clock_skew = absl::Seconds(5);
  auto store = OpenOrDie(dir.path(), options);
  Mutation m = Mutation::Put("ks", "k", "v");
  m.version = Version{
      HlcTimestamp::FromParts(absl::ToUnixMillis(absl::Now()) + 60000, 0),
      "node-b"};
  const absl::Status s = WriteOne(*store, m).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(s.message(), HasSubstr("ahead of the local clock"));
  EXPECT_EQ(store->last_sequence(), 0u);
}

TEST(Store, KeyspacesKeepTheirDepth) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  ASSERT_TRUE(store->CreateKeyspace("users", 12).ok());
  EXPECT_TRUE(store->CreateKeyspace("users", 12).ok());
  EXPECT_EQ(store->CreateKeyspace("users", 13).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(store->CreateKeyspace("users2", 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->CreateKeyspace("users2", 25).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->CreateKeyspace("", 10).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(WriteOne(*store, Mutation::Put("auto", "k", "v")).ok());
  EXPECT_EQ(store->GetKeyspace("users")->depth, 12);
  EXPECT_EQ(store->GetKeyspace("auto")->depth, 10);  // default_depth
  auto counts = store->LeafCounts("users");
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(counts->size(), 4096u);
}

TEST(Store, BadOptionsAreRefused) {
  TempDir dir;
  StoreOptions no_name = Options("");
  EXPECT_EQ(Store::Open(dir.path(), no_name).status().code(),
            absl::StatusCode::kInvalidArgument);
  StoreOptions bad_depth = Options();
  bad_depth.default_depth = 30;
  EXPECT_EQ(Store::Open(dir.path(), bad_depth).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Store, ReopenChecksNodeNameAndAdoptsItWhenUnset) {
  TempDir dir;
  OpenOrDie(dir.path(), Options("node-a"));
  auto other = Store::Open(dir.path(), Options("node-b"));
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.status().message(), HasSubstr("belongs to node 'node-a'"));
  auto adopt = Store::Open(dir.path(), Options(""));
  ASSERT_TRUE(adopt.ok()) << adopt.status();
  EXPECT_EQ((*adopt)->node_name(), "node-a");
}

TEST(Store, SecondOpenOfTheSameDirectoryIsRefused) {
  TempDir dir;
  auto first = OpenOrDie(dir.path());
  auto second = Store::Open(dir.path(), Options());
  EXPECT_FALSE(second.ok());
}

// Writes a raw record behind the store's back.
void PutRaw(const std::string& dir, const std::string& key,
            const std::string& value) {
  leveldb::DB* db;
  leveldb::Options options;
  ASSERT_TRUE(leveldb::DB::Open(options, dir, &db).ok());
  ASSERT_TRUE(db->Put(leveldb::WriteOptions(), key, value).ok());
  delete db;
}

TEST(Store, UnknownFormatIsRefused) {
  TempDir dir;
  OpenOrDie(dir.path());
  std::string v;
  internal::PutFixed32(&v, 99);
  PutRaw(dir.path(), internal::TaggedKey(internal::kMetaTag, "format"), v);
  auto store = Store::Open(dir.path(), Options());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr("format version 99"));
}

TEST(Store, AMalformedMetadataValueIsRefusedByName) {
  struct Case {
    absl::string_view name;
    const char* what;
  };
  for (const Case& c :
       {Case{internal::kMetaEpoch, "corrupted epoch record"},
        Case{internal::kMetaLastSequence, "corrupted last sequence record"},
        Case{internal::kMetaNextKeyspaceId,
             "corrupted keyspace counter record"},
        Case{internal::kMetaTrimmedThrough,
             "corrupted trimmed sequence record"}}) {
    TempDir dir;
    OpenOrDie(dir.path());
    PutRaw(dir.path(), internal::MetaKey(c.name), "xyz");
    auto store = Store::Open(dir.path(), Options());
    EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss) << c.name;
    EXPECT_THAT(store.status().message(), HasSubstr(c.what)) << c.name;
  }
}

TEST(Store, CorruptedRowGivesDataLoss) {
  TempDir dir;
  uint32_t ks_id = 0;
  {
    auto store = OpenOrDie(dir.path());
    ASSERT_TRUE(WriteOne(*store, Mutation::Put("ks", "k", "v")).ok());
    ks_id = 1;
  }
  PutRaw(dir.path(), internal::RowKey(ks_id, tree::TokenOf("k"), "k"), "junk");
  auto store = OpenOrDie(dir.path());
  EXPECT_EQ(store->Get("ks", "k").status().code(), absl::StatusCode::kDataLoss);
  // The row is marked damaged; Verify says so instead of failing to read.
  auto report = store->Verify();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_FALSE(report->ok());
  // A new write replaces the damaged row.
  ASSERT_TRUE(WriteOne(*store, Mutation::Put("ks", "k", "v2")).ok());
  EXPECT_EQ(store->Get("ks", "k")->value, "v2");
}

TEST(Store, CorruptedLeafGivesDataLossOnOpen) {
  TempDir dir;
  OpenOrDie(dir.path());
  {
    auto store = OpenOrDie(dir.path());
    ASSERT_TRUE(WriteOne(*store, Mutation::Put("ks", "k", "v")).ok());
  }
  PutRaw(dir.path(), internal::LeafKey(1, 3), "short");
  EXPECT_EQ(Store::Open(dir.path(), Options()).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(Store, VerifyReportsALeafThatDisagreesWithTheRows) {
  TempDir dir;
  {
    auto store = OpenOrDie(dir.path());
    ASSERT_TRUE(WriteOne(*store, Mutation::Put("ks", "k", "v")).ok());
  }
  // A well-formed but wrong leaf: the rows no longer add up to it.
  const uint32_t leaf =
      static_cast<uint32_t>(tree::NodeIndexOf(tree::TokenOf("k"), 10));
  PutRaw(dir.path(), internal::LeafKey(1, leaf),
         internal::EncodeLeaf(tree::Digest128{1, 2}, 1));
  auto store = OpenOrDie(dir.path());
  auto report = store->Verify();
  ASSERT_TRUE(report.ok());
  EXPECT_FALSE(report->ok());
  EXPECT_THAT(report->problems.front(), HasSubstr("leaf"));
}

TEST(StoreTreeView, DiffOfTwoStoresFindsTheDifferences) {
  TempDir dir_a, dir_b;
  auto a = OpenOrDie(dir_a.path(), Options("node-a"));
  auto b = OpenOrDie(dir_b.path(), Options("node-b"));
  ASSERT_TRUE(a->CreateKeyspace("ks", 14).ok());
  ASSERT_TRUE(b->CreateKeyspace("ks", 8).ok());  // unequal depths
  WriteRequest same;
  for (int i = 0; i < 5000; ++i) {
    same.mutations.push_back(Remote(absl::StrCat("k", i), "v", i, "node-x"));
  }
  WriteRequest copy = same;
  ASSERT_TRUE(a->Write(std::move(same)).ok());
  ASSERT_TRUE(b->Write(std::move(copy)).ok());
  ASSERT_TRUE(WriteOne(*a, Mutation::Put("ks", "k17", "changed")).ok());
  ASSERT_TRUE(WriteOne(*b, Mutation::Delete("ks", "k4242")).ok());
  ASSERT_TRUE(WriteOne(*b, Mutation::Put("ks", "only-b", "v")).ok());

  auto view_a = a->NewTreeView("ks");
  auto view_b = b->NewTreeView("ks");
  ASSERT_TRUE(view_a.ok() && view_b.ok());
  std::set<std::string> keys;
  tree::DiffStats stats;
  ASSERT_TRUE(tree::DiffViews(
                  **view_a, **view_b, tree::DiffOptions{},
                  [&](const tree::RowEntry* x, const tree::RowEntry* y) {
                    keys.insert(x != nullptr ? x->key : y->key);
                    return absl::OkStatus();
                  },
                  &stats)
                  .ok());
  EXPECT_EQ(keys, (std::set<std::string>{"k17", "k4242", "only-b"}));
  EXPECT_EQ(a->NewTreeView("missing").status().code(),
            absl::StatusCode::kNotFound);
}

// ------------------------------------------------------ rows per origin

std::map<std::string, uint64_t> Origins(const Store& store) {
  std::map<std::string, uint64_t> out;
  for (const OriginRowCount& o : store.OriginRowCounts()) {
    EXPECT_GT(o.rows, 0u) << o.origin;
    EXPECT_TRUE(out.emplace(o.origin, o.rows).second) << o.origin;
  }
  return out;
}

using Counts = std::map<std::string, uint64_t>;

TEST(StoreOriginRows, CountPutsOverwritesAndTombstones) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  EXPECT_TRUE(store->OriginRowCounts().empty());
  WriteRequest request;
  for (int i = 0; i < 5; ++i) {
    request.mutations.push_back(Mutation::Put("ks", absl::StrCat("k", i), "v"));
  }
  request.mutations.push_back(Mutation::Put("other", "k0", "v"));
  ASSERT_TRUE(store->Write(std::move(request)).ok());
  EXPECT_EQ(Origins(*store), (Counts{{"node-a", 6}}));

  // Overwritten by another origin: the row changes hands.
  ASSERT_TRUE(WriteOne(*store, Remote("k0", "b", 130000, "node-b")).ok());
  ASSERT_TRUE(WriteOne(*store, Remote("new", "b", 130000, "node-b")).ok());
  EXPECT_EQ(Origins(*store), (Counts{{"node-a", 5}, {"node-b", 2}}));
  // Not applied (older): nothing moves.
  ASSERT_TRUE(WriteOne(*store, Remote("k1", "c", 1, "node-c")).ok());
  EXPECT_EQ(Origins(*store), (Counts{{"node-a", 5}, {"node-b", 2}}));
  // Overwritten by the same origin: nothing moves.
  ASSERT_TRUE(WriteOne(*store, Mutation::Put("ks", "k2", "again")).ok());
  EXPECT_EQ(Origins(*store), (Counts{{"node-a", 5}, {"node-b", 2}}));
  // A delete is a tombstone: it still counts, under the deleting origin.
  ASSERT_TRUE(WriteOne(*store, Mutation::Delete("ks", "new")).ok());
  ASSERT_TRUE(WriteOne(*store, Mutation::Delete("ks", "k3")).ok());
  EXPECT_EQ(Origins(*store), (Counts{{"node-a", 6}, {"node-b", 1}}));
  // A key written twice in one group counts once.
  WriteRequest twice;
  twice.mutations.push_back(Remote("k4", "x", 130100, "node-c"));
  twice.mutations.push_back(Remote("k4", "y", 130101, "node-d"));
  ASSERT_TRUE(store->Write(std::move(twice)).ok());
  EXPECT_EQ(Origins(*store),
            (Counts{{"node-a", 5}, {"node-b", 1}, {"node-d", 1}}));
  uint64_t total = 0;
  for (const KeyspaceInfo& ks : store->ListKeyspaces()) total += ks.row_count;
  EXPECT_EQ(total, 7u);
  ExpectSound(*store);
}

TEST(StoreOriginRows, SourceOverrideEraseRemovesTheRowFromItsOrigin) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  ASSERT_TRUE(WriteOne(*store, Mutation::Put("ks", "a", "v")).ok());
  ASSERT_TRUE(WriteOne(*store, Mutation::Put("ks", "b", "v")).ok());
  ASSERT_TRUE(WriteOne(*store, Remote("c", "v", 100, "node-b")).ok());
  WriteRequest request;
  request.mode = ApplyMode::kSourceOverride;
  request.mutations.push_back(Mutation::Erase("ks", "a"));
  request.mutations.push_back(Mutation::Erase("ks", "c"));
  request.mutations.push_back(Mutation::Erase("ks", "never-existed"));
  request.mutations.push_back(Remote("b", "src", 5, "src"));  // older: wins
  ASSERT_TRUE(store->Write(std::move(request)).ok());
  // node-b's last row is gone: it leaves the list.
  EXPECT_EQ(Origins(*store), (Counts{{"src", 1}}));
  ExpectSound(*store);
}

TEST(StoreOriginRows, SurviveReopenAndMatchTheRows) {
  TempDir dir;
  {
    auto store = OpenOrDie(dir.path());
    ASSERT_TRUE(WriteOne(*store, Mutation::Put("ks", "a", "v")).ok());
    ASSERT_TRUE(WriteOne(*store, Remote("b", "v", 100, "node-b")).ok());
    ASSERT_TRUE(WriteOne(*store, Remote("c", "", 100, "node-c", true)).ok());
  }
  auto store = OpenOrDie(dir.path());
  EXPECT_EQ(Origins(*store),
            (Counts{{"node-a", 1}, {"node-b", 1}, {"node-c", 1}}));
  ASSERT_TRUE(WriteOne(*store, Mutation::Put("ks", "b", "mine")).ok());
  EXPECT_EQ(Origins(*store), (Counts{{"node-a", 2}, {"node-c", 1}}));
  ExpectSound(*store);
}

// Removes every record under `tag`, and `meta` if given: what a store
// written by an older build lacks.
void DeleteRaw(const std::string& dir, char tag, const std::string& meta) {
  leveldb::DB* db;
  ASSERT_TRUE(leveldb::DB::Open(leveldb::Options(), dir, &db).ok());
  leveldb::WriteBatch batch;
  std::unique_ptr<leveldb::Iterator> it(
      db->NewIterator(leveldb::ReadOptions()));
  for (it->Seek(std::string(1, tag)); it->Valid() && it->key()[0] == tag;
       it->Next()) {
    batch.Delete(it->key());
  }
  it.reset();
  if (!meta.empty()) {
    batch.Delete(internal::TaggedKey(internal::kMetaTag, meta));
  }
  ASSERT_TRUE(db->Write(leveldb::WriteOptions(), &batch).ok());
  delete db;
}

TEST(StoreOriginRows, AStoreWithoutCountsIsCountedOnceAtOpen) {
  TempDir dir;
  {
    auto store = OpenOrDie(dir.path());
    for (int i = 0; i < 50; ++i) {
      ASSERT_TRUE(
          WriteOne(*store, Mutation::Put("ks", absl::StrCat("k", i), "v"))
              .ok());
    }
    ASSERT_TRUE(WriteOne(*store, Remote("k7", "v", 130000, "node-b")).ok());
  }
  DeleteRaw(dir.path(), internal::kOriginRowsTag,
            std::string(internal::kMetaOriginRows));
  {
    auto store = OpenOrDie(dir.path());
    EXPECT_EQ(Origins(*store), (Counts{{"node-a", 49}, {"node-b", 1}}));
    ExpectSound(*store);
  }
  // Without the marker deleted, missing counts are a mismatch, not a
  // recount: Verify says so.
  DeleteRaw(dir.path(), internal::kOriginRowsTag, "");
  auto store = OpenOrDie(dir.path());
  auto report = store->Verify();
  ASSERT_TRUE(report.ok());
  ASSERT_FALSE(report->ok());
  EXPECT_THAT(report->problems.front(),
              HasSubstr("origin 'node-a' (id 1): the rows give 49 rows, the "
                        "stored count 0, the in-memory count 0"));
}

TEST(StoreOriginRows, MalformedCountGivesDataLossOnOpen) {
  TempDir dir;
  {
    auto store = OpenOrDie(dir.path());
    ASSERT_TRUE(WriteOne(*store, Mutation::Put("ks", "k", "v")).ok());
  }
  PutRaw(dir.path(), internal::OriginRowsKey(1), "short");
  EXPECT_EQ(Store::Open(dir.path(), Options()).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(StoreOriginRows, ConcurrentWritersFromManyOriginsAddUp) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&store, t] {
      for (int i = 0; i < 200; ++i) {
        // Shared keys: writers overwrite each other's rows.
        Mutation m = t % 2 == 0
                         ? Mutation::Put("ks", absl::StrCat("k", i % 64), "v")
                         : Remote(absl::StrCat("k", i % 64), "v", 1000 + i,
                                  absl::StrCat("node-", t));
        EXPECT_TRUE(WriteOne(*store, std::move(m)).ok());
      }
    });
  }
  for (auto& w : writers) w.join();
  uint64_t total = 0;
  for (const auto& [origin, rows] : Origins(*store)) total += rows;
  EXPECT_EQ(total, store->GetKeyspace("ks")->row_count);
  EXPECT_EQ(total, 64u);
  ExpectSound(*store);
}

TEST(Store, RootChangesCountCommitsThatChangedTheRoot) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  WriteRequest request;
  request.mutations.push_back(Mutation::Put("a", "k1", "v"));
  request.mutations.push_back(Mutation::Put("a", "k2", "v"));
  request.mutations.push_back(Mutation::Put("b", "k1", "v"));
  ASSERT_TRUE(store->Write(std::move(request)).ok());  // one commit each
  ASSERT_TRUE(WriteOne(*store, Mutation::Delete("a", "k1")).ok());
  // Not applied: the root stays.
  Mutation old = Remote("k2", "old", 1, "node-b");
  old.keyspace = "a";
  auto not_applied = WriteOne(*store, std::move(old));
  ASSERT_TRUE(not_applied.ok());
  EXPECT_FALSE(not_applied->applied[0]);
  ASSERT_TRUE(store->CreateKeyspace("c", 8).ok());
  EXPECT_EQ(store->GetKeyspace("a")->root_changes, 2u);
  EXPECT_EQ(store->GetKeyspace("b")->root_changes, 1u);
  EXPECT_EQ(store->GetKeyspace("c")->root_changes, 0u);
  std::map<std::string, uint64_t> listed;
  for (const KeyspaceInfo& ks : store->ListKeyspaces()) {
    listed[ks.name] = ks.root_changes;
  }
  EXPECT_EQ(listed, (Counts{{"a", 2}, {"b", 1}, {"c", 0}}));
}

// The crash test: a child process writes with sync and prints every
// acknowledged key; the parent kills it with SIGKILL at a random moment,
// reopens the store, and checks that the tree matches the rows and that
// every acknowledged key is there.
TEST(StoreCrash, AcknowledgedWritesSurviveSigkill) {
  const uint64_t seed = std::random_device{}();
  std::printf("seed=%llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  TempDir dir;
  std::set<std::string> acknowledged;
  for (int round = 0; round < 5; ++round) {
    // Let it write for a random while, then kill it mid-flight.
    absl::StatusOr<std::vector<std::string>> lines = AcknowledgedBeforeSigkill(
        [&](FILE* out) {
          StoreOptions options = Options();
          options.sync = true;
          // Odd rounds checkpoint leaves often, even rounds rely on replay.
          if (round % 2 == 1) options.leaf_checkpoint_interval = 50;
          auto store = Store::Open(dir.path(), options);
          if (!store.ok()) _exit(3);
          std::mt19937_64 child_rng(seed + round);
          for (int i = 0;; ++i) {
            WriteRequest request;
            std::vector<std::string> keys;
            const int n = 1 + static_cast<int>(child_rng() % 20);
            for (int j = 0; j < n; ++j) {
              keys.push_back(absl::StrCat("r", round, "-", i, "-", j));
              request.mutations.push_back(
                  Mutation::Put("ks", keys.back(), std::string(100, 'v')));
            }
            if (child_rng() % 3 == 0) {
              // Replicated rows from other origins overwrite earlier keys,
              // so the rows per origin move with every kind of commit.
              request.mutations.push_back(
                  Remote(absl::StrCat("r", round, "-", i / 3, "-1"), "remote",
                         130000 + i, absl::StrCat("peer-", child_rng() % 3)));
            }
            if (child_rng() % 4 == 0) {
              // Overwrites and deletes of earlier keys, too.
              request.mutations.push_back(Mutation::Delete(
                  "ks", absl::StrCat("r", round, "-", i / 2, "-0")));
            }
            if (!(*store)->Write(std::move(request)).ok()) _exit(4);
            for (const std::string& k : keys) {
              std::fprintf(out, "%s\n", k.c_str());
            }
            std::fflush(out);
          }
        },
        absl::Microseconds(50000 + rng() % 250000));
    ASSERT_TRUE(lines.ok()) << lines.status();
    acknowledged.insert(lines->begin(), lines->end());

    auto store = OpenOrDie(dir.path());
    ExpectSound(*store);
    for (const std::string& key : acknowledged) {
      auto row = store->Get("ks", key);
      ASSERT_TRUE(row.ok()) << "acknowledged key lost: " << key << " round "
                            << round << " seed " << seed;
    }
  }
  EXPECT_GT(acknowledged.size(), 100u);
}

}  // namespace
}  // namespace storage
}  // namespace tally
