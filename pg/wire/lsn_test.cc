#include "pg/wire/lsn.h"

#include "gtest/gtest.h"

namespace tally {
namespace pg {
namespace {

TEST(Lsn, ParsesAndFormatsBothHalves) {
  absl::StatusOr<Lsn> lsn = ParseLsn("16/B374D848");
  ASSERT_TRUE(lsn.ok()) << lsn.status();
  EXPECT_EQ(*lsn, (Lsn{0x16} << 32) | 0xB374D848);
  EXPECT_EQ(FormatLsn(*lsn), "16/B374D848");
  EXPECT_EQ(*ParseLsn("0/0"), kInvalidLsn);
  EXPECT_EQ(*ParseLsn("ffffffff/ffffffff"), ~Lsn{0});
  EXPECT_EQ(FormatLsn(0x1'0000'0001), "1/1");
}

TEST(Lsn, OrdersAsTheWal) {
  EXPECT_LT(*ParseLsn("0/FFFFFFFF"), *ParseLsn("1/0"));
}

TEST(Lsn, RejectsWhatIsNotAPosition) {
  for (const char* bad : {"", "/", "1/", "/1", "1", "1/2/3", "g/1", "1/-1",
                          "123456789/0", " 1/1", "1/1 ", "+1/1"}) {
    absl::StatusOr<Lsn> lsn = ParseLsn(bad);
    EXPECT_FALSE(lsn.ok()) << bad;
    EXPECT_TRUE(absl::IsInvalidArgument(lsn.status())) << bad;
  }
}

}  // namespace
}  // namespace pg
}  // namespace tally
