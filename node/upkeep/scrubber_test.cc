#include "node/upkeep/scrubber.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "support/temp_dir.h"
#include "tests/disk_damage.h"

namespace tally {
namespace node {
namespace {

using ::tally::testing::FlipByteInTable;
using ::tally::testing::TempDir;

storage::StoreOptions Options() {
  storage::StoreOptions options;
  options.node_name = "node-a";
  options.sync = false;
  options.default_depth = 8;
  return options;
}

// Incompressible, so that a flipped byte in a table stays one.
std::string ValueOf(int i) {
  return ::tally::testing::IncompressibleValue(77 + i, 48,
                                               absl::StrCat("v", i, "-"));
}

TEST(Scrubber, FindsAFlippedValueNobodyReadsAndCountsIt) {
  TempDir dir;
  {
    auto store = storage::Store::Open(dir.path(), Options()).value();
    storage::WriteRequest request;
    for (int i = 0; i < 200; ++i) {
      request.mutations.push_back(
          storage::Mutation::Put("ks", absl::StrCat("k", i), ValueOf(i)));
    }
    ASSERT_TRUE(store->Write(std::move(request)).ok());
  }
  // An open turns the log into a table file.
  ASSERT_TRUE(storage::Store::Open(dir.path(), Options()).ok());
  ASSERT_TRUE(FlipByteInTable(dir.path(), ValueOf(42)));

  auto store = storage::Store::Open(dir.path(), Options()).value();
  const tree::Digest128 before = store->GetKeyspace("ks")->root;
  ScrubberOptions options;
  options.leaves_per_step = 16;
  Scrubber scrubber(store.get(), options);
  ASSERT_TRUE(scrubber.RunPass().ok());
  const ScrubberStats stats = scrubber.stats();
  EXPECT_EQ(stats.passes, 1u);
  EXPECT_EQ(stats.rows_checked, 200u);
  EXPECT_EQ(stats.damaged_rows, 1u);
  EXPECT_EQ(stats.leaves_repaired, 1u);
  // The tree now differs from the peers' sound copy: anti-entropy repairs.
  EXPECT_NE(store->GetKeyspace("ks")->root, before);
  EXPECT_EQ(store->Get("ks", "k42").status().code(),
            absl::StatusCode::kDataLoss);

  v1::StatusResponse status;
  scrubber.FillStatus(&status);
  EXPECT_EQ(status.scrub().damaged_rows_found(), 1u);
  EXPECT_EQ(status.scrub().damaged_rows(), 1u);
  EXPECT_EQ(status.scrub().rows_checked(), 200u);
}

}  // namespace
}  // namespace node
}  // namespace tally
