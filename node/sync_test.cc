#include "node/sync.h"

#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/replica.h"
#include "support/temp_dir.h"

namespace tally {
namespace node {
namespace {

using ::tally::testing::TempDir;

std::unique_ptr<storage::Store> Open(const TempDir& dir,
                                     const std::string& name) {
  storage::StoreOptions options;
  options.node_name = name;
  options.sync = false;
  options.default_depth = 10;
  auto store = storage::Store::Open(dir.path(), options);
  EXPECT_TRUE(store.ok()) << store.status();
  return std::move(*store);
}

void Put(storage::Store& s, const std::string& key, const std::string& value) {
  storage::WriteRequest w;
  w.mutations.push_back(storage::Mutation::Put("ks", key, value));
  ASSERT_TRUE(s.Write(std::move(w)).ok());
}

std::string Value(storage::Store& s, const std::string& key) {
  auto row = s.Get("ks", key);
  if (!row.ok()) return "<missing>";
  return row->deleted ? "<deleted>" : row->value;
}

class SyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = Open(dir_a_, "node-a");
    b_ = Open(dir_b_, "node-b");
    ra_ = NewLocalReplica(a_.get());
    rb_ = NewLocalReplica(b_.get());
  }

  absl::StatusOr<SyncStats> Sync(bool a_is_source = false,
                                 bool dry_run = false) {
    SyncOptions options;
    options.keyspace = "ks";
    options.a_is_source = a_is_source;
    options.dry_run = dry_run;
    options.batch_rows = 7;  // several repair batches
    options.on_difference = [&](const KeyDifference& d) {
      seen_.insert(d.key);
    };
    return SyncKeyspace(*ra_, *rb_, options);
  }

  TempDir dir_a_, dir_b_;
  std::unique_ptr<storage::Store> a_, b_;
  std::unique_ptr<Replica> ra_, rb_;
  std::set<std::string> seen_;
};

TEST_F(SyncTest, TwoWayCopiesEachKeysNewerVersionToTheOtherSide) {
  for (int i = 0; i < 50; ++i) Put(*a_, absl::StrCat("a", i), "from-a");
  for (int i = 0; i < 30; ++i) Put(*b_, absl::StrCat("b", i), "from-b");
  Put(*a_, "both", "older");
  // Each store has its own clock: let physical time move so b's later
  // write carries the higher timestamp.
  absl::SleepFor(absl::Milliseconds(5));
  Put(*b_, "both", "newer");
  auto stats = Sync();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->rows_to_b, 50u);
  EXPECT_EQ(stats->rows_to_a, 31u);
  EXPECT_EQ(Value(*a_, "both"), "newer");
  EXPECT_EQ(Value(*b_, "a7"), "from-a");
  EXPECT_EQ(a_->GetKeyspace("ks")->root, b_->GetKeyspace("ks")->root);
  // Versions travel unchanged: the row on b is a's row.
  EXPECT_EQ(b_->Get("ks", "a7")->version, a_->Get("ks", "a7")->version);
  auto again = Sync();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->diff.differences, 0u);
  EXPECT_EQ(again->diff.rounds, 1u);
}

