#include "storage/internal/prefix_scan.h"

#include <leveldb/db.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "support/temp_dir.h"

namespace tally {
namespace storage {
namespace internal {
namespace {

using Records = std::vector<std::pair<std::string, std::string>>;

class PrefixScanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    leveldb::Options options;
    options.create_if_missing = true;
    leveldb::DB* raw = nullptr;
    ASSERT_TRUE(leveldb::DB::Open(options, dir_.path(), &raw).ok());
    db_.reset(raw);
    for (const char* k : {"A1", "B1", "B2", "B3", "BB", "C1"}) {
      ASSERT_TRUE(
          db_->Put(leveldb::WriteOptions(), k, std::string("v") + k).ok());
    }
  }

  // Every record ScanPrefix shows, until `stop_at` (visited, then false).
  absl::Status Collect(absl::string_view prefix, absl::string_view start,
                       Records* out, absl::string_view stop_at = "") {
    return ScanPrefix(
        *db_, leveldb::ReadOptions(), prefix, start, "test scan",
        [&](absl::string_view k, absl::string_view v) -> absl::StatusOr<bool> {
          out->emplace_back(std::string(k), std::string(v));
          return k != stop_at;
        });
  }

  ::tally::testing::TempDir dir_;
  std::unique_ptr<leveldb::DB> db_;
};

TEST_F(PrefixScanTest, VisitsExactlyThePrefixInKeyOrder) {
  Records seen;
  ASSERT_TRUE(Collect("B", "B", &seen).ok());
  EXPECT_EQ(
      seen,
      (Records{{"B1", "vB1"}, {"B2", "vB2"}, {"B3", "vB3"}, {"BB", "vBB"}}));
}

TEST_F(PrefixScanTest, StartsAtTheStartKey) {
  Records seen;
  ASSERT_TRUE(Collect("B", "B2", &seen).ok());
  EXPECT_EQ(seen, (Records{{"B2", "vB2"}, {"B3", "vB3"}, {"BB", "vBB"}}));
  seen.clear();
  ASSERT_TRUE(Collect("B", "B25", &seen).ok());
  EXPECT_EQ(seen.front().first, "B3");
}

TEST_F(PrefixScanTest, AVisitorThatAnswersFalseEndsTheScanWithoutError) {
  Records seen;
  ASSERT_TRUE(Collect("B", "B", &seen, "B2").ok());
  EXPECT_EQ(seen, (Records{{"B1", "vB1"}, {"B2", "vB2"}}));
}

TEST_F(PrefixScanTest, AnEmptyPrefixSeesNothing) {
  Records seen;
  ASSERT_TRUE(Collect("X", "X", &seen).ok());
  EXPECT_TRUE(seen.empty());
}

TEST_F(PrefixScanTest, TheVisitorsErrorEndsTheScanAndIsReturned) {
  int visits = 0;
  const absl::Status s =
      ScanPrefix(*db_, leveldb::ReadOptions(), "B", "test scan",
                 [&](absl::string_view k, absl::string_view) -> absl::Status {
                   ++visits;
                   if (k == "B2") return absl::DataLossError("bad B2");
                   return absl::OkStatus();
                 });
  EXPECT_EQ(s, absl::DataLossError("bad B2"));
  EXPECT_EQ(visits, 2);
}

TEST_F(PrefixScanTest, ReadsAtTheSnapshotItIsGiven) {
  const leveldb::Snapshot* snapshot = db_->GetSnapshot();
  ASSERT_TRUE(db_->Put(leveldb::WriteOptions(), "B0", "new").ok());
  ASSERT_TRUE(db_->Delete(leveldb::WriteOptions(), "B3").ok());
  leveldb::ReadOptions read;
  read.snapshot = snapshot;
  std::vector<std::string> keys;
  ASSERT_TRUE(ScanPrefix(*db_, read, "B", "test scan",
                         [&](absl::string_view k, absl::string_view) {
                           keys.emplace_back(k);
                           return absl::OkStatus();
                         })
                  .ok());
  db_->ReleaseSnapshot(snapshot);
  EXPECT_EQ(keys, (std::vector<std::string>{"B1", "B2", "B3", "BB"}));
}

}  // namespace
}  // namespace internal
}  // namespace storage
}  // namespace tally
