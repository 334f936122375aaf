// The first-start checks of a MariaDB sidecar against real servers: one
// set up as tally needs passes, one set up otherwise is refused naming
// every shortfall and its fix, and a user without the privileges is told
// which to grant.
#include "mariadb/capture/preflight.h"

#include <memory>
#include <string>

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

}  // namespace
}  // namespace mariadb
}  // namespace tally