// Rows found by a first scan get the same bootstrap version on every
// replica; with different content such a tie used to stay different
// forever. The tie rule keeps the row with the higher digest on both sides.
TEST_F(SyncTest, ATieConvergesToTheRowWithTheHigherDigest) {
  const tree::Version version{
      tree::HlcTimestamp::FromParts(absl::ToUnixMillis(absl::Now()) - 1000, 0),
      "bootstrap"};
  for (const auto& [store, value] :
       {std::pair{a_.get(), "from-a"}, std::pair{b_.get(), "from-b"}}) {
    storage::WriteRequest w;
    w.mutations.push_back(storage::Mutation::Put("ks", "twin", value));
    w.mutations.back().version = version;
    auto written = store->Write(std::move(w));
    ASSERT_TRUE(written.ok()) << written.status();
    ASSERT_TRUE(written->applied[0]);
  }
  const auto digest = [](const char* value, const tree::Version& v) {
    return tree::RowDigest("ks", "twin", v, false, value);
  };
  const std::string winner =
      storage::CompareRows(version, digest("from-a", version), version,
                           digest("from-b", version)) > 0
          ? "from-a"
          : "from-b";
  ASSERT_NE(a_->GetKeyspace("ks")->root, b_->GetKeyspace("ks")->root);

  auto stats = Sync();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->conflicts, 1u);
  EXPECT_EQ(stats->rows_to_a + stats->rows_to_b, 1u);
  EXPECT_EQ(Value(*a_, "twin"), winner);
  EXPECT_EQ(Value(*b_, "twin"), winner);
  EXPECT_EQ(a_->GetKeyspace("ks")->root, b_->GetKeyspace("ks")->root);
  // Exactly the store that took the other row counts the tie it resolved.
  EXPECT_EQ(a_->ties_resolved() + b_->ties_resolved(), 1u);
  EXPECT_EQ((winner == "from-a" ? b_ : a_)->ties_resolved(), 1u);
  // The loser's row, pushed again, is refused: the rule is the same on
  // both sides, whichever way the row travels.
  storage::WriteRequest loser;
  loser.mutations.push_back(storage::Mutation::Put(
      "ks", "twin", winner == "from-a" ? "from-b" : "from-a"));
  loser.mutations.back().version = version;
  auto refused = a_->Write(std::move(loser));
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_FALSE(refused->applied[0]);

  auto again = Sync();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->diff.differences, 0u);
}

TEST_F(SyncTest, DeletesTravelAsTombstones) {
  Put(*a_, "k", "v");
  ASSERT_TRUE(Sync().ok());
  storage::WriteRequest del;
  del.mutations.push_back(storage::Mutation::Delete("ks", "k"));
  ASSERT_TRUE(b_->Write(std::move(del)).ok());
  ASSERT_TRUE(Sync().ok());
  EXPECT_EQ(Value(*a_, "k"), "<deleted>");
}

TEST_F(SyncTest, SourceModeMakesBAnExactCopyOfA) {
  for (int i = 0; i < 20; ++i) Put(*a_, absl::StrCat("k", i), "source");
  ASSERT_TRUE(Sync().ok());
  Put(*b_, "k3", "newer-on-b");
  Put(*b_, "extra", "only-on-b");
  auto stats = Sync(/*a_is_source=*/true);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->erased_from_b, 1u);
  EXPECT_EQ(stats->rows_to_a, 0u);
  EXPECT_EQ(Value(*b_, "k3"), "source");
  EXPECT_EQ(Value(*b_, "extra"), "<missing>");
  EXPECT_EQ(Value(*a_, "extra"), "<missing>");
  EXPECT_EQ(a_->GetKeyspace("ks")->root, b_->GetKeyspace("ks")->root);
}

TEST_F(SyncTest, DryRunReportsAndChangesNothing) {
  Put(*a_, "x", "1");
  Put(*b_, "y", "2");
  auto stats = Sync(false, /*dry_run=*/true);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(seen_, (std::set<std::string>{"x", "y"}));
  EXPECT_EQ(Value(*b_, "x"), "<missing>");
  EXPECT_EQ(stats->rows_to_a + stats->rows_to_b, 0u);
}

TEST_F(SyncTest, AMissingKeyspaceIsEmptyAndBothMissingIsNotFound) {
  Put(*a_, "k", "v");
  auto stats = Sync();  // b has no keyspace "ks" yet
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(Value(*b_, "k"), "v");
  SyncOptions options;
  options.keyspace = "nowhere";
  EXPECT_EQ(SyncKeyspace(*ra_, *rb_, options).status().code(),
            absl::StatusCode::kNotFound);
}

