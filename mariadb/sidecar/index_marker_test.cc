// The index marker against a real throwaway MariaDB server: none before a
// build, one per node, rewritten in place, and a clear refusal for a user
// who may not create it.
#include "mariadb/sidecar/index_marker.h"

#include <memory>
#include <string>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "mariadb/url.h"
#include "support/mariadb_test_macros.h"

namespace tally {
namespace mariadb {
namespace {

using ::testing::HasSubstr;
using testing::MariaDbServer;

std::unique_ptr<Connection> ConnectAs(MariaDbServer& server,
                                      const std::string& user) {
  absl::StatusOr<MariaDbTarget> target = ParseMariaDbUrl(server.Url("", user));
  EXPECT_TRUE(target.ok());
  absl::StatusOr<std::unique_ptr<Connection>> c =
      Connection::Open(*target, absl::Seconds(10));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

TEST(IndexMarker, OnePerNodeRewrittenInPlace) {
  TALLY_SKIP_UNLESS_MARIADB();
  absl::StatusOr<std::unique_ptr<MariaDbServer>> m = MariaDbServer::Start();
  ASSERT_TRUE(m.ok()) << m.status();
  std::unique_ptr<Connection> c = ConnectAs(**m, "root");
  ASSERT_NE(c, nullptr);

  absl::StatusOr<std::string> here = ServerIdentity(*c);
  ASSERT_TRUE(here.ok()) << here.status();
  absl::StatusOr<std::string> expected =
      (*m)->Execute("SELECT @@server_id, @@port, @@datadir");
  ASSERT_TRUE(expected.ok());
  for (absl::string_view part : absl::StrSplit(*expected, '\t')) {
    EXPECT_THAT(*here, HasSubstr(std::string(part)));
  }

  // No table yet: no marker.
  absl::StatusOr<std::optional<IndexMarker>> none = ReadIndexMarker(*c, "a");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());

  ASSERT_TRUE(WriteIndexMarker(*c, IndexMarker{"a", *here, "0-1-7"}).ok());
  ASSERT_TRUE(
      WriteIndexMarker(*c, IndexMarker{"b", "elsewhere", "0-1-9"}).ok());
  absl::StatusOr<std::optional<IndexMarker>> a = ReadIndexMarker(*c, "a");
  ASSERT_TRUE(a.ok() && a->has_value()) << a.status();
  EXPECT_EQ((*a)->server, *here);
  EXPECT_EQ((*a)->first_build_gtid, "0-1-7");
  absl::StatusOr<std::optional<IndexMarker>> b = ReadIndexMarker(*c, "b");
  ASSERT_TRUE(b.ok() && b->has_value()) << b.status();
  EXPECT_EQ((*b)->server, "elsewhere");
  EXPECT_FALSE(ReadIndexMarker(*c, "c")->has_value());

  ASSERT_TRUE(WriteIndexMarker(*c, IndexMarker{"a", *here, "0-1-12"}).ok());
  EXPECT_EQ((*ReadIndexMarker(*c, "a"))->first_build_gtid, "0-1-12");
  EXPECT_EQ(*(*m)->Execute("SELECT COUNT(*) FROM tally.index_marker"), "2");
}

TEST(IndexMarker, AUserWithoutCreateIsToldTheStatement) {
  TALLY_SKIP_UNLESS_MARIADB();
  absl::StatusOr<std::unique_ptr<MariaDbServer>> m = MariaDbServer::Start();
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE((*m)->Execute("CREATE DATABASE tally; CREATE USER plain@'%'; "
                            "GRANT SELECT, INSERT, UPDATE ON tally.* TO "
                            "plain@'%'")
                  .ok());
  std::unique_ptr<Connection> c = ConnectAs(**m, "plain");
  ASSERT_NE(c, nullptr);
  const absl::Status refused =
      WriteIndexMarker(*c, IndexMarker{"a", "here", "0-1-1"});
  EXPECT_TRUE(absl::IsPermissionDenied(refused)) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("needs CREATE on `tally`"));
  EXPECT_THAT(refused.message(),
              HasSubstr("CREATE TABLE IF NOT EXISTS `tally`.`index_marker`"));
  // Reading works without it (no table: no marker).
  absl::StatusOr<std::optional<IndexMarker>> none = ReadIndexMarker(*c, "a");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
}

}  // namespace
}  // namespace mariadb
}  // namespace tally
