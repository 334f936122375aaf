// The row filter (StoreOptions::row_filter, internal/row_presence.h) must
// never change a last-writer-wins decision: a store with it and one without
// it, given the same writes, answer and hold the same. Also that it skips
// reads at all, and that a reopened store's background build is safe.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "storage/store.h"
#include "support/temp_dir.h"
#include "tests/killed_child.h"

namespace tally {
namespace storage {
namespace {

using ::tally::testing::AcknowledgedBeforeSigkill;
using ::tally::testing::TempDir;
using tree::HlcTimestamp;
using tree::Version;

// One physical time for the whole test: versions then depend only on the
// writes, so that two stores given the same writes stamp the same.
const uint64_t kBaseMillis = absl::ToUnixMillis(absl::Now());

StoreOptions Options(bool row_filter) {
  StoreOptions options;
  options.node_name = "node-a";
  options.sync = false;
  options.default_depth = 6;
  options.row_filter = row_filter;
  options.physical_clock = [] { return kBaseMillis; };
  return options;
}

std::unique_ptr<Store> OpenOrDie(const std::string& dir, bool row_filter) {
  auto store = Store::Open(dir, Options(row_filter));
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(store).value() : nullptr;
}

Version RemoteVersion(int64_t offset_millis, uint32_t logical,
                      const std::string& origin) {
  return Version{HlcTimestamp::FromParts(kBaseMillis + offset_millis, logical),
                 origin};
}

void ExpectSound(Store& store) {
  auto report = store.Verify();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok()) << report->problems.front();
}

// Waits until every keyspace's filter is built (the background build).
void WaitBuilt(Store& store) {
  for (int i = 0; i < 1000; ++i) {
    const RowFilterStats stats = store.row_filter_stats();
    if (stats.built == stats.keyspaces) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FAIL() << "the row filters were not built within 10 s";
}

WriteRequest RandomRequest(std::mt19937_64& rng) {
  WriteRequest request;
  const bool override_batch = rng() % 10 == 0;
  if (override_batch) request.mode = ApplyMode::kSourceOverride;
  const int n = 1 + static_cast<int>(rng() % 8);
  for (int i = 0; i < n; ++i) {
    const std::string keyspace = rng() % 3 == 0 ? "b" : "a";
    const std::string key = absl::StrCat("k", rng() % 300);
    const std::string value = absl::StrCat("v", rng() % 1000);
    const int kind = static_cast<int>(rng() % 10);
    Mutation m;
    if (override_batch && kind < 2) {
      m = Mutation::Erase(keyspace, key);
    } else if (kind < 3 || (override_batch && kind < 4)) {
      m = Mutation::Delete(keyspace, key);
    } else {
      m = Mutation::Put(keyspace, key, value);
    }
    // Local writes (no version) only where the mode allows them.
    if (override_batch || kind >= 6 || kind == 2) {
      m.version = RemoteVersion(static_cast<int64_t>(rng() % 100) - 50,
                                static_cast<uint32_t>(rng() % 3),
                                rng() % 2 == 0 ? "peer-x" : "peer-y");
    }
    request.mutations.push_back(std::move(m));
  }
  return request;
}

TEST(RowFilter, NeverChangesALastWriterWinsDecision) {
  TempDir with_dir, without_dir;
  std::unique_ptr<Store> with = OpenOrDie(with_dir.path(), true);
  std::unique_ptr<Store> without = OpenOrDie(without_dir.path(), false);
  ASSERT_NE(with, nullptr);
  ASSERT_NE(without, nullptr);
  std::mt19937_64 rng(20261202);
  uint64_t skipped = 0;
  for (int step = 0; step < 3000; ++step) {
    if (step % 400 == 399) {
      // Reopened: the filters are rebuilt in the background while the
      // writes go on.
      skipped += with->row_filter_stats().reads_skipped;
      with.reset();
      without.reset();
      with = OpenOrDie(with_dir.path(), true);
      without = OpenOrDie(without_dir.path(), false);
      ASSERT_NE(with, nullptr);
      ASSERT_NE(without, nullptr);
    }
    WriteRequest request = RandomRequest(rng);
    auto a = with->Write(request);
    auto b = without->Write(std::move(request));
    ASSERT_EQ(a.ok(), b.ok()) << a.status() << " / " << b.status();
    if (!a.ok()) {
      EXPECT_EQ(a.status(), b.status());
      continue;
    }
    ASSERT_EQ(a->applied, b->applied) << "step " << step;
    ASSERT_EQ(a->versions, b->versions) << "step " << step;
    ASSERT_EQ(a->refused, b->refused) << "step " << step;
  }
  for (const std::string keyspace : {"a", "b"}) {
    for (int k = 0; k < 300; ++k) {
      const std::string key = absl::StrCat("k", k);
      auto a = with->Get(keyspace, key);
      auto b = without->Get(keyspace, key);
      ASSERT_EQ(a.ok(), b.ok()) << key << ": " << a.status() << b.status();
      if (!a.ok()) {
        EXPECT_EQ(a.status().code(), b.status().code()) << key;
        continue;
      }
      EXPECT_EQ(a->value, b->value) << key;
      EXPECT_EQ(a->version, b->version) << key;
      EXPECT_EQ(a->deleted, b->deleted) << key;
    }
    auto ta = with->CopyTree(keyspace);
    auto tb = without->CopyTree(keyspace);
    ASSERT_TRUE(ta.ok() && tb.ok());
    EXPECT_EQ(ta->root().digest, tb->root().digest) << keyspace;
    EXPECT_EQ(ta->root().count, tb->root().count) << keyspace;
  }
  ExpectSound(*with);
  ExpectSound(*without);
  skipped += with->row_filter_stats().reads_skipped;
  // The filter was used: new keys skipped their reads.
  EXPECT_GT(skipped, 100u);
  EXPECT_EQ(without->row_filter_stats().reads_skipped, 0u);
}

TEST(RowFilter, AReopenedStoreReadsEveryRowItHolds) {
  TempDir dir;
  constexpr int kRows = 5000;
  {
    std::unique_ptr<Store> store = OpenOrDie(dir.path(), true);
    ASSERT_NE(store, nullptr);
    WriteRequest request;
    for (int i = 0; i < kRows; ++i) {
      Mutation m = Mutation::Put("ks", absl::StrCat("key", i), "new");
      m.version = RemoteVersion(10, 0, "peer-x");
      request.mutations.push_back(std::move(m));
      if (request.mutations.size() == 1000) {
        ASSERT_TRUE(store->Write(std::move(request)).ok());
        request = WriteRequest();
      }
    }
  }
  for (bool wait_for_build : {false, true}) {
    std::unique_ptr<Store> store = OpenOrDie(dir.path(), true);
    ASSERT_NE(store, nullptr);
    if (wait_for_build) WaitBuilt(*store);
    // Older versions of every row: each must lose to the stored one,
    // whether the filter is built yet or not.
    WriteRequest request;
    for (int i = 0; i < kRows; ++i) {
      Mutation m = Mutation::Put("ks", absl::StrCat("key", i), "old");
      m.version = RemoteVersion(5, 0, "peer-x");
      request.mutations.push_back(std::move(m));
    }
    auto result = store->Write(std::move(request));
    ASSERT_TRUE(result.ok()) << result.status();
    for (int i = 0; i < kRows; ++i) {
      ASSERT_FALSE(result->applied[i]) << "key" << i;
    }
    auto row = store->Get("ks", "key17");
    ASSERT_TRUE(row.ok());
    EXPECT_EQ(row->value, "new");
    ExpectSound(*store);
  }
}

// Puts `version` of every key of `keys` into "ks", in batches under the
// store's limit; returns which were applied (empty on a failed write).
std::vector<bool> WriteVersions(Store& store,
                                const std::vector<std::string>& keys,
                                const Version& version) {
  std::vector<bool> applied;
  for (size_t start = 0; start < keys.size(); start += 5000) {
    WriteRequest request;
    for (size_t i = start; i < std::min(keys.size(), start + 5000); ++i) {
      Mutation m = Mutation::Put("ks", keys[i], "v");
      m.version = version;
      request.mutations.push_back(std::move(m));
    }
    auto result = store.Write(std::move(request));
    EXPECT_TRUE(result.ok()) << result.status();
    if (!result.ok()) return {};
    applied.insert(applied.end(), result->applied.begin(),
                   result->applied.end());
  }
  return applied;
}

// The crash rule of the filter: it lives in memory only and is rebuilt
// from the rows at every open, so a SIGKILL leaves nothing of it behind. A
// child writes rows (replicated versions, some deleted) with sync and
// prints each acknowledged key; the parent kills it at a random moment,
// reopens the store, and at once (the build racing) and again once built
// offers an older version of every acknowledged key: each must be refused,
// and a newer one taken.
TEST(RowFilter, AfterASigkillEveryAcknowledgedRowStillWinsOverOlderVersions) {
  const uint64_t seed = std::random_device{}();
  std::printf("seed=%llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  TempDir dir;
  std::vector<std::string> acknowledged;
  for (int round = 0; round < 3; ++round) {
    absl::StatusOr<std::vector<std::string>> lines = AcknowledgedBeforeSigkill(
        [&](FILE* out) {
          StoreOptions options = Options(true);
          options.sync = true;
          auto store = Store::Open(dir.path(), options);
          if (!store.ok()) _exit(3);
          std::mt19937_64 child_rng(seed + round);
          for (int i = 0;; ++i) {
            WriteRequest request;
            std::vector<std::string> keys;
            const int n = 1 + static_cast<int>(child_rng() % 50);
            for (int j = 0; j < n; ++j) {
              keys.push_back(absl::StrCat("r", round, "-", i, "-", j));
              Mutation m = child_rng() % 5 == 0
                               ? Mutation::Delete("ks", keys.back())
                               : Mutation::Put("ks", keys.back(), "new");
              m.version = RemoteVersion(100, 0, "peer-x");
              request.mutations.push_back(std::move(m));
            }
            if (!(*store)->Write(std::move(request)).ok()) _exit(4);
            for (const std::string& k : keys) {
              std::fprintf(out, "%s\n", k.c_str());
            }
            std::fflush(out);
          }
        },
        absl::Microseconds(50000 + rng() % 200000));
    ASSERT_TRUE(lines.ok()) << lines.status();
    acknowledged.insert(acknowledged.end(), lines->begin(), lines->end());

    std::unique_ptr<Store> store = OpenOrDie(dir.path(), true);
    ASSERT_NE(store, nullptr);
    for (bool built : {false, true}) {
      if (built) WaitBuilt(*store);
      const std::vector<bool> applied =
          WriteVersions(*store, acknowledged, RemoteVersion(50, 0, "peer-x"));
      ASSERT_EQ(applied.size(), acknowledged.size());
      for (size_t i = 0; i < acknowledged.size(); ++i) {
        ASSERT_FALSE(applied[i])
            << "an older version replaced acknowledged row " << acknowledged[i]
            << " (round " << round << ", built " << built << ", seed " << seed
            << ")";
      }
    }
    ExpectSound(*store);
  }
  ASSERT_GT(acknowledged.size(), 100u);
  // A newer version still wins over every one of them.
  std::unique_ptr<Store> store = OpenOrDie(dir.path(), true);
  ASSERT_NE(store, nullptr);
  const std::vector<bool> applied =
      WriteVersions(*store, acknowledged, RemoteVersion(200, 0, "peer-x"));
  ASSERT_EQ(applied.size(), acknowledged.size());
  for (size_t i = 0; i < acknowledged.size(); ++i) {
    ASSERT_TRUE(applied[i]) << acknowledged[i];
  }
  ExpectSound(*store);
}

TEST(RowFilter, NewKeysSkipTheirReadOnceBuilt) {
  TempDir dir;
  {
    std::unique_ptr<Store> store = OpenOrDie(dir.path(), true);
    ASSERT_NE(store, nullptr);
    WriteRequest request;
    for (int i = 0; i < 1000; ++i) {
      request.mutations.push_back(
          Mutation::Put("ks", absl::StrCat("old", i), "v"));
    }
    ASSERT_TRUE(store->Write(std::move(request)).ok());
    // A keyspace created by this store: no read for any of its rows.
    const RowFilterStats stats = store->row_filter_stats();
    EXPECT_EQ(stats.rows_read, 0u);
    EXPECT_EQ(stats.reads_skipped, 1000u);
  }
  std::unique_ptr<Store> store = OpenOrDie(dir.path(), true);
  ASSERT_NE(store, nullptr);
  WaitBuilt(*store);
  WriteRequest request;
  for (int i = 0; i < 1000; ++i) {
    request.mutations.push_back(
        Mutation::Put("ks", absl::StrCat("new", i), "v"));
  }
  for (int i = 0; i < 100; ++i) {
    request.mutations.push_back(
        Mutation::Put("ks", absl::StrCat("old", i), "v2"));
  }
  ASSERT_TRUE(store->Write(std::move(request)).ok());
  const RowFilterStats stats = store->row_filter_stats();
  // The 100 rows that exist are read, and the filter's few false
  // positives among the new ones.
  EXPECT_GE(stats.rows_read, 100u);
  EXPECT_LT(stats.rows_read, 130u);
  EXPECT_EQ(stats.rows_read + stats.reads_skipped, 1100u);
  EXPECT_EQ(stats.built, 1);
  EXPECT_GT(stats.memory_bytes, 0u);
  ExpectSound(*store);
}

TEST(RowFilter, ClosingDuringTheBuildDoesNotWaitForIt) {
  TempDir dir;
  {
    std::unique_ptr<Store> store = OpenOrDie(dir.path(), true);
    ASSERT_NE(store, nullptr);
    for (int b = 0; b < 50; ++b) {
      WriteRequest request;
      for (int i = 0; i < 4000; ++i) {
        request.mutations.push_back(
            Mutation::Put("ks", absl::StrCat("key", b, "-", i), "v"));
      }
      ASSERT_TRUE(store->Write(std::move(request)).ok());
    }
  }
  // Opened and closed at once, many times: the builder stops each time.
  for (int i = 0; i < 20; ++i) {
    std::unique_ptr<Store> store = OpenOrDie(dir.path(), true);
    ASSERT_NE(store, nullptr);
  }
  std::unique_ptr<Store> store = OpenOrDie(dir.path(), true);
  ASSERT_NE(store, nullptr);
  WaitBuilt(*store);
  ExpectSound(*store);
}

TEST(RowFilter, OffReadsEveryRow) {
  TempDir dir;
  std::unique_ptr<Store> store = OpenOrDie(dir.path(), false);
  ASSERT_NE(store, nullptr);
  WriteRequest request;
  for (int i = 0; i < 100; ++i) {
    request.mutations.push_back(Mutation::Put("ks", absl::StrCat("k", i), "v"));
  }
  ASSERT_TRUE(store->Write(std::move(request)).ok());
  EXPECT_EQ(store->row_filter_stats().rows_read, 100u);
  EXPECT_EQ(store->row_filter_stats().reads_skipped, 0u);
}

}  // namespace
}  // namespace storage
}  // namespace tally
