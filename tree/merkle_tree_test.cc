#include "tree/merkle_tree.h"

#include <cstdio>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tally {
namespace tree {
namespace {

Digest128 RandomDigest(std::mt19937_64& rng) { return Digest128{rng(), rng()}; }

TEST(MerkleTree, RejectsBadDepthsAndLeafCounts) {
  EXPECT_EQ(MerkleTree::Create(-1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MerkleTree::Create(kMaxDepth + 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      MerkleTree::FromLeaves(4, std::vector<NodeState>(15)).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(MerkleTree, UpdateThenRevertRestoresRoot) {
  const uint64_t seed = std::random_device{}();
  std::printf("seed=%llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  auto tree = MerkleTree::Create(12);
  ASSERT_TRUE(tree.ok());
  for (int i = 0; i < 1000; ++i) {
    tree->Update(rng() % tree->leaf_count(), RandomDigest(rng), 1);
  }
  const NodeState before = tree->root();
  const uint64_t leaf = rng() % tree->leaf_count();
  const Digest128 delta = RandomDigest(rng);
  tree->Update(leaf, delta, 1);
  EXPECT_NE(tree->root(), before);
  tree->Update(leaf, delta, -1);
  EXPECT_EQ(tree->root(), before) << "seed " << seed;
}

TEST(MerkleTree, InnerNodesAreXorOfChildren) {
  std::mt19937_64 rng(3);
  auto tree = MerkleTree::Create(10);
  ASSERT_TRUE(tree.ok());
  for (int i = 0; i < 5000; ++i) {
    tree->Update(rng() % tree->leaf_count(), RandomDigest(rng), 1);
  }
  for (int level = 0; level < 10; ++level) {
    for (uint64_t i = 0; i < (uint64_t{1} << level); ++i) {
      const NodeState& n = tree->node(level, i);
      const NodeState& l = tree->node(level + 1, 2 * i);
      const NodeState& r = tree->node(level + 1, 2 * i + 1);
      ASSERT_EQ(n.digest, l.digest ^ r.digest);
      ASSERT_EQ(n.count, l.count + r.count);
    }
  }
  EXPECT_EQ(tree->root().count, 5000u);
}

TEST(MerkleTree, FromLeavesEqualsIncrementalUpdates) {
  std::mt19937_64 rng(5);
  auto incremental = MerkleTree::Create(8);
  ASSERT_TRUE(incremental.ok());
  std::vector<NodeState> leaves(256);
  for (int i = 0; i < 3000; ++i) {
    const uint64_t leaf = rng() % 256;
    const Digest128 d = RandomDigest(rng);
    incremental->Update(leaf, d, 1);
    leaves[leaf].digest ^= d;
    leaves[leaf].count += 1;
  }
  auto built = MerkleTree::FromLeaves(8, leaves);
  ASSERT_TRUE(built.ok());
  for (int level = 0; level <= 8; ++level) {
    for (uint64_t i = 0; i < (uint64_t{1} << level); ++i) {
      ASSERT_EQ(built->node(level, i), incremental->node(level, i));
    }
  }
}

TEST(MerkleTree, FoldingEqualsTreeBuiltAtShallowerDepth) {
  std::mt19937_64 rng(9);
  std::vector<std::pair<Token, Digest128>> rows;
  for (int i = 0; i < 20000; ++i) rows.push_back({rng(), RandomDigest(rng)});
  auto deep = MerkleTree::Create(16);
  ASSERT_TRUE(deep.ok());
  for (const auto& [token, digest] : rows) {
    deep->Update(NodeIndexOf(token, 16), digest, 1);
  }
  for (int shallow : {0, 1, 5, 11, 16}) {
    auto built = MerkleTree::Create(shallow);
    ASSERT_TRUE(built.ok());
    for (const auto& [token, digest] : rows) {
      built->Update(NodeIndexOf(token, shallow), digest, 1);
    }
    const MerkleTree folded = deep->Folded(shallow);
    ASSERT_EQ(folded.depth(), shallow);
    for (uint64_t leaf = 0; leaf < folded.leaf_count(); ++leaf) {
      ASSERT_EQ(folded.leaf(leaf), built->leaf(leaf)) << "depth " << shallow;
    }
  }
}

}  // namespace
}  // namespace tree
}  // namespace tally
