#include "pg/sidecar/build_marker.h"

#include <memory>

#include "gtest/gtest.h"
#include "pg/wire/connection.h"
#include "support/pg_cluster.h"
#include "support/pg_test_macros.h"

namespace tally {
namespace pg {
namespace {

using ::tally::testing::PgCluster;

TEST(BuildMarker, TextRoundTrips) {
  const BuildMarker with{7312345678901234567u, 1764625800123456};
  EXPECT_EQ(with.Text(),
            "tally: index built on system 7312345678901234567; first build "
            "at unix us 1764625800123456");
  EXPECT_EQ(BuildMarker::Parse(with.Text()), with);
  const BuildMarker without{42, std::nullopt};
  EXPECT_EQ(without.Text(), "tally: index built on system 42");
  EXPECT_EQ(BuildMarker::Parse(without.Text()), without);
}

TEST(BuildMarker, OtherTextsAreNoMarker) {
  EXPECT_EQ(BuildMarker::Parse(""), std::nullopt);
  EXPECT_EQ(BuildMarker::Parse("the publication of the billing app"),
            std::nullopt);
  EXPECT_EQ(BuildMarker::Parse("tally: index built on system x"), std::nullopt);
  EXPECT_EQ(BuildMarker::Parse("tally: index built on system 42; first "
                               "build at unix us soon"),
            std::nullopt);
}

TEST(BuildMarker, WrittenOnThePublicationAndReadBack) {
  TALLY_SKIP_UNLESS_POSTGRES();
  absl::StatusOr<std::unique_ptr<PgCluster>> pg = PgCluster::Start();
  ASSERT_TRUE(pg.ok()) << pg.status();
  absl::StatusOr<std::unique_ptr<Connection>> conn =
      Connection::Open((*pg)->Uri(), {});
  ASSERT_TRUE(conn.ok()) << conn.status();
  Connection& c = **conn;
  // No publication, then one without a comment: no marker.
  absl::StatusOr<std::optional<BuildMarker>> m = ReadBuildMarker(c, "tally_x");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m, std::nullopt);
  ASSERT_TRUE(c.Exec("CREATE TABLE t (id int PRIMARY KEY)").ok());
  ASSERT_TRUE(c.Exec("CREATE PUBLICATION tally_x FOR TABLE t").ok());
  m = ReadBuildMarker(c, "tally_x");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m, std::nullopt);

  absl::StatusOr<int64_t> now = ServerUnixMicros(c);
  ASSERT_TRUE(now.ok()) << now.status();
  const BuildMarker marker{99, *now};
  ASSERT_TRUE(WriteBuildMarker(c, "tally_x", marker).ok());
  m = ReadBuildMarker(c, "tally_x");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m, marker);
  // A later marker replaces it.
  const BuildMarker other{100, std::nullopt};
  ASSERT_TRUE(WriteBuildMarker(c, "tally_x", other).ok());
  m = ReadBuildMarker(c, "tally_x");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m, other);
  // Writing to a publication that does not exist fails.
  EXPECT_FALSE(WriteBuildMarker(c, "tally_missing", marker).ok());
}

}  // namespace
}  // namespace pg
}  // namespace tally
