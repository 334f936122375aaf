#include "node/upkeep/maintenance.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "support/temp_dir.h"

namespace tally {
namespace node {
namespace {

using ::tally::testing::TempDir;

class MaintenanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    storage::StoreOptions options;
    options.node_name = "node-a";
    options.sync = false;
    options.default_depth = 6;
    auto store = storage::Store::Open(dir_.path(), options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }

  void Put(int n, const std::string& prefix = "k") {
    for (int i = 0; i < n; ++i) {
      storage::WriteRequest w;
      w.mutations.push_back(
          storage::Mutation::Put("ks", absl::StrCat(prefix, i), "v"));
      ASSERT_TRUE(store_->Write(std::move(w)).ok());
    }
  }

  void Delete(int n, const std::string& prefix = "k") {
    for (int i = 0; i < n; ++i) {
      storage::WriteRequest w;
      w.mutations.push_back(
          storage::Mutation::Delete("ks", absl::StrCat(prefix, i)));
      ASSERT_TRUE(store_->Write(std::move(w)).ok());
    }
  }

  TempDir dir_;
  std::unique_ptr<storage::Store> store_;
};

TEST_F(MaintenanceTest, KeepsAtMostTheConfiguredNumberOfEntries) {
  Put(100);
  MaintenanceOptions options;
  options.log_retention_entries = 30;
  options.log_retention_age = absl::ZeroDuration();
  Maintenance maintenance(store_.get(), options,
                          [] { return absl::InfinitePast(); });
  ASSERT_TRUE(maintenance.RunOnce(absl::Now()).ok());
  EXPECT_EQ(store_->first_sequence(), 71u);
  EXPECT_EQ(maintenance.stats().log_entries_trimmed, 70u);
  ::tally::v1::StatusResponse status;
  maintenance.FillStatus(&status);
  EXPECT_EQ(status.first_sequence(), 71u);
  EXPECT_EQ(status.log_entries_trimmed(), 70u);
}

TEST_F(MaintenanceTest, DropsEntriesOlderThanTheAgeJudgedByItsMarks) {
  Put(50);  // before the maintenance started: counted as written then
  MaintenanceOptions options;
  options.log_retention_entries = 0;
  options.log_retention_age = absl::Hours(1);
  Maintenance maintenance(store_.get(), options,
                          [] { return absl::InfinitePast(); });
  const absl::Time now = absl::Now();
  ASSERT_TRUE(maintenance.RunOnce(now).ok());
  EXPECT_EQ(store_->first_sequence(), 1u);  // nothing is an hour old
  ASSERT_TRUE(maintenance.RunOnce(now + absl::Minutes(30)).ok());
  Put(20, "later");  // written after the mark of minute 30
  ASSERT_TRUE(maintenance.RunOnce(now + absl::Minutes(59)).ok());
  EXPECT_EQ(store_->first_sequence(), 1u);
  // At minute 95 the first 50 are known to be over an hour old; the 20
  // may have been written as late as minute 59.
  ASSERT_TRUE(maintenance.RunOnce(now + absl::Minutes(95)).ok());
  EXPECT_EQ(store_->first_sequence(), 51u);
  ASSERT_TRUE(maintenance.RunOnce(now + absl::Minutes(125)).ok());
  EXPECT_EQ(store_->first_sequence(), 71u);
}

TEST_F(MaintenanceTest, PurgesNothingUntilEveryPeerHasSynced) {
  Put(10);
  Delete(10);
  MaintenanceOptions options;
  options.tombstone_min_age = absl::Milliseconds(1);
  options.max_clock_skew = absl::Seconds(5);
  absl::Time synced = absl::InfinitePast();
  Maintenance maintenance(store_.get(), options, [&] { return synced; });
  const absl::Time later = absl::Now() + absl::Minutes(1);
  ASSERT_TRUE(maintenance.RunOnce(later).ok());
  EXPECT_EQ(store_->GetKeyspace("ks")->row_count, 10u);

  // A session that started before the deletes (allowing for skew) does
  // not cover them.
  synced = absl::Now();
  ASSERT_TRUE(maintenance.RunOnce(later).ok());
  EXPECT_EQ(store_->GetKeyspace("ks")->row_count, 10u);
  EXPECT_EQ(maintenance.PurgeHorizon(later), synced - absl::Seconds(5));

  // One that started after them, by more than the skew, does.
  synced = absl::Now() + absl::Seconds(6);
  ASSERT_TRUE(maintenance.RunOnce(later).ok());
  EXPECT_EQ(store_->GetKeyspace("ks")->row_count, 0u);
  EXPECT_EQ(maintenance.stats().tombstones_purged, 10u);
}

TEST_F(MaintenanceTest, WithoutPeersTheMinimumAgeAloneDecides) {
  Put(5);
  Delete(5);
  MaintenanceOptions options;
  options.tombstone_min_age = absl::Minutes(10);
  Maintenance maintenance(store_.get(), options,
                          [] { return absl::InfiniteFuture(); });
  ASSERT_TRUE(maintenance.RunOnce(absl::Now()).ok());
  EXPECT_EQ(store_->GetKeyspace("ks")->row_count, 5u);
  ASSERT_TRUE(maintenance.RunOnce(absl::Now() + absl::Minutes(11)).ok());
  EXPECT_EQ(store_->GetKeyspace("ks")->row_count, 0u);
}

TEST_F(MaintenanceTest, RunsOnItsTimerAndStops) {
  Put(20);
  MaintenanceOptions options;
  options.log_retention_entries = 5;
  options.interval = absl::Milliseconds(20);
  Maintenance maintenance(store_.get(), options,
                          [] { return absl::InfinitePast(); });
  maintenance.Start();
  for (int i = 0; i < 250 && store_->first_sequence() != 16; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  maintenance.Shutdown();
  EXPECT_EQ(store_->first_sequence(), 16u);
  EXPECT_GE(maintenance.stats().passes, 1u);
}

}  // namespace
}  // namespace node
}  // namespace tally
