// Triggers, cascades and foreign keys under the sidecar's apply: the apply
// runs as PostgreSQL's own logical replication apply does, with
// session_replication_role = replica, so ordinary triggers (an updated_at
// trigger) and the foreign-key triggers (checks, ON DELETE CASCADE) do not
// fire on rows it applies; what they did on the source database arrives as
// row changes of their own. And the preflight refuses a role that may not
// set session_replication_role, naming the GRANT.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/pg_cluster.h"
#include "support/pg_test_macros.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "tests/pg/pg_apply_helpers.h"
#include "tests/pg/pg_sidecar_helpers.h"

namespace tally {
namespace {

using ::tally::pgtest::Following;
using ::tally::pgtest::OrderedMd5;
using ::tally::pgtest::Query;
using ::tally::pgtest::StartTablesSidecar;
using ::tally::pgtest::StatusJson;
using ::tally::pgtest::WaitFor;
using ::tally::testing::CommandResult;
using ::tally::testing::FreeLoopbackAddress;
using ::tally::testing::NodeProcess;
using ::tally::testing::PgCluster;
using ::tally::testing::RunCommand;
using ::tally::testing::RunTally;
using ::tally::testing::TallydPath;
using ::tally::testing::TempDir;
using ::testing::HasSubstr;

// Parents and children, each with an updated_at set by a trigger on every
// insert and update, children deleted with their parent.
constexpr absl::string_view kSchema = R"sql(
CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN NEW.updated_at := clock_timestamp(); RETURN NEW; END $$;
CREATE TABLE parent (id bigint PRIMARY KEY, name text,
                     updated_at timestamptz);
CREATE TABLE child (id bigint PRIMARY KEY,
                    parent_id bigint NOT NULL
                      REFERENCES parent (id) ON DELETE CASCADE,
                    v int, updated_at timestamptz);
CREATE TRIGGER parent_touch BEFORE INSERT OR UPDATE ON parent
  FOR EACH ROW EXECUTE FUNCTION touch();
CREATE TRIGGER child_touch BEFORE INSERT OR UPDATE ON child
  FOR EACH ROW EXECUTE FUNCTION touch();
)sql";

// Children first: a child row may then reach a database before its parent
// in one apply.
const std::vector<std::string> kTables = {"public.child", "public.parent"};

std::unique_ptr<PgCluster> StartSchemaCluster() {
  absl::StatusOr<std::unique_ptr<PgCluster>> pg = PgCluster::Start();
  EXPECT_TRUE(pg.ok()) << pg.status();
  if (!pg.ok()) return nullptr;
  absl::StatusOr<std::string> made = (*pg)->Execute(kSchema);
  EXPECT_TRUE(made.ok()) << made.status();
  return *std::move(pg);
}

bool Equal(PgCluster& a, PgCluster& b) {
  return OrderedMd5(a, "parent", "id") == OrderedMd5(b, "parent", "id") &&
         OrderedMd5(a, "child", "id") == OrderedMd5(b, "child", "id");
}

TEST(PgTriggers, TriggersAndCascadesDoNotFireOnAppliedRows) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg_a = StartSchemaCluster();
  std::unique_ptr<PgCluster> pg_b = StartSchemaCluster();
  ASSERT_NE(pg_a, nullptr);
  ASSERT_NE(pg_b, nullptr);
  // 100 parents with three children each, written on a alone.
  ASSERT_TRUE(pg_a->Execute("INSERT INTO parent (id, name) SELECT g, 'p' || g "
                            "FROM generate_series(1, 100) g; "
                            "INSERT INTO child (id, parent_id, v) SELECT g, "
                            "(g - 1) / 3 + 1, g FROM generate_series(1, 300) g")
                  .ok());
  TempDir dir_a, dir_b;
  const std::string addr_a = FreeLoopbackAddress();
  const std::string addr_b = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> side_a = StartTablesSidecar(
      "trig-a", dir_a.path(), *pg_a, addr_a, {addr_b}, kTables);
  std::unique_ptr<NodeProcess> side_b = StartTablesSidecar(
      "trig-b", dir_b.path(), *pg_b, addr_b, {addr_a}, kTables);
  ASSERT_NE(side_a, nullptr);
  ASSERT_NE(side_b, nullptr);
  ASSERT_TRUE(WaitFor([&] { return Following(addr_a) && Following(addr_b); },
                      absl::Seconds(30)))
      << side_a->Log() << side_b->Log();
  // The first copy: b's triggers must not restamp a's rows.
  ASSERT_TRUE(WaitFor([&] { return Equal(*pg_a, *pg_b); }, absl::Seconds(20)))
      << "parent on b: " << Query(*pg_b, "SELECT count(*) FROM parent")
      << " rows\n"
      << side_a->Log() << side_b->Log();

