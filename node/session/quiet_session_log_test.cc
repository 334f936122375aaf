#include "node/session/quiet_session_log.h"

#include "gtest/gtest.h"

namespace tally {
namespace node {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'700'000'000);

TEST(QuietSessionLog, QuietSyncsAreSummedUpOncePerInterval) {
  QuietSessionLog log("10.0.0.2:7400", absl::Minutes(10));
  for (int i = 0; i < 59; ++i) {
    EXPECT_FALSE(
        log.OnQuiet(kStart + absl::Seconds(10 * i), i % 2 ? "users" : "orders"))
        << i;
  }
  std::optional<QuietSessionLog::Summary> summary =
      log.OnQuiet(kStart + absl::Minutes(10), "users");
  ASSERT_TRUE(summary);
  EXPECT_EQ(summary->syncs, 60u);
  EXPECT_EQ(summary->keyspaces, (std::set<std::string>{"orders", "users"}));
  EXPECT_EQ(summary->over, absl::Minutes(10));
  // The next interval starts with the next quiet sync.
  EXPECT_FALSE(log.OnQuiet(kStart + absl::Minutes(30), "users"));
  EXPECT_FALSE(log.OnQuiet(kStart + absl::Minutes(39), "users"));
  summary = log.OnQuiet(kStart + absl::Minutes(40), "users");
  ASSERT_TRUE(summary);
  EXPECT_EQ(summary->syncs, 3u);
}

TEST(QuietSessionLog, AnEventfulSyncFlushesTheQuietOnesBeforeIt) {
  QuietSessionLog log("10.0.0.2:7400", absl::Minutes(10));
  EXPECT_FALSE(log.OnEventful(kStart));  // nothing to flush
  EXPECT_FALSE(log.OnQuiet(kStart + absl::Seconds(1), "users"));
  EXPECT_FALSE(log.OnQuiet(kStart + absl::Seconds(2), "users"));
  std::optional<QuietSessionLog::Summary> summary =
      log.OnEventful(kStart + absl::Seconds(3));
  ASSERT_TRUE(summary);
  EXPECT_EQ(summary->syncs, 2u);
  EXPECT_EQ(summary->over, absl::Seconds(2));
  EXPECT_FALSE(log.OnEventful(kStart + absl::Seconds(4)));
}

}  // namespace
}  // namespace node
}  // namespace tally
