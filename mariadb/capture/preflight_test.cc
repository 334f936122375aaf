// The first-start checks of a MariaDB sidecar against real servers: one
// set up as tally needs passes, one set up otherwise is refused naming
// every shortfall and its fix, and a user without the privileges is told
// which to grant.
#include "mariadb/capture/preflight.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mariadb/url.h"
#include "support/mariadb_test_macros.h"

namespace tally {
namespace mariadb {
namespace {

using ::testing::HasSubstr;
using testing::MariaDbServer;
using ::testing::Not;

std::unique_ptr<Connection> Connect(const std::string& url) {
  absl::StatusOr<MariaDbTarget> target = ParseMariaDbUrl(url);
  EXPECT_TRUE(target.ok()) << target.status();
  absl::StatusOr<std::unique_ptr<Connection>> c =
      Connection::Open(*target, absl::Seconds(30));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

TEST(MariaDbPreflight, AServerSetUpForTallyPasses) {
  TALLY_SKIP_UNLESS_MARIADB();
  absl::StatusOr<std::unique_ptr<MariaDbServer>> server =
      MariaDbServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<Connection> root = Connect((*server)->Url());
  ASSERT_NE(root, nullptr);
  EXPECT_TRUE(CheckServerForSidecar(*root).ok());
  // A user granted exactly the three privileges passes too.
  ASSERT_TRUE((*server)
                  ->Execute("CREATE USER 'tally'@'127.0.0.1' IDENTIFIED BY "
                            "'pw'; GRANT REPLICATION SLAVE, BINLOG MONITOR, "
                            "BINLOG REPLAY ON *.* TO 'tally'@'127.0.0.1'")
                  .ok());
  std::unique_ptr<Connection> tally =
      Connect((*server)->Url("", "tally", "pw"));
  ASSERT_NE(tally, nullptr);
  absl::Status s = CheckServerForSidecar(*tally);
  EXPECT_TRUE(s.ok()) << s;
}

TEST(MariaDbPreflight, EveryShortfallIsNamedWithItsFix) {
  TALLY_SKIP_UNLESS_MARIADB();
  testing::MariaDbServerOptions options;
  options.options = {"--binlog-format=STATEMENT", "--binlog-row-image=MINIMAL",
                     "--binlog-row-metadata=NO_LOG"};
  absl::StatusOr<std::unique_ptr<MariaDbServer>> server =
      MariaDbServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE((*server)
                  ->Execute("CREATE USER 'app'@'127.0.0.1' IDENTIFIED BY 'pw'; "
                            "GRANT REPLICATION SLAVE ON *.* TO "
                            "'app'@'127.0.0.1'")
                  .ok());
  std::unique_ptr<Connection> app = Connect((*server)->Url("", "app", "pw"));
  ASSERT_NE(app, nullptr);
  const absl::Status s = CheckServerForSidecar(*app);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("binlog_format is STATEMENT: set "
                                     "binlog_format=ROW"));
  EXPECT_THAT(s.message(), HasSubstr("binlog_row_image is MINIMAL: set "
                                     "binlog_row_image=FULL"));
  EXPECT_THAT(s.message(), HasSubstr("binlog_row_metadata is NO_LOG: set "
                                     "binlog_row_metadata=FULL"));
  EXPECT_THAT(s.message(),
              HasSubstr("lacks BINLOG MONITOR, BINLOG REPLAY: GRANT"));
  EXPECT_THAT(s.message(), Not(HasSubstr("lacks REPLICATION SLAVE")));
}

TEST(MariaDbPreflight, AServerWithoutABinaryLogIsRefused) {
  TALLY_SKIP_UNLESS_MARIADB();
  testing::MariaDbServerOptions options;
  options.options = {"--skip-log-bin"};
  absl::StatusOr<std::unique_ptr<MariaDbServer>> server =
      MariaDbServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<Connection> root = Connect((*server)->Url());
  ASSERT_NE(root, nullptr);
  const absl::Status s = CheckServerForSidecar(*root);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("--log-bin"));
}

// A table whose foreign key cascades is refused (its cascaded changes are
// not in the binary log: shown first, so that the test fails if a
// MariaDB version starts logging them), naming the constraint and the
// fix; one that restricts passes.
TEST(MariaDbPreflight, ATableWhoseForeignKeyCascadesIsRefused) {
  TALLY_SKIP_UNLESS_MARIADB();
  absl::StatusOr<std::unique_ptr<MariaDbServer>> server =
      MariaDbServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE(
      (*server)
          ->Execute(
              "CREATE DATABASE fk; USE fk; CREATE TABLE p (id int PRIMARY "
              "KEY); CREATE TABLE c (id int PRIMARY KEY, pid int, CONSTRAINT "
              "c_p FOREIGN KEY (pid) REFERENCES p (id) ON DELETE CASCADE); "
              "CREATE TABLE r (id int PRIMARY KEY, pid int, FOREIGN KEY (pid) "
              "REFERENCES p (id)); INSERT INTO p VALUES (1); INSERT INTO c "
              "VALUES (10, 1); FLUSH BINARY LOGS; DELETE FROM p WHERE id = 1")
          .ok());
  absl::StatusOr<std::string> file = (*server)->Execute("SHOW MASTER STATUS");
  ASSERT_TRUE(file.ok());
  absl::StatusOr<std::string> events = (*server)->Execute(absl::StrCat(
      "SHOW BINLOG EVENTS IN '", file->substr(0, file->find('\t')), "'"));
  ASSERT_TRUE(events.ok());
  EXPECT_THAT(*events, HasSubstr("Delete_rows"));
  EXPECT_EQ(*(*server)->Execute("SELECT COUNT(*) FROM fk.c"), "0");
  // One Delete_rows event (p's): none for the cascaded row of c.
  EXPECT_EQ(events->find("Delete_rows"), events->rfind("Delete_rows"))
      << *events;

  std::unique_ptr<Connection> root = Connect((*server)->Url());
  ASSERT_NE(root, nullptr);
  const absl::Status refused = CheckTableForSidecar(*root, "fk.c");
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("foreign key c_p to fk.p is ON "
                                           "DELETE CASCADE ON UPDATE"));
  EXPECT_THAT(refused.message(), HasSubstr("ON DELETE RESTRICT"));
  EXPECT_TRUE(CheckTableForSidecar(*root, "fk.r").ok());
  EXPECT_TRUE(CheckTableForSidecar(*root, "fk.p").ok());
}

}  // namespace
}  // namespace mariadb
}  // namespace tally
