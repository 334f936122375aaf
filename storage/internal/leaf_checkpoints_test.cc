#include "storage/internal/leaf_checkpoints.h"

#include <leveldb/db.h>
#include <leveldb/write_batch.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/internal/coding.h"
#include "storage/internal/records.h"
#include "support/temp_dir.h"
#include "tree/token.h"

namespace tally {
namespace storage {
namespace internal {
namespace {

using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

constexpr int kDepth = 4;

tree::Digest128 DigestOf(uint64_t n) { return tree::Digest128{n, ~n}; }

class LeafCheckpointsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    leveldb::Options options;
    options.create_if_missing = true;
    leveldb::DB* db = nullptr;
    ASSERT_TRUE(leveldb::DB::Open(options, dir_.path() + "/db", &db).ok());
    db_.reset(db);
    checkpoints_ = std::make_unique<LeafCheckpoints>(db_.get());
  }

  void Write(leveldb::WriteBatch* batch) {
    ASSERT_TRUE(db_->Write(leveldb::WriteOptions(), batch).ok());
  }

  // A change-log entry at `sequence` changing the leaf of `key`.
  void PutChange(Sequence sequence, KeyspaceId keyspace, const std::string& key,
                 const tree::Digest128& delta, int8_t count_delta) {
    ChangeRecord change;
    change.keyspace_id = keyspace.value();
    change.origin_id = 1;
    change.digest_delta = delta;
    change.count_delta = count_delta;
    change.key = key;
    std::string record;
    EncodeChangeRecord(change, &record);
    ASSERT_TRUE(
        db_->Put(leveldb::WriteOptions(), ChangeKey(sequence), record).ok());
  }

  // A key whose token falls in `leaf` of a depth-kDepth tree.
  static std::string KeyInLeaf(uint64_t leaf) {
    for (int i = 0;; ++i) {
      std::string key = "key" + std::to_string(i);
      if (tree::NodeIndexOf(tree::TokenOf(key), kDepth) == leaf) return key;
    }
  }

