#include "storage/internal/ids.h"

#include <cstdint>
#include <type_traits>

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"

namespace tally {
namespace storage {
namespace internal {
namespace {

// The point of the types: no silent conversion from a number or between
// the kinds.
static_assert(!std::is_convertible_v<uint32_t, KeyspaceId>);
static_assert(!std::is_convertible_v<uint32_t, OriginId>);
static_assert(!std::is_convertible_v<KeyspaceId, OriginId>);
static_assert(!std::is_convertible_v<KeyspaceId, uint32_t>);
static_assert(!std::is_same_v<KeyspaceId, OriginId>);

TEST(StrongId, ComparesAndOrdersByValue) {
  EXPECT_EQ(KeyspaceId(3), KeyspaceId(3));
  EXPECT_NE(KeyspaceId(3), KeyspaceId(4));
  EXPECT_LT(KeyspaceId(3), KeyspaceId(4));
  EXPECT_FALSE(KeyspaceId(4) < KeyspaceId(3));
  EXPECT_EQ(OriginId(7).value(), 7u);
  EXPECT_EQ(KeyspaceId().value(), 0u);
}

TEST(StrongId, HashesAsAKey) {
  absl::flat_hash_set<OriginId> ids = {OriginId(1), OriginId(2), OriginId(1)};
  EXPECT_EQ(ids.size(), 2u);
  EXPECT_TRUE(ids.contains(OriginId(2)));
  EXPECT_FALSE(ids.contains(OriginId(3)));
}

}  // namespace
}  // namespace internal
}  // namespace storage
}  // namespace tally
