#include "storage/internal/change_log.h"

#include <leveldb/db.h>
#include <leveldb/write_batch.h>

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/internal/coding.h"
#include "storage/internal/records.h"
#include "support/temp_dir.h"

namespace tally {
namespace storage {
namespace internal {
namespace {

using ::testing::ElementsAre;

class ChangeLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    leveldb::Options options;
    options.create_if_missing = true;
    leveldb::DB* db = nullptr;
    ASSERT_TRUE(leveldb::DB::Open(options, dir_.path() + "/db", &db).ok());
    db_.reset(db);
    log_ = std::make_unique<ChangeLog>(db_.get());
  }

  // Writes change records first..last (key "k<sequence>") as a commit
  // would, then tells the log.
  void Commit(Sequence first, Sequence last) {
    leveldb::WriteBatch batch;
    for (Sequence s = first; s <= last; ++s) {
      const std::string key = "k" + std::to_string(s);
      ChangeRecord change;
      change.keyspace_id = 1;
      change.origin_id = 1;
      change.count_delta = 1;
      change.key = key;
      std::string record;
      EncodeChangeRecord(change, &record);
      batch.Put(ChangeKey(s), record);
    }
    ASSERT_TRUE(db_->Write(leveldb::WriteOptions(), &batch).ok());
    log_->Committed(last);
  }

  // The sequences and keys Read(after, limit) gives, or its error.
  absl::StatusOr<std::vector<std::string>> ReadKeys(Sequence after,
                                                    size_t limit) {
    std::vector<std::string> keys;
    absl::Status s = log_->Read(
        after, limit, [&](Sequence sequence, const ChangeRecord& change) {
          keys.push_back(std::to_string(sequence) + ":" +
                         std::string(change.key));
          return absl::OkStatus();
        });
    if (!s.ok()) return s;
    return keys;
  }

  bool Exists(Sequence s) {
    std::string value;
    return db_->Get(leveldb::ReadOptions(), ChangeKey(s), &value).ok();
  }

  // Trims with hooks that record their calls and write for real.
  absl::StatusOr<uint64_t> Trim(Sequence through) {
    auto before = [this](Sequence t) {
      before_trim_calls_.push_back(t);
      return before_trim_status_;
    };
    auto write = [this](leveldb::WriteBatch* batch) {
      ++batches_written_;
      leveldb::WriteOptions options;
      return db_->Write(options, batch).ok()
                 ? absl::OkStatus()
                 : absl::UnavailableError("write failed");
    };
    return log_->Trim(through, ChangeLog::TrimHooks{before, write});
  }

  testing::TempDir dir_;
  std::unique_ptr<leveldb::DB> db_;
  std::unique_ptr<ChangeLog> log_;
  std::vector<Sequence> before_trim_calls_;
  absl::Status before_trim_status_;
  int batches_written_ = 0;
};

TEST_F(ChangeLogTest, ReadGivesTheEntriesAfterAPositionInOrderUpToTheLimit) {
  Commit(1, 5);
  EXPECT_EQ(log_->last_sequence(), 5u);
  EXPECT_EQ(log_->first_sequence(), 1u);
  EXPECT_THAT(*ReadKeys(2, 10), ElementsAre("3:k3", "4:k4", "5:k5"));
  EXPECT_THAT(*ReadKeys(0, 2), ElementsAre("1:k1", "2:k2"));
  EXPECT_THAT(*ReadKeys(5, 10), ElementsAre());
}

TEST_F(ChangeLogTest, ReadStopsAtTheFirstErrorOfTheCallback) {
  Commit(1, 3);
  int calls = 0;
  const absl::Status s = log_->Read(0, 10, [&](Sequence, const ChangeRecord&) {
    ++calls;
    return absl::CancelledError("enough");
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(calls, 1);
}

TEST_F(ChangeLogTest, EntryThatDoesNotParseIsDataLoss) {
  Commit(1, 1);
  ASSERT_TRUE(db_->Put(leveldb::WriteOptions(), ChangeKey(2), "short").ok());
  log_->Committed(2);
  EXPECT_EQ(ReadKeys(0, 10).status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(ChangeLogTest, ListenersHearEachGrowthUntilRemoved) {
  std::vector<Sequence> heard_a;
  std::vector<Sequence> heard_b;
  const int a = log_->AddListener([&](Sequence s) { heard_a.push_back(s); });
  log_->AddListener([&](Sequence s) { heard_b.push_back(s); });
  Commit(1, 2);
  log_->Committed(2);  // a commit that wrote no entry: nothing to tell
  Commit(3, 3);
  log_->RemoveListener(a);
  Commit(4, 4);
  EXPECT_THAT(heard_a, ElementsAre(2, 3));
  EXPECT_THAT(heard_b, ElementsAre(2, 3, 4));
}

TEST_F(ChangeLogTest, RecoverSetsTheBoundsReadFromMetadata) {
  Commit(1, 9);
  ChangeLog reopened(db_.get());
  reopened.Recover(/*last_sequence=*/9, /*trimmed_through=*/4);
  EXPECT_EQ(reopened.last_sequence(), 9u);
  EXPECT_EQ(reopened.first_sequence(), 5u);
  EXPECT_EQ(
      reopened
          .Read(3, 10,
                [](Sequence, const ChangeRecord&) { return absl::OkStatus(); })
          .code(),
      absl::StatusCode::kFailedPrecondition);
}

TEST_F(ChangeLogTest, TrimRemovesTheFrontAndReadsBeforeItFail) {
  Commit(1, 5);
  ASSERT_EQ(*Trim(3), 3u);
  EXPECT_THAT(before_trim_calls_, ElementsAre(3));
  EXPECT_FALSE(Exists(1));
  EXPECT_FALSE(Exists(3));
  EXPECT_TRUE(Exists(4));
  EXPECT_EQ(log_->first_sequence(), 4u);
  std::string trimmed;
  ASSERT_TRUE(db_->Get(leveldb::ReadOptions(),
                       TaggedKey(kMetaTag, kMetaTrimmedThrough), &trimmed)
                  .ok());
  EXPECT_EQ(DecodeFixed64(trimmed.data()), 3u);
  EXPECT_EQ(ReadKeys(2, 10).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(*ReadKeys(3, 10), ElementsAre("4:k4", "5:k5"));
}

TEST_F(ChangeLogTest, TrimStopsAtTheLastEntryAndTwiceRemovesNothing) {
  Commit(1, 5);
  EXPECT_EQ(*Trim(100), 5u);
  EXPECT_THAT(before_trim_calls_, ElementsAre(5));
  EXPECT_EQ(*Trim(100), 0u);
  EXPECT_THAT(before_trim_calls_, ElementsAre(5));  // not called again
  EXPECT_EQ(log_->first_sequence(), 6u);
}

TEST_F(ChangeLogTest, TrimWritesLongLogsInBoundedBatches) {
  Commit(1, 25'000);
  EXPECT_EQ(*Trim(25'000), 25'000u);
  EXPECT_EQ(batches_written_, 3);
  EXPECT_FALSE(Exists(1));
  EXPECT_FALSE(Exists(25'000));
}

TEST_F(ChangeLogTest, FailedBeforeTrimRemovesNothing) {
  Commit(1, 5);
  before_trim_status_ = absl::UnavailableError("checkpoint failed");
  EXPECT_EQ(Trim(3).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(batches_written_, 0);
  EXPECT_TRUE(Exists(1));
  EXPECT_EQ(log_->first_sequence(), 1u);
}

}  // namespace
}  // namespace internal
}  // namespace storage
}  // namespace tally