  // Writes on both sides: updates (the trigger stamps them where they are
  // written), parents deleted on a (their children go by the cascade
  // there), a new parent and its children on a, new children of existing
  // parents and a parent deleted on b.
  ASSERT_TRUE(pg_a->Execute("UPDATE parent SET name = name || '-a' WHERE id "
                            "BETWEEN 11 AND 50; "
                            "DELETE FROM parent WHERE id <= 10; "
                            "INSERT INTO parent (id, name) VALUES (101, "
                            "'new-a'); "
                            "INSERT INTO child (id, parent_id, v) SELECT g, "
                            "101, g FROM generate_series(1001, 1005) g")
                  .ok());
  ASSERT_TRUE(pg_b->Execute("UPDATE child SET v = -v WHERE parent_id BETWEEN "
                            "51 AND 80; "
                            "INSERT INTO child (id, parent_id, v) SELECT g, "
                            "90, g FROM generate_series(2001, 2005) g; "
                            "DELETE FROM parent WHERE id = 99")
                  .ok());

  EXPECT_TRUE(WaitFor([&] { return Equal(*pg_a, *pg_b); }, absl::Seconds(20)))
      << "a: " << Query(*pg_a, "SELECT count(*) FROM child")
      << " children; b: " << Query(*pg_b, "SELECT count(*) FROM child")
      << " children\n"
      << side_a->Log() << side_b->Log();
  // 300 + 5 + 5 children, less the 30 of parents 1..10 and the 3 of 99.
  EXPECT_EQ(Query(*pg_a, "SELECT count(*) FROM child"), "277");
  EXPECT_EQ(Query(*pg_b, "SELECT count(*) FROM parent"), "90");
  // Every child still has its parent on both sides.
  for (PgCluster* pg : {pg_a.get(), pg_b.get()}) {
    EXPECT_EQ(Query(*pg,
                    "SELECT count(*) FROM child c WHERE NOT EXISTS "
                    "(SELECT 1 FROM parent p WHERE p.id = c.parent_id)"),
              "0");
  }

  // Each index describes its table, and the sessions between the two end
  // well.
  for (const std::string& addr : {addr_a, addr_b}) {
    const CommandResult verify =
        RunTally({"verify", "--node", addr}, absl::Seconds(30));
    EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
    EXPECT_THAT(verify.out, HasSubstr("sound"));
    const CommandResult sync = RunTally({"sync", addr}, absl::Seconds(30));
    EXPECT_EQ(sync.exit_code, 0) << sync.out << sync.err;
    EXPECT_THAT(sync.out, HasSubstr("the nodes are equal"));
  }
  EXPECT_THAT(StatusJson(addr_a), HasSubstr("\"last_outcome\":\"ok\""));
  EXPECT_EQ(side_a->Stop(), 0);
  EXPECT_EQ(side_b->Stop(), 0);
}

// A role without superuser needs SET on session_replication_role: the
// preflight says so, naming the GRANT; with it, the sidecar starts.
TEST(PgTriggers, ARoleThatMayNotSetTheReplicaRoleIsRefusedNamingTheGrant) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg = StartSchemaCluster();
  ASSERT_NE(pg, nullptr);
  ASSERT_TRUE(
      pg->Execute("CREATE ROLE app LOGIN REPLICATION; "
                  "ALTER TABLE parent OWNER TO app; "
                  "ALTER TABLE child OWNER TO app; "
                  "GRANT CREATE ON DATABASE postgres TO app; "
                  "GRANT EXECUTE ON FUNCTION "
                  "pg_replication_origin_create(text), "
                  "pg_replication_origin_session_setup(text), "
                  "pg_replication_origin_xact_setup(pg_lsn, timestamptz), "
                  "pg_replication_origin_progress(text, boolean) TO app")
          .ok());
  TempDir dir;
  const std::string listen = FreeLoopbackAddress();
  std::vector<std::string> argv = {
      TallydPath(), "--name",       "trig-role",
      "--data-dir", dir.path(),     "--listen",
      listen,       "--postgres",   pg->Uri("postgres", "app"),
      "--table",    "public.parent"};
  const CommandResult refused = RunCommand(argv, absl::Seconds(30));
  EXPECT_EQ(refused.exit_code, 1) << refused.err;
  EXPECT_THAT(refused.err,
              HasSubstr("GRANT SET ON PARAMETER session_replication_role TO "
                        "\"app\""));

  ASSERT_TRUE(
      pg->Execute("GRANT SET ON PARAMETER session_replication_role TO app")
          .ok());
  absl::StatusOr<std::unique_ptr<NodeProcess>> side = NodeProcess::Start(
      "trig-role", dir.path(),
      {"--postgres", pg->Uri("postgres", "app"), "--table", "public.parent"},
      listen);
  ASSERT_TRUE(side.ok()) << side.status();
  EXPECT_TRUE(WaitFor([&] { return Following(listen); }, absl::Seconds(30)))
      << (*side)->Log();
  EXPECT_EQ((*side)->Stop(), 0);
}

}  // namespace
}  // namespace tally
