#include "pg/sidecar/apply/apply_message.h"

#include <string>

#include "gtest/gtest.h"

namespace tally {
namespace pg {
namespace {

tree::Version V(uint64_t millis, const std::string& origin) {
  return tree::Version{tree::HlcTimestamp::FromParts(millis, 3), origin};
}

ApplyMessage Sample() {
  ApplyMessage m;
  m.apply_sequence = 0x0102030405060708;
  m.token = RowToken{int64_t{849657445123456}, OriginId{2}};
  m.rows = {
      {"public.t", std::string("\0\0\0\4\0\0\0\1", 8), V(100, "eu/db-1"),
       false},
      {"public.u", "k2", V(101, "us/db-2"), true},
      {"public.t", "", V(102, "eu/db-1"), false},
      {"public.t", "k4", tree::Version{}, true},          // bootstrap version
      {"public.u", "k5", V(103, "us/db-2"), true, true},  // erased
  };
  return m;
}

void ExpectEqual(const ApplyMessage& a, const ApplyMessage& b) {
  EXPECT_EQ(a.apply_sequence, b.apply_sequence);
  EXPECT_EQ(a.token, b.token);
  EXPECT_EQ(a.rows, b.rows);
}

TEST(ApplyMessage, RoundTrips) {
  const ApplyMessage m = Sample();
  auto back = DecodeApplyMessage(EncodeApplyMessage(m));
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectEqual(*back, m);
  // Also with no rows.
  ApplyMessage empty;
  back = DecodeApplyMessage(EncodeApplyMessage(empty));
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectEqual(*back, empty);
}

TEST(ApplyMessage, NamesAreListedOnce) {
  ApplyMessage m;
  for (int i = 0; i < 1000; ++i) {
    m.rows.push_back({"public.a_rather_long_table_name", std::to_string(i),
                      V(i, "a-rather-long-origin/name"), false});
  }
  const std::string bytes = EncodeApplyMessage(m);
  size_t keys = 0;
  for (const AppliedRow& row : m.rows) keys += row.key.size();
  // Per row: its key plus 21 bytes of framing; the names once.
  EXPECT_LT(bytes.size(), keys + 21 * m.rows.size() + 200);
  auto back = DecodeApplyMessage(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectEqual(*back, m);
}

TEST(ApplyMessage, EveryTruncationAndExtensionIsDataLoss) {
  const std::string bytes = EncodeApplyMessage(Sample());
  for (size_t len = 0; len < bytes.size(); ++len) {
    EXPECT_EQ(DecodeApplyMessage(bytes.substr(0, len)).status().code(),
              absl::StatusCode::kDataLoss)
        << "length " << len;
  }
  EXPECT_EQ(DecodeApplyMessage(bytes + "x").status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(ApplyMessage, RefusesBadFormatIndexesAndFlags) {
  const std::string good = EncodeApplyMessage(Sample());
  std::string bad = good;
  bad[0] = 2;
  EXPECT_EQ(DecodeApplyMessage(bad).status().code(),
            absl::StatusCode::kDataLoss);
  // The last byte is the last row's flags.
  bad = good;
  bad.back() = 0x04;
  EXPECT_EQ(DecodeApplyMessage(bad).status().code(),
            absl::StatusCode::kDataLoss);
  // Erased but not deleted.
  bad.back() = 0x02;
  EXPECT_EQ(DecodeApplyMessage(bad).status().code(),
            absl::StatusCode::kDataLoss);
  // A row naming a keyspace the message does not list: one row, keyspace 1.
  ApplyMessage one;
  one.rows = {{"ks", "k", V(1, "o"), false}};
  bad = EncodeApplyMessage(one);
  const size_t row_at = bad.size() - (4 + 4 + 1 + 8 + 4 + 1);
  bad[row_at + 3] = 1;
  auto s = DecodeApplyMessage(bad).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("names keyspace 1"), std::string::npos) << s;
  // A row count that cannot fit is refused before allocating.
  bad = EncodeApplyMessage(ApplyMessage{});
  bad.replace(bad.size() - 4, 4, "\xff\xff\xff\xff");
  EXPECT_EQ(DecodeApplyMessage(bad).status().code(),
            absl::StatusCode::kDataLoss);
  // A bad token.
  bad = good;
  bad[9] = 0x7f;
  EXPECT_EQ(DecodeApplyMessage(bad).status().code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace pg
}  // namespace tally