// A replica whose writes fail after `good_batches` have been applied: a
// peer that goes away in the middle of a repair.
class FailingAfter : public Replica {
 public:
  FailingAfter(Replica& inner, int good_batches)
      : inner_(inner), good_batches_(good_batches) {}
  std::string name() const override { return inner_.name(); }
  absl::StatusOr<std::unique_ptr<tree::TreeView>> NewView(
      const std::string& keyspace) override {
    return inner_.NewView(keyspace);
  }
  absl::Status FetchRows(
      const std::string& keyspace, const std::vector<std::string>& keys,
      const std::function<absl::Status(const storage::Row&)>& sink) override {
    return inner_.FetchRows(keyspace, keys, sink);
  }
  absl::StatusOr<ApplyResult> ApplyRows(const std::string& keyspace,
                                        const std::vector<storage::Row>& rows,
                                        const std::vector<std::string>& erase,
                                        storage::ApplyMode mode) override {
    if (good_batches_-- <= 0) {
      return absl::UnavailableError("the peer went away");
    }
    return inner_.ApplyRows(keyspace, rows, erase, mode);
  }

 private:
  Replica& inner_;
  int good_batches_;
};

// A session that failed after pushing rows reported rows_sent 0: the
// counters were only returned with success.
TEST_F(SyncTest, FailedSyncThatPushedRowsReportsTheRowsItSent) {
  for (int i = 0; i < 30; ++i) Put(*a_, absl::StrCat("k", i), "v");
  FailingAfter b(*rb_, /*good_batches=*/2);
  SyncOptions options;
  options.keyspace = "ks";
  options.batch_rows = 7;
  SyncStats stats;
  const absl::Status status = SyncKeyspace(*ra_, b, options, &stats);
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
  // Two batches of 7 reached b before it failed, and b has them.
  EXPECT_EQ(stats.rows_to_b, 14u);
  EXPECT_EQ(b_->GetKeyspace("ks")->row_count, 14u);
}

TEST_F(SyncTest, CancelledSyncStops) {
  for (int i = 0; i < 100; ++i) Put(*a_, absl::StrCat("k", i), "v");
  std::atomic<bool> cancelled{true};
  SyncOptions options;
  options.keyspace = "ks";
  options.cancelled = &cancelled;
  EXPECT_EQ(SyncKeyspace(*ra_, *rb_, options).status().code(),
            absl::StatusCode::kCancelled);
}

// The steps a session shows as its phase: the repair of each batch between
// stretches of the diff, and no repair in a dry run or without differences.
TEST_F(SyncTest, StepsAlternateDiffAndRepairBatchByBatch) {
  for (int i = 0; i < 10; ++i) Put(*a_, absl::StrCat("k", i), "v");
  std::vector<SyncStep> steps;
  SyncOptions options;
  options.keyspace = "ks";
  options.batch_rows = 4;  // batches of 4, 4 and 2
  options.on_step = [&](SyncStep step) { steps.push_back(step); };
  options.dry_run = true;
  ASSERT_TRUE(SyncKeyspace(*ra_, *rb_, options).ok());
  EXPECT_THAT(steps, ::testing::ElementsAre(SyncStep::kDiff));

  steps.clear();
  options.dry_run = false;
  ASSERT_TRUE(SyncKeyspace(*ra_, *rb_, options).ok());
  EXPECT_THAT(steps,
              ::testing::ElementsAre(SyncStep::kDiff, SyncStep::kRepair,
                                     SyncStep::kDiff, SyncStep::kRepair,
                                     SyncStep::kDiff, SyncStep::kRepair));

  steps.clear();
  ASSERT_TRUE(SyncKeyspace(*ra_, *rb_, options).ok());
  EXPECT_THAT(steps, ::testing::ElementsAre(SyncStep::kDiff));
}

}  // namespace
}  // namespace node
}  // namespace tally
