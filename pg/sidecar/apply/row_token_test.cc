#include "pg/sidecar/apply/row_token.h"

#include <string>

#include "gtest/gtest.h"

namespace tally {
namespace pg {
namespace {

TEST(RowToken, EncodingIsFixedAndByteExact) {
  const RowToken t{int64_t{0x0102030405060708}, OriginId{0x0a0b}};
  EXPECT_EQ(t.Encode(),
            std::string("\x01\x01\x02\x03\x04\x05\x06\x07\x08\x0a\x0b", 11));
  const RowToken none{std::nullopt, kLocalOrigin};
  EXPECT_EQ(none.Encode(), std::string("\x02\0\0\0\0\0\0\0\0\0\0", 11));
  EXPECT_EQ(t.Encode().size(), RowToken::kEncodedBytes);
}

TEST(RowToken, RoundTrips) {
  for (const RowToken& t :
       {RowToken{int64_t{0}, kLocalOrigin},
        RowToken{std::nullopt, kLocalOrigin},
        RowToken{std::nullopt, OriginId{7}},
        RowToken{int64_t{-1}, OriginId{65535}},  // before 2000: negative
        RowToken{int64_t{849657445123456}, OriginId{1}}}) {
    auto back = RowToken::Decode(t.Encode());
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, t) << t.DebugString();
  }
}

TEST(RowToken, ANullCommitTimeDiffersFromTimeZero) {
  EXPECT_NE((RowToken{std::nullopt, kLocalOrigin}),
            (RowToken{int64_t{0}, kLocalOrigin}));
  EXPECT_NE((RowToken{std::nullopt, kLocalOrigin}.Encode()),
            (RowToken{int64_t{0}, kLocalOrigin}.Encode()));
}

TEST(RowToken, BadBytesAreDataLoss) {
  const std::string good = RowToken{int64_t{5}, OriginId{1}}.Encode();
  for (size_t len = 0; len < good.size(); ++len) {
    EXPECT_EQ(RowToken::Decode(good.substr(0, len)).status().code(),
              absl::StatusCode::kDataLoss);
  }
  EXPECT_EQ(RowToken::Decode(good + "x").status().code(),
            absl::StatusCode::kDataLoss);
  std::string bad = good;
  bad[0] = 0x03;
  EXPECT_EQ(RowToken::Decode(bad).status().code(), absl::StatusCode::kDataLoss);
  bad[0] = 0x00;
  EXPECT_EQ(RowToken::Decode(bad).status().code(), absl::StatusCode::kDataLoss);
  // "No commit time" with a time in it.
  bad = good;
  bad[0] = 0x02;
  EXPECT_EQ(RowToken::Decode(bad).status().code(), absl::StatusCode::kDataLoss);
  // An embedded value (what an embedded store keeps) is no token.
  EXPECT_EQ(RowToken::Decode("hello world").status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(RowToken, FromTheServersBinaryColumns) {
  // 2024-01-02 03:04:05.123456+00 is 757479845123456 µs after 2000-01-01.
  const std::string ts("\x00\x02\xb0\xec\x85\x17\xd5\x80", 8);
  const std::string oid("\0\0\0\1", 4);
  auto t = RowToken::FromBinary(Field::Of(ts), Field::Of(oid));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->commit_time_us, int64_t{757479845123456});
  EXPECT_EQ(t->origin, OriginId{1});
  EXPECT_EQ(t->DebugString(), "2024-01-02T03:04:05.123456Z origin 1");
  // Rows older than the commit-timestamp horizon: both NULL.
  t = RowToken::FromBinary(Field::Null(), Field::Null());
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, (RowToken{std::nullopt, kLocalOrigin}));
  EXPECT_EQ(t->DebugString(), "no commit time, origin 0");
  // Wrong sizes, and an origin id PostgreSQL cannot have.
  EXPECT_EQ(
      RowToken::FromBinary(Field::Of("1234"), Field::Of(oid)).status().code(),
      absl::StatusCode::kDataLoss);
  EXPECT_EQ(
      RowToken::FromBinary(Field::Of(ts), Field::Of("12")).status().code(),
      absl::StatusCode::kDataLoss);
  EXPECT_EQ(
      RowToken::FromBinary(Field::Of(ts), Field::Of(std::string("\0\1\0\0", 4)))
          .status()
          .code(),
      absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace pg
}  // namespace tally
