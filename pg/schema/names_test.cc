#include "pg/schema/names.h"

#include <string>

#include "gtest/gtest.h"

namespace tally {
namespace pg {
namespace {

bool IsSlotName(const std::string& s) {
  if (s.empty() || s.size() > 63) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
      return false;
    }
  }
  return true;
}

TEST(ReplicationNames, CleanPrefixThenHash) {
  const std::string base = ReplicationBaseName("eu-west/DB-3");
  EXPECT_EQ(base.substr(0, 18), "tally_eu_west_db_3");
  ASSERT_EQ(base.size(), 18u + 9u);
  EXPECT_EQ(base[18], '_');
  EXPECT_TRUE(IsSlotName(base)) << base;
}

TEST(ReplicationNames, NamesThatCleanAlikeStayDistinct) {
  EXPECT_NE(ReplicationBaseName("db-3"), ReplicationBaseName("db_3"));
  EXPECT_NE(ReplicationBaseName("DB3"), ReplicationBaseName("db3"));
  const std::string long_a(100, 'a');
  EXPECT_NE(ReplicationBaseName(long_a + "1"),
            ReplicationBaseName(long_a + "2"));
}

TEST(ReplicationNames, LongAndOddNamesAreValidSlotNames) {
  for (const std::string& name :
       {std::string(300, 'x'), std::string("ünïcødé/☃"), std::string("a"),
        std::string("10.0.0.1:7400")}) {
    const std::string base = ReplicationBaseName(name);
    EXPECT_TRUE(IsSlotName(base)) << base;
    EXPECT_LE(base.size(), 49u);
  }
}

TEST(ReplicationNames, StableAndSharedBySlotPublicationOrigin) {
  const ReplicationNames n = NamesForNode("node-a");
  EXPECT_EQ(n.slot, ReplicationBaseName("node-a"));
  EXPECT_EQ(n.publication, n.slot);
  EXPECT_EQ(n.origin, n.slot);
  EXPECT_EQ(NamesForNode("node-a").slot, n.slot);
}

}  // namespace
}  // namespace pg
}  // namespace tally
