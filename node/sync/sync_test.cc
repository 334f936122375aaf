#include "node/sync/sync.h"

#include <algorithm>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/client/replica.h"
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
  absl::StatusOr<FetchResult> FetchRows(
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

// A view that forwards to another and counts its scans; with `carry_values`
// false its ScanWithValues is a plain Scan, as a node's from before values.
class CountingView : public tree::TreeView {
 public:
  CountingView(std::unique_ptr<tree::TreeView> inner, bool carry_values,
               int* scans, int* scans_with_values)
      : inner_(std::move(inner)),
        carry_values_(carry_values),
        scans_(scans),
        scans_with_values_(scans_with_values) {}
  absl::StatusOr<tree::ViewSummary> Summary(int top_levels) override {
    return inner_->Summary(top_levels);
  }
  std::optional<tree::ViewTraffic> MeasuredTraffic() const override {
    return inner_->MeasuredTraffic();
  }
  absl::StatusOr<tree::ViewResponse> Exchange(
      const tree::ViewRequest& request) override {
    return inner_->Exchange(request);
  }
  absl::StatusOr<tree::SeededResponse> ExchangeSeeded(
      const tree::SeededRequest& request) override {
    return inner_->ExchangeSeeded(request);
  }
  absl::Status Scan(absl::Span<const tree::NodeRef> ranges,
                    const tree::EntrySink& sink) override {
    ++*scans_;
    return inner_->Scan(ranges, sink);
  }
  absl::Status ScanWithValues(absl::Span<const tree::NodeRef> ranges,
                              const tree::EntrySink& sink) override {
    ++*scans_with_values_;
    return carry_values_ ? inner_->ScanWithValues(ranges, sink)
                         : inner_->Scan(ranges, sink);
  }

 private:
  std::unique_ptr<tree::TreeView> inner_;
  const bool carry_values_;
  int* const scans_;
  int* const scans_with_values_;
};

// A replica that counts what a sync asks of it.
class CountingReplica : public Replica {
 public:
  explicit CountingReplica(Replica& inner, bool carry_values = true)
      : inner_(inner), carry_values_(carry_values) {}
  std::string name() const override { return inner_.name(); }
  absl::StatusOr<std::unique_ptr<tree::TreeView>> NewView(
      const std::string& keyspace) override {
    absl::StatusOr<std::unique_ptr<tree::TreeView>> view =
        inner_.NewView(keyspace);
    if (!view.ok()) return view.status();
    return std::make_unique<CountingView>(*std::move(view), carry_values_,
                                          &scans, &scans_with_values);
  }
  absl::StatusOr<FetchResult> FetchRows(
      const std::string& keyspace, const std::vector<std::string>& keys,
      const std::function<absl::Status(const storage::Row&)>& sink) override {
    keys_fetched += keys.size();
    return inner_.FetchRows(keyspace, keys, sink);
  }
  absl::StatusOr<ApplyResult> ApplyRows(const std::string& keyspace,
                                        const std::vector<storage::Row>& rows,
                                        const std::vector<std::string>& erase,
                                        storage::ApplyMode mode) override {
    ++apply_calls;
    max_rows_applied = std::max(max_rows_applied, rows.size());
    return inner_.ApplyRows(keyspace, rows, erase, mode);
  }

  int scans = 0;
  int scans_with_values = 0;
  size_t keys_fetched = 0;
  int apply_calls = 0;
  size_t max_rows_applied = 0;

 private:
  Replica& inner_;
  const bool carry_values_;
};

// Bootstrap: every row of a range the other side lacks comes whole with the
// diff's scan and is written as it is; none is fetched again by key.
TEST_F(SyncTest, RowsOfRangesTheOtherSideLacksComeWithTheScan) {
  size_t bytes = 0;
  for (int i = 0; i < 200; ++i) {
    const std::string key = absl::StrCat("a", i);
    const std::string value = absl::StrCat("value-", i);
    Put(*a_, key, value);
    bytes += key.size() + value.size();
  }
  storage::WriteRequest del;
  del.mutations.push_back(storage::Mutation::Delete("ks", "a7"));
  ASSERT_TRUE(a_->Write(std::move(del)).ok());
  bytes -= std::string("value-7").size();
  CountingReplica a(*ra_);
  CountingReplica b(*rb_);
  SyncOptions options;
  options.keyspace = "ks";
  options.batch_rows = 64;
  auto stats = SyncKeyspace(a, b, options);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->rows_to_b, 200u);
  EXPECT_EQ(stats->repair_bytes, bytes);
  EXPECT_EQ(a.keys_fetched, 0u);
  EXPECT_GT(a.scans_with_values, 0);
  EXPECT_EQ(Value(*b_, "a5"), "value-5");
  EXPECT_EQ(Value(*b_, "a7"), "<deleted>");
  EXPECT_EQ(a_->GetKeyspace("ks")->root, b_->GetKeyspace("ks")->root);
  // The versions came along: the rows are a's, not new writes on b.
  EXPECT_EQ(a_->Get("ks", "a5")->version, b_->Get("ks", "a5")->version);

  // The other way round: b's rows in ranges a lacks go to a whole too;
  // those that share a range with a's rows are listed, then fetched.
  for (int i = 0; i < 50; ++i) Put(*b_, absl::StrCat("b", i), "from-b");
  CountingReplica a2(*ra_);
  CountingReplica b2(*rb_);
  stats = SyncKeyspace(a2, b2, options);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->rows_to_a, 50u);
  EXPECT_GT(b2.scans_with_values, 0);
  EXPECT_LT(b2.keys_fetched, 50u);
  EXPECT_EQ(a2.keys_fetched, 0u);
  EXPECT_EQ(Value(*a_, "b3"), "from-b");
  EXPECT_EQ(a_->GetKeyspace("ks")->root, b_->GetKeyspace("ks")->root);
}

