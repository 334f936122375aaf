#include "node/feed/keyspace_trouble.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "node/observe/metrics.h"

namespace tally {
namespace node {
namespace {

TEST(KeyspaceTrouble, RejectedRowsPutAKeyspaceInTroubleUntilItFlows) {
  absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  KeyspaceTrouble trouble([&now] { return now; });
  EXPECT_FALSE(trouble.InTrouble("public.t1"));
  trouble.Rejected({"public.t1", kTroubleRejected, std::string("k\x01", 2),
                    absl::InvalidArgumentError("bad integer"), "side-a", 3});
  now += absl::Seconds(2);
  trouble.Rejected({"public.t1", kTroubleSchema, "k2",
                    absl::FailedPreconditionError("column v differs"), "side-a",
                    1});
  EXPECT_TRUE(trouble.InTrouble("public.t1"));
  EXPECT_FALSE(trouble.InTrouble("public.t2"));
  EXPECT_EQ(trouble.InTrouble(), std::vector<std::string>{"public.t1"});

  v1::StatusResponse status;
  status.mutable_postgres()->add_tables()->set_keyspace("public.t1");
  status.mutable_postgres()->add_tables()->set_keyspace("public.t2");
  trouble.FillStatus(&status);
  ASSERT_EQ(status.keyspace_trouble_size(), 1);
  const v1::KeyspaceTroubleStatus& t = status.keyspace_trouble(0);
  EXPECT_TRUE(t.in_trouble());
  EXPECT_EQ(t.reason(), "schema");  // the last one
  EXPECT_EQ(t.last_key(), "k2");
  EXPECT_EQ(t.last_error(), "column v differs");
  EXPECT_EQ(t.peer(), "side-a");
  EXPECT_EQ(t.rows_rejected(), 4u);
  EXPECT_EQ(t.since_unix_ms(), 1'800'000'000'000);
  EXPECT_EQ(t.last_unix_ms(), 1'800'000'002'000);
  ASSERT_EQ(t.rejected_size(), 2);
  // A table whose rows are left out does not look plainly ready.
  EXPECT_TRUE(absl::StrContains(status.postgres().tables(0).trouble(),
                                "column v differs"));
  EXPECT_EQ(status.postgres().tables(1).trouble(), "");
  const std::string metrics = RenderPrometheus(status);
  EXPECT_TRUE(absl::StrContains(
      metrics, "tally_keyspace_in_trouble{keyspace=\"public.t1\"} 1\n"))
      << metrics;
  EXPECT_TRUE(absl::StrContains(metrics,
                                "tally_keyspace_rows_rejected_total{keyspace="
                                "\"public.t1\",reason=\"rejected\"} 3\n"));
  EXPECT_TRUE(absl::StrContains(metrics,
                                "tally_keyspace_rows_rejected_total{keyspace="
                                "\"public.t1\",reason=\"schema\"} 1\n"));

  // The keys are shown escaped.
  KeyspaceTrouble escaped;
  escaped.Rejected({"ks", kTroubleRejected, std::string("k\x01", 2),
                    absl::InvalidArgumentError("x"), "p", 1});
  v1::StatusResponse e;
  escaped.FillStatus(&e);
  EXPECT_EQ(e.keyspace_trouble(0).last_key(), "k\\x01");

  trouble.Flowed("public.t1");
  EXPECT_FALSE(trouble.InTrouble("public.t1"));
  v1::StatusResponse after;
  trouble.FillStatus(&after);
  ASSERT_EQ(after.keyspace_trouble_size(), 1);  // its counts stay
  EXPECT_FALSE(after.keyspace_trouble(0).in_trouble());
  EXPECT_EQ(after.keyspace_trouble(0).since_unix_ms(), 0);
  EXPECT_TRUE(absl::StrContains(
      RenderPrometheus(after),
      "tally_keyspace_in_trouble{keyspace=\"public.t1\"} 0\n"));
}

// A node with no keyspace ever in trouble shows neither family.
TEST(KeyspaceTrouble, NoTroubleNoSeries) {
  KeyspaceTrouble trouble;
  trouble.Flowed("ks");  // nothing to end
  v1::StatusResponse status;
  trouble.FillStatus(&status);
  EXPECT_EQ(status.keyspace_trouble_size(), 0);
  EXPECT_FALSE(
      absl::StrContains(RenderPrometheus(status), "tally_keyspace_in_trouble"));
}

}  // namespace
}  // namespace node
}  // namespace tally
