#include "tree/fingerprint.h"

#include <cstdio>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tally {
namespace tree {
namespace {

TEST(Fingerprint, PackedValuesUnpackToThemselvesAtEveryWidth) {
  const uint64_t seed = std::random_device{}();
  std::printf("seed=%llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (int bits = 1; bits <= 64; ++bits) {
    for (size_t count : {0, 1, 7, 8, 9, 100}) {
      std::vector<uint64_t> values(count);
      for (uint64_t& v : values) {
        v = bits == 64 ? rng() : rng() & ((uint64_t{1} << bits) - 1);
      }
      const std::string packed = PackBits(values, bits);
      EXPECT_EQ(packed.size(), PackedBytes(count, bits));
      absl::StatusOr<std::vector<uint64_t>> back =
          UnpackBits(packed, bits, count);
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_EQ(*back, values) << "bits " << bits << " count " << count;
    }
  }
}

TEST(Fingerprint, UnpackRejectsTheWrongSize) {
  const std::string packed = PackBits(std::vector<uint64_t>{1, 2, 3}, 12);
  EXPECT_FALSE(UnpackBits(packed, 12, 4).ok());
  EXPECT_FALSE(UnpackBits(packed + "x", 12, 3).ok());
  EXPECT_FALSE(UnpackBits(packed, 0, 3).ok());
}

TEST(Fingerprint, ShortFingerprintsDependOnTheSeed) {
  // Under one seed two nodes may share a 16-bit fingerprint; under most
  // other seeds they do not.
  const NodeDigest x{0x1234, 10};
  const NodeDigest y{0x5678, 10};
  int same = 0;
  for (uint64_t seed = 1; seed <= 1000; ++seed) {
    const uint64_t fx = NodeFingerprint(seed, x, 16);
    EXPECT_LT(fx, uint64_t{1} << 16);
    if (fx == NodeFingerprint(seed, y, 16)) ++same;
    EXPECT_EQ(fx, NodeFingerprint(seed, x, 16));
  }
  EXPECT_LE(same, 3);
  // The count is part of a node's fingerprint, the key of a row's.
  EXPECT_NE(NodeFingerprint(7, NodeDigest{1, 1}, 64),
            NodeFingerprint(7, NodeDigest{1, 2}, 64));
  RowEntry r1;
  r1.key = "k1";
  RowEntry r2 = r1;
  r2.key = "k2";
  EXPECT_NE(RowFingerprint(7, r1, 64), RowFingerprint(7, r2, 64));
  EXPECT_NE(RowFingerprint(7, r1, 64), RowFingerprint(8, r1, 64));
}

}  // namespace
}  // namespace tree
}  // namespace tally
