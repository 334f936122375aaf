#include "pg/schema/preflight.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "support/pg_cluster.h"
#include "support/pg_test_macros.h"

namespace tally {
namespace pg {
namespace {

using ::tally::testing::PgCluster;
using ::tally::testing::PgClusterOptions;

std::unique_ptr<PgCluster> StartCluster(std::vector<std::string> settings) {
  PgClusterOptions options;
  options.settings = std::move(settings);
  absl::StatusOr<std::unique_ptr<PgCluster>> pg = PgCluster::Start(options);
  EXPECT_TRUE(pg.ok()) << pg.status();
  return pg.ok() ? std::move(*pg) : nullptr;
}

std::unique_ptr<Connection> Connect(const PgCluster& pg,
                                    absl::string_view user = "postgres",
                                    std::string replication = "") {
  ConnectOptions options;
  options.replication = std::move(replication);
  absl::StatusOr<std::unique_ptr<Connection>> c =
      Connection::Open(pg.Uri("postgres", user), options);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

bool Mentions(const absl::Status& s, absl::string_view text) {
  return s.message().find(text) != absl::string_view::npos;
}

TEST(Preflight, AReadyDatabasePassesAndGivesTheSchemas) {
  TALLY_SKIP_UNLESS_POSTGRES();
  auto pg = StartCluster({});
  ASSERT_NE(pg, nullptr);
  ASSERT_TRUE(pg->Execute("CREATE TABLE public.a (id int PRIMARY KEY, v text);"
                          "CREATE TABLE public.b (k text PRIMARY KEY);")
                  .ok());
  auto c = Connect(*pg);
  ASSERT_NE(c, nullptr);
  PreflightOptions options;
  options.tables = {"public.b", "public.a"};
  auto tables = Preflight(*c, options);
  ASSERT_TRUE(tables.ok()) << tables.status();
  ASSERT_EQ(tables->size(), 2u);
  EXPECT_EQ((*tables)[0].name(), "public.b");
  EXPECT_EQ((*tables)[1].name(), "public.a");
}

TEST(Preflight, APartitionedTablePassesAndAKeptPartitionOfItIsRefused) {
  TALLY_SKIP_UNLESS_POSTGRES();
  auto pg = StartCluster({});
  ASSERT_NE(pg, nullptr);
  ASSERT_TRUE(
      pg->Execute(
            "CREATE TABLE public.ev (id bigint, d date, PRIMARY KEY (id, d)) "
            "PARTITION BY RANGE (d);"
            "CREATE TABLE public.ev_1 PARTITION OF public.ev FOR VALUES FROM "
            "('2026-01-01') TO ('2026-02-01') PARTITION BY HASH (id);"
            "CREATE TABLE public.ev_1a PARTITION OF public.ev_1 FOR VALUES "
            "WITH (MODULUS 2, REMAINDER 0);"
            "CREATE TABLE public.ev_1b PARTITION OF public.ev_1 FOR VALUES "
            "WITH (MODULUS 2, REMAINDER 1);"
            "CREATE TABLE public.loose (id bigint, d date) PARTITION BY "
            "RANGE (d)")
          .ok());
  auto c = Connect(*pg);
  ASSERT_NE(c, nullptr);
  PreflightOptions options;
  options.tables = {"public.ev"};
  auto tables = Preflight(*c, options);
  ASSERT_TRUE(tables.ok()) << tables.status();
  EXPECT_TRUE((*tables)[0].partitioned());
  // A leaf alone is a plain table of its own.
  options.tables = {"public.ev_1a"};
  tables = Preflight(*c, options);
  ASSERT_TRUE(tables.ok()) << tables.status();
  EXPECT_FALSE((*tables)[0].partitioned());
  // A partition (at any depth) of a kept table is refused, naming the fix;
  // so is a partitioned table without a key.
  options.tables = {"public.ev_1b", "public.ev", "public.loose"};
  tables = Preflight(*c, options);
  EXPECT_EQ(tables.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Mentions(tables.status(),
                       "public.ev_1b is a partition of public.ev, which is "
                       "kept too"))
      << tables.status();
  EXPECT_TRUE(Mentions(tables.status(), "remove --table public.ev_1b"));
  EXPECT_TRUE(Mentions(tables.status(), "public.loose has no primary key"));
}

TEST(Preflight, WrongSettingsAreRefusedWithTheFix) {
  TALLY_SKIP_UNLESS_POSTGRES();
  auto pg = StartCluster({"wal_level=replica", "track_commit_timestamp=off"});
  ASSERT_NE(pg, nullptr);
  auto c = Connect(*pg);
  ASSERT_NE(c, nullptr);
  absl::Status s = Preflight(*c, {}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(Mentions(s, "wal_level is 'replica'")) << s;
  EXPECT_TRUE(Mentions(s, "ALTER SYSTEM SET wal_level = logical")) << s;
  EXPECT_TRUE(Mentions(s, "track_commit_timestamp is off")) << s;
  EXPECT_TRUE(Mentions(s, "ALTER SYSTEM SET track_commit_timestamp = on")) << s;
}

TEST(Preflight, ARoleWithoutReplicationOrGrantsIsRefusedUntilGranted) {
  TALLY_SKIP_UNLESS_POSTGRES();
  auto pg = StartCluster({});
  ASSERT_NE(pg, nullptr);
  ASSERT_TRUE(pg->Execute("CREATE ROLE app LOGIN;"
                          "CREATE TABLE public.t (id int PRIMARY KEY);")
                  .ok());
  auto c = Connect(*pg, "app");
  ASSERT_NE(c, nullptr);
  PreflightOptions options;
  options.tables = {"public.t"};
  absl::Status s = Preflight(*c, options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_TRUE(Mentions(s, "ALTER ROLE \"app\" REPLICATION")) << s;
  EXPECT_TRUE(Mentions(s,
                       "GRANT EXECUTE ON FUNCTION "
                       "pg_replication_origin_create(text)"))
      << s;
  EXPECT_TRUE(Mentions(s, "may not read and write table public.t")) << s;
  EXPECT_TRUE(Mentions(s,
                       "GRANT SET ON PARAMETER session_replication_role TO "
                       "\"app\""))
      << s;

  ASSERT_TRUE(
      pg->Execute("ALTER ROLE app REPLICATION;"
                  "GRANT EXECUTE ON FUNCTION "
                  "pg_replication_origin_create(text), "
                  "pg_replication_origin_session_setup(text), "
                  "pg_replication_origin_xact_setup(pg_lsn, timestamptz), "
                  "pg_replication_origin_progress(text, boolean) TO app;"
                  "GRANT SELECT, INSERT, UPDATE, DELETE ON public.t TO app;")
          .ok());
  // Everything but the replica role: refused for that alone.
  s = Preflight(*c, options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_TRUE(Mentions(s, "session_replication_role")) << s;
  EXPECT_FALSE(Mentions(s, "REPLICATION;")) << s;
  ASSERT_TRUE(
      pg->Execute("GRANT SET ON PARAMETER session_replication_role TO app")
          .ok());
  auto tables = Preflight(*c, options);
  EXPECT_TRUE(tables.ok()) << tables.status();
}

TEST(Preflight, TablesWithoutAKeyOrMissingAreAllNamed) {
  TALLY_SKIP_UNLESS_POSTGRES();
  auto pg = StartCluster({});
  ASSERT_NE(pg, nullptr);
  ASSERT_TRUE(pg->Execute("CREATE TABLE public.nokey (a int);"
                          "CREATE TABLE public.ok (id int PRIMARY KEY);")
                  .ok());
  auto c = Connect(*pg);
  ASSERT_NE(c, nullptr);
  PreflightOptions options;
  options.tables = {"public.ok", "public.nokey", "public.gone"};
  absl::Status s = Preflight(*c, options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(Mentions(s, "table public.nokey has no primary key")) << s;
  EXPECT_TRUE(Mentions(s, "ADD PRIMARY KEY")) << s;
  EXPECT_TRUE(Mentions(s, "table public.gone does not exist")) << s;
  EXPECT_FALSE(Mentions(s, "public.ok")) << s;
}

// A table that is not there: refused at the first start (no slot of the
// node yet: a misspelt --table); on a later start (the slot exists) it was
// dropped since, and is reported missing while the others pass.
TEST(Preflight, AMissingTableIsRefusedFirstAndReportedMissingLater) {
  TALLY_SKIP_UNLESS_POSTGRES();
  auto pg = StartCluster({});
  ASSERT_NE(pg, nullptr);
  ASSERT_TRUE(pg->Execute("CREATE TABLE public.ok (id int PRIMARY KEY)").ok());
  auto c = Connect(*pg);
  ASSERT_NE(c, nullptr);
  PreflightOptions options;
  options.tables = {"public.gone", "public.ok"};
  options.slot_name = "tally_n";
  options.origin_name = "tally_n";
  std::vector<std::string> missing;
  absl::Status s = Preflight(*c, options, &missing).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_TRUE(Mentions(s, "table public.gone does not exist")) << s;
  EXPECT_TRUE(missing.empty());

  ASSERT_TRUE(pg->Execute("SELECT pg_create_logical_replication_slot("
                          "'tally_n', 'pgoutput')")
                  .ok());
  auto tables = Preflight(*c, options, &missing);
  ASSERT_TRUE(tables.ok()) << tables.status();
  ASSERT_EQ(tables->size(), 1u);
  EXPECT_EQ((*tables)[0].name(), "public.ok");
  EXPECT_EQ(missing, std::vector<std::string>{"public.gone"});
  // Without `missing`, still refused.
  EXPECT_EQ(Preflight(*c, options).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(Preflight, NoFreeSlotOriginOrWalSenderIsRefused) {
  TALLY_SKIP_UNLESS_POSTGRES();
  auto pg = StartCluster({"max_replication_slots=1", "max_wal_senders=1"});
  ASSERT_NE(pg, nullptr);
  auto c = Connect(*pg);
  ASSERT_NE(c, nullptr);
  PreflightOptions options;
  options.slot_name = "tally_a";
  options.origin_name = "tally_a";
  ASSERT_TRUE(Preflight(*c, options).ok());

  // Another system takes the only slot and the only origin state.
  ASSERT_TRUE(pg->Execute("SELECT pg_create_logical_replication_slot("
                          "'other', 'pgoutput');"
                          "SELECT pg_replication_origin_create('other');")
                  .ok());
  absl::Status s = Preflight(*c, options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(Mentions(s, "all 1 replication slots are in use")) << s;
  EXPECT_TRUE(Mentions(s, "replication origin states are in use")) << s;
  EXPECT_FALSE(Mentions(s, "WAL senders")) << s;
  // The node's own slot and origin, once they exist, need none free.
  options.slot_name = "other";
  options.origin_name = "other";
  ASSERT_TRUE(Preflight(*c, options).ok());

  // A replication client holds the only WAL sender.
  auto sender = Connect(*pg, "postgres", "database");
  ASSERT_NE(sender, nullptr);
  s = Preflight(*c, options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(Mentions(s, "all 1 WAL senders are in use")) << s;
  sender.reset();
  // The sender's slot is released when its backend exits, shortly after.
  absl::Status after;
  for (int i = 0; i < 50; ++i) {
    after = Preflight(*c, options).status();
    if (after.ok()) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(after.ok()) << after;
}

}  // namespace
}  // namespace pg
}  // namespace tally
