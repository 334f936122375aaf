#include "pg/table_diff/block_hashes.h"

#include "gtest/gtest.h"

namespace tally {
namespace pg {
namespace {

TEST(BucketBitsFor, GrowsWithTheTableBetweenItsBounds) {
  EXPECT_EQ(BucketBitsFor(0), kDefaultBucketBits);  // no estimate
  EXPECT_EQ(BucketBitsFor(500), kDefaultBucketBits);
  EXPECT_EQ(BucketBitsFor(1'000'000), 14);
  EXPECT_EQ(BucketBitsFor(5'000'000), 16);
  EXPECT_EQ(BucketBitsFor(20'000'000), 17);
  EXPECT_EQ(BucketBitsFor(100'000'000), 18);
  EXPECT_EQ(BucketBitsFor(10'000'000'000), kMaxBucketBits);
  for (uint64_t rows = 1; rows < 1'000'000'000; rows *= 3) {
    EXPECT_LE(BucketBitsFor(rows), BucketBitsFor(rows * 3)) << rows;
  }
}

}  // namespace
}  // namespace pg
}  // namespace tally
