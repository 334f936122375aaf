// The tree view's reads of small ranges stay in the block cache; its scans
// of large ones do not (StoreTreeView::kCachedRangeRows).
#include <leveldb/env.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/store.h"
#include "support/temp_dir.h"
#include "tree/token.h"
#include "tree/tree_view.h"

namespace tally {
namespace storage {
namespace {

using ::tally::testing::TempDir;

// Counts the reads of table files: a block read from the cache reads none.
class CountingEnv : public leveldb::EnvWrapper {
 public:
  CountingEnv() : leveldb::EnvWrapper(leveldb::Env::Default()) {}

  leveldb::Status NewRandomAccessFile(
      const std::string& name, leveldb::RandomAccessFile** result) override {
    leveldb::RandomAccessFile* file = nullptr;
    leveldb::Status s = target()->NewRandomAccessFile(name, &file);
    if (!s.ok()) return s;
    *result = new Counted(file, &reads_);
    return s;
  }

  int reads() const { return reads_.load(); }

 private:
  class Counted : public leveldb::RandomAccessFile {
   public:
    Counted(leveldb::RandomAccessFile* file, std::atomic<int>* reads)
        : file_(file), reads_(reads) {}
    leveldb::Status Read(uint64_t offset, size_t n, leveldb::Slice* result,
                         char* scratch) const override {
      reads_->fetch_add(1);
      return file_->Read(offset, n, result, scratch);
    }

   private:
    std::unique_ptr<leveldb::RandomAccessFile> file_;
    std::atomic<int>* reads_;
  };

  std::atomic<int> reads_{0};
};

class StoreTreeViewCache : public ::testing::Test {
 protected:
  static constexpr int kRows = 20000;
  static constexpr int kDepth = 4;  // 16 leaves of ~1,250 rows

  void SetUp() override {
    StoreOptions options;
    options.node_name = "node-a";
    options.default_depth = kDepth;
    options.env = &env_;
    {
      auto store = Store::Open(dir_.path(), options);
      ASSERT_TRUE(store.ok()) << store.status();
      for (int batch = 0; batch < kRows / 1000; ++batch) {
        WriteRequest request;
        for (int i = batch * 1000; i < (batch + 1) * 1000; ++i) {
          request.mutations.push_back(Mutation::Put(
              "ks", absl::StrCat("key-", i), std::string(100, 'v')));
        }
        ASSERT_TRUE((*store)->Write(std::move(request)).ok());
      }
    }
    // Reopened, the rows are in table files (the log is replayed into one),
    // where reads show.
    auto store = Store::Open(dir_.path(), options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    // The row filter's build reads the table files in the background: it
    // must be done before reads are counted.
    for (int i = 0; i < 1000; ++i) {
      const RowFilterStats stats = store_->row_filter_stats();
      if (stats.built == stats.keyspaces) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_EQ(store_->row_filter_stats().built, 1);
  }

  // Table-file reads of one exchange of `request`.
  int ReadsOf(tree::TreeView& view, const tree::ViewRequest& request) {
    const int before = env_.reads();
    auto response = view.Exchange(request);
    EXPECT_TRUE(response.ok()) << response.status();
    return env_.reads() - before;
  }

  TempDir dir_;
  CountingEnv env_;
  std::unique_ptr<Store> store_;
};

// A diff reads the same few small ranges again in its next round and its
// next run: read once, they come from the cache.
TEST_F(StoreTreeViewCache, ASmallRangeIsReadFromTheCacheTheSecondTime) {
  auto view = store_->NewTreeView("ks");
  ASSERT_TRUE(view.ok()) << view.status();
  tree::ViewRequest list;
  list.list.push_back(tree::NodeRef{kDepth + 3, 5});  // ~150 rows
  tree::ViewRequest descend;
  descend.descend.push_back({tree::NodeRef{kDepth, 9}, 2});  // one leaf
  for (const tree::ViewRequest* request : {&list, &descend}) {
    EXPECT_GT(ReadsOf(**view, *request), 0);
    EXPECT_EQ(ReadsOf(**view, *request), 0);
  }
}

// A range of more than kCachedRangeRows rows (here the whole keyspace) is
// read from the files every time: it would evict the small ranges' blocks.
TEST_F(StoreTreeViewCache, ALargeRangeIsNotKeptInTheCache) {
  auto view = store_->NewTreeView("ks");
  ASSERT_TRUE(view.ok()) << view.status();
  tree::ViewRequest descend;
  descend.descend.push_back({tree::NodeRef{0, 0}, kDepth + 2});
  EXPECT_GT(ReadsOf(**view, descend), 0);
  EXPECT_GT(ReadsOf(**view, descend), 0);
}

}  // namespace
}  // namespace storage
}  // namespace tally
