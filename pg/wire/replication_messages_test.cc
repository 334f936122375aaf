#include "pg/wire/replication_messages.h"

#include <string>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pg/wire/internal/big_endian.h"

namespace tally {
namespace pg {
namespace {

using internal::PutBigEndian64;
using internal::PutBigEndian8;
using ::testing::HasSubstr;

std::string XLogDataBytes(absl::string_view payload) {
  std::string s = "w";
  PutBigEndian64(&s, 0x0000000100000010);
  PutBigEndian64(&s, 0x0000000100000090);
  PutBigEndian64(&s, 123456789);
  s.append(payload.data(), payload.size());
  return s;
}

std::string KeepaliveBytes(uint8_t reply) {
  std::string s = "k";
  PutBigEndian64(&s, 0x00000002000000a0);
  PutBigEndian64(&s, 987654321);
  PutBigEndian8(&s, reply);
  return s;
}

TEST(ReplicationMessages, XLogDataCarriesPositionsTimeAndPayload) {
  const std::string payload("B\0\x01", 3);
  const std::string bytes = XLogDataBytes(payload);
  const auto m = ParseReplicationMessage(bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  const auto* x = std::get_if<XLogData>(&*m);
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->wal_start, 0x0000000100000010u);
  EXPECT_EQ(x->wal_end, 0x0000000100000090u);
  EXPECT_EQ(x->send_time_us, 123456789);
  EXPECT_EQ(x->payload, payload);
}

TEST(ReplicationMessages, XLogDataMayHaveAnEmptyPayload) {
  const std::string bytes = XLogDataBytes("");
  const auto m = ParseReplicationMessage(bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(std::get<XLogData>(*m).payload.empty());
}

TEST(ReplicationMessages, KeepaliveCarriesWalEndAndReplyFlag) {
  for (uint8_t reply : {0, 1}) {
    const auto m = ParseReplicationMessage(KeepaliveBytes(reply));
    ASSERT_TRUE(m.ok()) << m.status();
    const auto* k = std::get_if<PrimaryKeepalive>(&*m);
    ASSERT_NE(k, nullptr);
    EXPECT_EQ(k->wal_end, 0x00000002000000a0u);
    EXPECT_EQ(k->send_time_us, 987654321);
    EXPECT_EQ(k->reply_requested, reply == 1);
  }
}

TEST(ReplicationMessages, EveryTruncationIsDataLoss) {
  for (const std::string& full : {XLogDataBytes(""), KeepaliveBytes(1)}) {
    for (size_t n = 0; n < full.size(); ++n) {
      const auto m = ParseReplicationMessage(full.substr(0, n));
      ASSERT_FALSE(m.ok()) << full[0] << " cut to " << n;
      EXPECT_EQ(m.status().code(), absl::StatusCode::kDataLoss);
    }
  }
}

TEST(ReplicationMessages, MalformedMessagesAreDataLossNamingWhat) {
  auto expect = [](const std::string& bytes, absl::string_view names) {
    const auto m = ParseReplicationMessage(bytes);
    ASSERT_FALSE(m.ok()) << names;
    EXPECT_EQ(m.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(m.status().message(), HasSubstr(names));
  };
  expect(KeepaliveBytes(0) + "x", "expected 17");
  expect(KeepaliveBytes(2), "reply flag is 2");
  expect("h" + std::string(20, '\0'), "unknown replication message type 0x68");
  expect("", "empty");
}

TEST(ReplicationMessages, StandbyStatusUpdateHasTheProtocolLayout) {
  StandbyStatusUpdate u;
  u.written_lsn = 0x0102030405060708;
  u.flushed_lsn = 0x1112131415161718;
  u.applied_lsn = 0x2122232425262728;
  u.client_time_us = 0x3132333435363738;
  u.reply_requested = true;
  const std::string expected(
      "r"
      "\x01\x02\x03\x04\x05\x06\x07\x08"
      "\x11\x12\x13\x14\x15\x16\x17\x18"
      "\x21\x22\x23\x24\x25\x26\x27\x28"
      "\x31\x32\x33\x34\x35\x36\x37\x38"
      "\x01",
      34);
  EXPECT_EQ(EncodeStandbyStatusUpdate(u), expected);
  u.reply_requested = false;
  EXPECT_EQ(EncodeStandbyStatusUpdate(u).back(), '\0');
}

TEST(ReplicationMessages, PgTimestampsCountFrom2000) {
  EXPECT_EQ(FromPgTimestamp(0), absl::FromCivil(absl::CivilSecond(2000, 1, 1),
                                                absl::UTCTimeZone()));
  const absl::Time t = absl::FromUnixMicros(1764547200123456);  // 2025-12-01
  EXPECT_EQ(ToPgTimestamp(t), 1764547200123456 - 946684800000000);
  EXPECT_EQ(FromPgTimestamp(ToPgTimestamp(t)), t);
  EXPECT_EQ(FromPgTimestamp(-1), absl::FromUnixMicros(946684800000000 - 1));
}

}  // namespace
}  // namespace pg
}  // namespace tally
