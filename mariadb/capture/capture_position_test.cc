#include "mariadb/capture/capture_position.h"

#include "gtest/gtest.h"

namespace tally {
namespace mariadb {
namespace {

TEST(CapturePositionTest, RoundTrips) {
  CapturePosition p;
  p.gtid = "0-1-42,1-2-7";
  p.last_stamp = tree::HlcTimestamp::FromRaw(123456789);
  p.fingerprints["db1.t"] = "postgresql/1:abc";
  p.fingerprints["db1.u"] = std::string(kMissingTable);
  absl::StatusOr<CapturePosition> back = CapturePosition::Decode(p.Encode());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, p);
}

TEST(CapturePositionTest, EmptyGtidRoundTrips) {
  CapturePosition p;
  absl::StatusOr<CapturePosition> back = CapturePosition::Decode(p.Encode());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->gtid, "");
  EXPECT_TRUE(back->fingerprints.empty());
}

TEST(CapturePositionTest, RefusesOtherBytes) {
  // A PostgreSQL sidecar's position, garbage, a truncated one, a duplicate.
  for (absl::string_view bad :
       {absl::string_view("\x01\x00\x00\x00", 4), absl::string_view(""),
        absl::string_view("mariadb/1\ngtid\t0-1-1"),
        absl::string_view("mariadb/1\ngtid\t0-1-1\nstamp\tx"),
        absl::string_view(
            "mariadb/1\ngtid\t\nstamp\t1\ntable\ta\tf\ntable\ta\tg"),
        absl::string_view("mariadb/1\ngtid\t\nstamp\t1\nwhat\t1")}) {
    absl::StatusOr<CapturePosition> p = CapturePosition::Decode(bad);
    EXPECT_TRUE(absl::IsDataLoss(p.status())) << bad;
  }
}

}  // namespace
}  // namespace mariadb
}  // namespace tally
