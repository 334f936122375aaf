#include "mariadb/url.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tally {
namespace mariadb {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(MariaDbUrl, SplitsEveryPart) {
  absl::StatusOr<MariaDbTarget> t = ParseMariaDbUrl(
      "mariadb://tally:s%40cret@db.example:3307/app?table=app.t&table=app.u");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->user, "tally");
  EXPECT_EQ(t->password, "s@cret");
  EXPECT_EQ(t->host, "db.example");
  EXPECT_EQ(t->port, 3307);
  EXPECT_EQ(t->database, "app");
  EXPECT_THAT(t->tables, ElementsAre("app.t", "app.u"));
  EXPECT_EQ(t->display, "mariadb://tally@db.example:3307/app");
}

TEST(MariaDbUrl, MysqlSchemeDefaultPortAndNoDatabase) {
  absl::StatusOr<MariaDbTarget> t = ParseMariaDbUrl("mysql://root@127.0.0.1");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->port, 3306);
  EXPECT_EQ(t->database, "");
  EXPECT_TRUE(IsMariaDbUrl("mysql://x"));
  EXPECT_TRUE(IsMariaDbUrl("mariadb://x"));
  EXPECT_FALSE(IsMariaDbUrl("postgresql://x"));
}

TEST(MariaDbUrl, AnUnescapedAtInThePasswordStillParses) {
  absl::StatusOr<MariaDbTarget> t =
      ParseMariaDbUrl("mariadb://u:p@ss@[::1]:3310/db");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->password, "p@ss");
  EXPECT_EQ(t->host, "::1");
  EXPECT_EQ(t->port, 3310);
}

TEST(MariaDbUrl, SocketInsteadOfTcp) {
  absl::StatusOr<MariaDbTarget> t =
      ParseMariaDbUrl("mariadb://root@localhost/db?socket=/run/mysqld.sock");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->socket, "/run/mysqld.sock");
}

TEST(MariaDbUrl, RefusalsNeverShowThePassword) {
  for (const char* bad :
       {"mariadb://u:secret@h:99999/db", "mariadb://u:secret@h:x/db",
        "mariadb://u:secret@h/db?table=t", "mariadb://u:secret@h/db?sslmode=1",
        "mariadb://u:secret@/db", "mariadb://u:secret@h/db?table=a.b%zz",
        "postgresql://u:secret@h/db"}) {
    absl::StatusOr<MariaDbTarget> t = ParseMariaDbUrl(bad);
    EXPECT_FALSE(t.ok()) << bad;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(t.status().message(), Not(HasSubstr("secret"))) << bad;
  }
}

}  // namespace
}  // namespace mariadb
}  // namespace tally
