#include "storage/internal/row_presence.h"

#include "gtest/gtest.h"

namespace tally {
namespace storage {
namespace internal {
namespace {

TEST(RowPresence, AnUnknownKeyspaceMayHoldAnyRow) {
  RowPresence presence;
  EXPECT_TRUE(presence.MayExist(KeyspaceId(7), 42));
  presence.Add(KeyspaceId(7), {42});  // ignored: not known
  EXPECT_TRUE(presence.MayExist(KeyspaceId(7), 43));
  EXPECT_EQ(presence.stats().keyspaces, 0);
}

TEST(RowPresence, AnExistingKeyspaceMayHoldAnyRowUntilBuilt) {
  RowPresence presence;
  presence.AddExisting(KeyspaceId(3), 1000);
  presence.Add(KeyspaceId(3), {10, 11});
  EXPECT_TRUE(presence.MayExist(KeyspaceId(3), 12));
  EXPECT_EQ(presence.stats().built, 0);
  presence.MarkBuilt(KeyspaceId(3));
  EXPECT_TRUE(presence.MayExist(KeyspaceId(3), 10));
  EXPECT_TRUE(presence.MayExist(KeyspaceId(3), 11));
  EXPECT_FALSE(presence.MayExist(KeyspaceId(3), 12));
  EXPECT_EQ(presence.stats().built, 1);
  EXPECT_EQ(presence.stats().tokens, 2u);
}

TEST(RowPresence, ANewKeyspaceIsExactFromItsFirstRow) {
  RowPresence presence;
  presence.AddNew(KeyspaceId(5));
  EXPECT_FALSE(presence.MayExist(KeyspaceId(5), 1));
  presence.Add(KeyspaceId(5), {1});
  EXPECT_TRUE(presence.MayExist(KeyspaceId(5), 1));
  // Other keyspaces are their own.
  presence.AddNew(KeyspaceId(6));
  EXPECT_FALSE(presence.MayExist(KeyspaceId(6), 1));
}

TEST(RowPresence, AKnownKeyspaceKeepsItsState) {
  RowPresence presence;
  presence.AddExisting(KeyspaceId(1), 10);
  presence.AddNew(KeyspaceId(1));  // no effect: still to be built
  EXPECT_TRUE(presence.MayExist(KeyspaceId(1), 99));
  presence.AddNew(KeyspaceId(2));
  presence.Add(KeyspaceId(2), {99});
  presence.AddNew(KeyspaceId(2));  // no effect: keeps its tokens
  EXPECT_TRUE(presence.MayExist(KeyspaceId(2), 99));
}

TEST(RowPresence, UnbuiltNamesTheExistingKeyspacesNotYetBuilt) {
  RowPresence presence;
  presence.AddExisting(KeyspaceId(1), 10);
  presence.AddExisting(KeyspaceId(2), 10);
  presence.AddNew(KeyspaceId(3));
  presence.MarkBuilt(KeyspaceId(1));
  EXPECT_EQ(presence.Unbuilt(), std::vector<KeyspaceId>{KeyspaceId(2)});
}

}  // namespace
}  // namespace internal
}  // namespace storage
}  // namespace tally