  testing::TempDir dir_;
  std::unique_ptr<leveldb::DB> db_;
  std::unique_ptr<LeafCheckpoints> checkpoints_;
};

TEST_F(LeafCheckpointsTest, DirtyLeavesAreEachLeafMarkedSinceTheCheckpoint) {
  const KeyspaceId a(1);
  const KeyspaceId b(2);
  checkpoints_->MarkDirty(LeafRef{a, 3});
  const std::vector<LeafRef> more = {{a, 3}, {b, 3}, {a, 0}};
  checkpoints_->MarkDirty(more);
  EXPECT_THAT(
      checkpoints_->DirtyLeaves(),
      UnorderedElementsAre(LeafRef{a, 3}, LeafRef{b, 3}, LeafRef{a, 0}));
  checkpoints_->Checkpointed(9);
  EXPECT_THAT(checkpoints_->DirtyLeaves(), ElementsAre());
  EXPECT_EQ(checkpoints_->sequence(), 9u);
}

TEST_F(LeafCheckpointsTest, CheckpointIsDueAfterIntervalChanges) {
  checkpoints_->Recover(100);
  EXPECT_EQ(checkpoints_->sequence(), 100u);
  EXPECT_FALSE(checkpoints_->CheckpointDue(109, 10));
  EXPECT_TRUE(checkpoints_->CheckpointDue(110, 10));
}

TEST_F(LeafCheckpointsTest, CheckpointWritesEachLeafAndRemovesEmptyOnes) {
  const KeyspaceId ks(7);
  // An old record for leaf 2, which is empty now.
  ASSERT_TRUE(db_->Put(leveldb::WriteOptions(), LeafKey(7, 2),
                       EncodeLeaf(DigestOf(5), 1))
                  .ok());
  const std::vector<LeafRef> leaves = {{ks, 1}, {ks, 2}};
  const std::vector<tree::NodeState> states = {{DigestOf(3), 4}, {}};
  leveldb::WriteBatch batch;
  LeafCheckpoints::BuildCheckpoint(42, leaves, states, &batch);
  Write(&batch);

  std::string value;
  ASSERT_TRUE(db_->Get(leveldb::ReadOptions(), LeafKey(7, 1), &value).ok());
  EXPECT_EQ(value, EncodeLeaf(DigestOf(3), 4));
  EXPECT_TRUE(
      db_->Get(leveldb::ReadOptions(), LeafKey(7, 2), &value).IsNotFound());
  ASSERT_TRUE(db_->Get(leveldb::ReadOptions(),
                       TaggedKey(kMetaTag, kMetaLeavesSequence), &value)
                  .ok());
  EXPECT_EQ(DecodeFixed64(value.data()), 42u);
}

// Recovery is the checkpoint plus the deltas of the entries after it, of
// this keyspace only; entries the checkpoint includes are not replayed.
TEST_F(LeafCheckpointsTest, RecoverAddsTheDeltasAfterTheCheckpoint) {
  const KeyspaceId ks(1);
  const KeyspaceId other(2);
  const std::vector<LeafRef> leaves = {{ks, 1}, {ks, 5}};
  const std::vector<tree::NodeState> states = {{DigestOf(1), 2},
                                               {DigestOf(2), 1}};
  leveldb::WriteBatch batch;
  LeafCheckpoints::BuildCheckpoint(10, leaves, states, &batch);
  Write(&batch);
  PutChange(9, ks, KeyInLeaf(1), DigestOf(100), 1);  // in the checkpoint
  PutChange(11, ks, KeyInLeaf(1), DigestOf(8), 1);
  PutChange(12, other, KeyInLeaf(5), DigestOf(9), 1);
  PutChange(13, ks, KeyInLeaf(5), DigestOf(2), -1);
  PutChange(14, ks, KeyInLeaf(6), DigestOf(4), 1);

  std::vector<uint32_t> replayed;
  absl::StatusOr<std::vector<tree::NodeState>> recovered =
      checkpoints_->RecoverLeaves(nullptr, ks, kDepth, 10, &replayed);
  ASSERT_TRUE(recovered.ok()) << recovered.status();
  ASSERT_EQ(recovered->size(), 16u);
  EXPECT_EQ((*recovered)[1], (tree::NodeState{DigestOf(1) ^ DigestOf(8), 3}));
  EXPECT_EQ((*recovered)[5], tree::NodeState{});
  EXPECT_EQ((*recovered)[6], (tree::NodeState{DigestOf(4), 1}));
  EXPECT_EQ((*recovered)[0], tree::NodeState{});
  EXPECT_THAT(replayed, ElementsAre(1, 5, 6));
}

TEST_F(LeafCheckpointsTest, RecoverAtASnapshotIgnoresLaterChanges) {
  const KeyspaceId ks(1);
  PutChange(1, ks, KeyInLeaf(3), DigestOf(1), 1);
  const leveldb::Snapshot* snapshot = db_->GetSnapshot();
  PutChange(2, ks, KeyInLeaf(3), DigestOf(2), 1);
  absl::StatusOr<std::vector<tree::NodeState>> then =
      checkpoints_->RecoverLeaves(snapshot, ks, kDepth, 0, nullptr);
  db_->ReleaseSnapshot(snapshot);
  ASSERT_TRUE(then.ok()) << then.status();
  EXPECT_EQ((*then)[3], (tree::NodeState{DigestOf(1), 1}));
}

TEST_F(LeafCheckpointsTest, LeafRecordThatDoesNotParseIsDataLoss) {
  ASSERT_TRUE(db_->Put(leveldb::WriteOptions(), LeafKey(1, 0), "short").ok());
  EXPECT_EQ(
      checkpoints_->RecoverLeaves(nullptr, KeyspaceId(1), kDepth, 0, nullptr)
          .status()
          .code(),
      absl::StatusCode::kDataLoss);
}

TEST_F(LeafCheckpointsTest, LeafBeyondTheTreeIsDataLoss) {
  ASSERT_TRUE(db_->Put(leveldb::WriteOptions(), LeafKey(1, 16),
                       EncodeLeaf(DigestOf(1), 1))
                  .ok());
  EXPECT_EQ(
      checkpoints_->RecoverLeaves(nullptr, KeyspaceId(1), kDepth, 0, nullptr)
          .status()
          .code(),
      absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace internal
}  // namespace storage
}  // namespace tally
