#include "pg/sidecar/capture_position.h"

#include <string>

#include "gtest/gtest.h"

namespace tally {
namespace pg {
namespace {

CapturePosition WithPartial() {
  CapturePosition p;
  p.system_id = 7312345678901234567ull;
  p.resume_lsn = 0x16B374D848ull;
  p.partial = CapturePosition::Partial{
      0x16C0000000ull, 20000,
      tree::Version{tree::HlcTimestamp::FromParts(1764590000000, 3), "db-3"}};
  p.fingerprints = {{"public.a", "postgresql/1:0123"},
                    {"public.b", "postgresql/1:4567"}};
  return p;
}

TEST(CapturePosition, RoundTripsWithAndWithoutPartialAndFingerprints) {
  CapturePosition plain;
  plain.system_id = 1;
  plain.resume_lsn = 0x1000;
  for (const CapturePosition& p : {plain, WithPartial()}) {
    auto back = CapturePosition::Decode(p.Encode());
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(*back == p) << back->DebugString();
  }
}

TEST(CapturePosition, LayoutIsByteExact) {
  CapturePosition p;
  p.system_id = 0x0102030405060708ull;
  p.resume_lsn = 0x1112131415161718ull;
  EXPECT_EQ(p.Encode(), std::string("\x01\x00"
                                    "\x01\x02\x03\x04\x05\x06\x07\x08"
                                    "\x11\x12\x13\x14\x15\x16\x17\x18",
                                    18));
  p.fingerprints = {{"s.t", "fp"}};
  EXPECT_EQ(p.Encode(), std::string("\x01\x02"
                                    "\x01\x02\x03\x04\x05\x06\x07\x08"
                                    "\x11\x12\x13\x14\x15\x16\x17\x18"
                                    "\x00\x00\x00\x01"
                                    "\x00\x00\x00\x03s.t"
                                    "\x00\x00\x00\x02"
                                    "fp",
                                    35));
}

// A position written before fingerprints were recorded (no flag bit 1)
// still decodes: it has none, and the sidecar records them at its next
// write.
TEST(CapturePosition, APositionWithoutFingerprintsDecodes) {
  auto back = CapturePosition::Decode(std::string(
      "\x01\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00"
      "\x10\x00",
      18));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->fingerprints.empty());
  EXPECT_EQ(back->resume_lsn, 0x1000u);
}

TEST(CapturePosition, BadBytesAreDataLoss) {
  const std::string good = WithPartial().Encode();
  for (size_t len = 0; len < good.size(); ++len) {
    EXPECT_EQ(CapturePosition::Decode(good.substr(0, len)).status().code(),
              absl::StatusCode::kDataLoss)
        << len;
  }
  EXPECT_EQ(CapturePosition::Decode(good + "x").status().code(),
            absl::StatusCode::kDataLoss);
  std::string bad = good;
  bad[0] = 2;  // format
  EXPECT_EQ(CapturePosition::Decode(bad).status().code(),
            absl::StatusCode::kDataLoss);
  bad = good;
  bad[1] = 4;  // flags
  EXPECT_EQ(CapturePosition::Decode(bad).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(CapturePosition, DebugStringNamesTheResumePoint) {
  EXPECT_NE(WithPartial().DebugString().find("16/B374D848"), std::string::npos);
  EXPECT_NE(WithPartial().DebugString().find("20000 changes"),
            std::string::npos);
}

}  // namespace
}  // namespace pg
}  // namespace tally
