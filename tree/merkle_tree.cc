#include "tree/merkle_tree.h"

#include "absl/strings/str_format.h"

namespace tally {
namespace tree {

absl::StatusOr<MerkleTree> MerkleTree::Create(int depth) {
  if (depth < 0 || depth > kMaxDepth) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tree depth %d is out of range; it must be 0..%d", depth, kMaxDepth));
  }
  return MerkleTree(depth, std::vector<NodeState>((uint64_t{2} << depth) - 1));
}

absl::StatusOr<MerkleTree> MerkleTree::FromLeaves(
    int depth, std::vector<NodeState> leaves) {
  absl::StatusOr<MerkleTree> tree = Create(depth);
  if (!tree.ok()) return tree.status();
  if (leaves.size() != tree->leaf_count()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a tree of depth %d has %d leaves, not %d", depth,
                        tree->leaf_count(), leaves.size()));
  }
  const uint64_t first_leaf = tree->leaf_count() - 1;
  for (uint64_t i = 0; i < leaves.size(); ++i) {
    tree->nodes_[first_leaf + i] = leaves[i];
  }
  tree->RebuildInnerLevels();
  return tree;
}

MerkleTree MerkleTree::Copy() const { return MerkleTree(depth_, nodes_); }

void MerkleTree::RebuildInnerLevels() {
  // Children of heap slot i are 2i+1 and 2i+2; walk inner slots backwards.
  for (uint64_t i = (uint64_t{1} << depth_) - 1; i-- > 0;) {
    const NodeState& left = nodes_[2 * i + 1];
    const NodeState& right = nodes_[2 * i + 2];
    nodes_[i].digest = left.digest ^ right.digest;
    nodes_[i].count = left.count + right.count;
  }
}

void MerkleTree::Update(uint64_t leaf, const Digest128& digest_delta,
                        int64_t count_delta) {
  uint64_t slot = (uint64_t{1} << depth_) - 1 + leaf;
  while (true) {
    NodeState& n = nodes_[slot];
    n.digest ^= digest_delta;
    n.count =
        static_cast<uint64_t>(static_cast<int64_t>(n.count) + count_delta);
    if (slot == 0) break;
    slot = (slot - 1) / 2;
  }
}

MerkleTree MerkleTree::Folded(int new_depth) const {
  // The inner levels of this tree already are the shallower tree's nodes.
  std::vector<NodeState> nodes(
      nodes_.begin(), nodes_.begin() + ((uint64_t{2} << new_depth) - 1));
  return MerkleTree(new_depth, std::move(nodes));
}

}  // namespace tree
}  // namespace tally
