#include "pg/table_diff/internal/huge_page_allocator.h"

#include <cstdint>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace tally {
namespace pg {
namespace internal {
namespace {

// A block of 2 MiB or more starts on a huge page boundary (madvise needs
// the range aligned); a small one is ordinary; both hold what was written
// across growth.
TEST(HugePageAllocator, LargeBlocksAreHugePageAlignedAndKeepTheirContents) {
  std::vector<uint64_t, HugePageAllocator<uint64_t>> small;
  small.push_back(7);
  EXPECT_EQ(small[0], 7u);

  std::vector<uint64_t, HugePageAllocator<uint64_t>> large;
  large.reserve(kHugePageBytes / sizeof(uint64_t) + 1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(large.data()) % kHugePageBytes, 0u);
  large.resize(1000);
  std::iota(large.begin(), large.end(), 0);
  // Grows past its block: copied into a new one, freed the right way.
  large.resize(3 * kHugePageBytes / sizeof(uint64_t));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(large.data()) % kHugePageBytes, 0u);
  for (uint64_t i = 0; i < 1000; ++i) ASSERT_EQ(large[i], i);
  EXPECT_EQ(large.back(), 0u);
  large.clear();
  large.shrink_to_fit();  // a large block back, then nothing
}

}  // namespace
}  // namespace internal
}  // namespace pg
}  // namespace tally
