#include "tools/cli/progress_report.h"

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tree/progress_meter.h"

namespace tally {
namespace cli {
namespace {

tree::ProgressEstimate Estimate(uint64_t done, std::optional<uint64_t> total,
                                double rate) {
  tree::ProgressMeter meter(absl::UnixEpoch());
  meter.set_total(total);
  // `rate` units a second for the whole window up to `done`.
  const double seconds = rate > 0 ? done / rate : 1;
  meter.Record(absl::UnixEpoch() + absl::Seconds(seconds), done);
  return meter.Estimate(absl::UnixEpoch() + absl::Seconds(seconds));
}

TEST(ProgressReport, BytesWithATotalShowPercentRateAndTimeLeft) {
  EXPECT_EQ(ProgressText(Estimate(25 << 20, 100 << 20, 5 << 20), kBytes),
            "25.0 MB of 100.0 MB (25%), 5.0 MB/s, ETA 15s");
}

TEST(ProgressReport, WithoutATotalTheTimeLeftIsUnknown) {
  EXPECT_EQ(ProgressText(Estimate(12000, std::nullopt, 3000), "rows"),
            "12000 rows, 3000 rows/s, ETA unknown");
}

TEST(ProgressReport, RowsWithATotal) {
  EXPECT_EQ(ProgressText(Estimate(12000, 50000, 1000), "rows"),
            "12000 of 50000 rows (24%), 1000 rows/s, ETA 38s");
}

TEST(ProgressReport, PercentNeverRoundsUpToAHundred) {
  EXPECT_EQ(ProgressText(Estimate(9999, 10000, 1000), "rows"),
            "9999 of 10000 rows (99%), 1000 rows/s, ETA 1s");
}

TEST(ProgressReport, JsonHasNullsForWhatIsNotKnown) {
  const Json known = ProgressJson(Estimate(500, 1000, 100), "rows");
  EXPECT_EQ(known["done"], 500);
  EXPECT_EQ(known["total"], 1000);
  EXPECT_EQ(known["unit"], "rows");
  EXPECT_DOUBLE_EQ(known["fraction"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(known["rate"].get<double>(), 100);
  EXPECT_DOUBLE_EQ(known["eta_seconds"].get<double>(), 5);
  EXPECT_DOUBLE_EQ(known["elapsed_seconds"].get<double>(), 5);

  const Json unknown = ProgressJson(Estimate(500, std::nullopt, 100), kBytes);
  EXPECT_TRUE(unknown["total"].is_null());
  EXPECT_TRUE(unknown["fraction"].is_null());
  EXPECT_TRUE(unknown["eta_seconds"].is_null());
  EXPECT_EQ(unknown["unit"], "bytes");
}

}  // namespace
}  // namespace cli
}  // namespace tally