// A view that scans without values (a node from before them) is repaired
// as before: its rows are fetched by key.
TEST_F(SyncTest, RowsScannedWithoutValuesAreFetchedByKey) {
  for (int i = 0; i < 100; ++i) Put(*a_, absl::StrCat("k", i), "v");
  CountingReplica a(*ra_, /*carry_values=*/false);
  SyncOptions options;
  options.keyspace = "ks";
  auto stats = SyncKeyspace(a, *rb_, options);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(a.keys_fetched, 100u);
  EXPECT_EQ(stats->rows_to_b, 100u);
  EXPECT_EQ(a_->GetKeyspace("ks")->root, b_->GetKeyspace("ks")->root);
}

// Values are asked for only where rows are copied: not in a dry run, not of
// b when a is the source (b's extra rows are erased).
TEST_F(SyncTest, ValuesAreScannedOnlyForRowsThatAreCopied) {
  for (int i = 0; i < 40; ++i) Put(*b_, absl::StrCat("k", i), "only-on-b");
  CountingReplica a(*ra_);
  CountingReplica b(*rb_);
  SyncOptions options;
  options.keyspace = "ks";
  options.dry_run = true;
  ASSERT_TRUE(SyncKeyspace(a, b, options).ok());
  EXPECT_EQ(b.scans_with_values, 0);
  EXPECT_GT(b.scans, 0);

  options.dry_run = false;
  options.a_is_source = true;
  auto stats = SyncKeyspace(a, b, options);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->erased_from_b, 40u);
  EXPECT_EQ(b.scans_with_values, 0);
  EXPECT_EQ(b_->GetKeyspace("ks")->row_count, 0u);
}

// Rows that came with the scan wait for at most a few MiB before they are
// written, however many rows a batch may hold.
TEST_F(SyncTest, ScannedRowsAreWrittenInBatchesOfBoundedBytes) {
  const std::string big(1 << 20, 'x');
  for (int i = 0; i < 12; ++i) Put(*a_, absl::StrCat("big", i), big);
  CountingReplica b(*rb_);
  SyncOptions options;
  options.keyspace = "ks";
  options.batch_rows = 1000;
  auto stats = SyncKeyspace(*ra_, b, options);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->rows_to_b, 12u);
  EXPECT_GE(b.apply_calls, 3);
  EXPECT_LE(b.max_rows_applied, 4u);
  EXPECT_EQ(Value(*b_, "big11"), big);
}

}  // namespace
}  // namespace node
}  // namespace tally
