#include "mariadb/sidecar/apply_log.h"

#include "gtest/gtest.h"
#include "tree/hlc.h"

namespace tally {
namespace mariadb {
namespace {

TEST(ApplyLog, RoundTrips) {
  ApplyLog log;
  log.sequence = 42;
  for (int i = 0; i < 3; ++i) {
    AppliedRow& r = log.rows.emplace_back();
    r.keyspace = i == 2 ? "db.u" : "db.t";
    r.key = std::string("k\0", 2) + std::to_string(i);
    r.version.timestamp = tree::HlcTimestamp::FromParts(1000 + i, i);
    r.version.origin = i == 1 ? "node-b" : "node-a";
    r.deleted = i >= 1;
    r.erased = i == 2;
  }
  absl::StatusOr<ApplyLog> back = DecodeApplyLog(EncodeApplyLog(log));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->sequence, 42u);
  ASSERT_EQ(back->rows.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(back->rows[i].keyspace, log.rows[i].keyspace);
    EXPECT_EQ(back->rows[i].key, log.rows[i].key);
    EXPECT_EQ(back->rows[i].version, log.rows[i].version);
    EXPECT_EQ(back->rows[i].deleted, log.rows[i].deleted);
    EXPECT_EQ(back->rows[i].erased, log.rows[i].erased);
  }
}

TEST(ApplyLog, RefusesWhatItDidNotWrite) {
  ApplyLog log;
  log.rows.push_back({"db.t", "k", {}, false, false});
  const std::string bytes = EncodeApplyLog(log);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(DecodeApplyLog(bytes.substr(0, n)).ok()) << n;
  }
  EXPECT_FALSE(DecodeApplyLog(bytes + "x").ok());
  EXPECT_FALSE(DecodeApplyLog("\x02").ok());
  EXPECT_FALSE(
      DecodeApplyLog(std::string("\x01\0\0\0\0\0\0\0\0\xff\xff\xff\xff", 13))
          .ok());
}

}  // namespace
}  // namespace mariadb
}  // namespace tally
