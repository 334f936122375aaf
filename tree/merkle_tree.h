// The in-memory Merkle tree of one keyspace.
//
// A complete binary tree with 2^depth leaves. A leaf holds the XOR of the
// digests of its rows and their count; an inner node holds the XOR of its
// children and the sum of their counts. Because XOR is its own inverse, a
// row change is one delta applied along one path: O(depth).
//
//   MerkleTree tree(16);
//   tree.Update(LeafOf(token), old_digest ^ new_digest, /*count_delta=*/0);
//   Digest128 root = tree.root().digest;
//
// Levels are numbered from the root (level 0) to the leaves (level depth);
// node (level, index) covers the same token range as NodeRef{level, index}.
// A tree folded to a shallower depth equals the tree built at that depth from
// the same rows, so trees of different depths compare at the shallower one.
//
// Memory: 2^(depth+1) nodes of 24 bytes (see kMaxDepth in token.h).
//
// Thread-compatible: const methods may run concurrently; Update needs
// exclusive access (the store serialises it under its own mutex).
#ifndef TALLY_TREE_MERKLE_TREE_H_
#define TALLY_TREE_MERKLE_TREE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "tree/digest.h"
#include "tree/token.h"

namespace tally {
namespace tree {

// The digest and row count of one node (or leaf) of a tree.
struct NodeState {
  Digest128 digest;
  uint64_t count = 0;

  friend bool operator==(const NodeState& a, const NodeState& b) {
    return a.digest == b.digest && a.count == b.count;
  }
  friend bool operator!=(const NodeState& a, const NodeState& b) {
    return !(a == b);
  }
};

class MerkleTree {
 public:
  // An empty tree (all digests zero). Returns kInvalidArgument unless
  // 0 <= depth <= kMaxDepth. (Depth 0 is a single leaf; stores use
  // kMinDepth..kMaxDepth, folding may go down to 0.)
  static absl::StatusOr<MerkleTree> Create(int depth);

  // A tree from its leaves, in O(leaves). Returns kInvalidArgument unless
  // `leaves.size() == 2^depth`.
  static absl::StatusOr<MerkleTree> FromLeaves(int depth,
                                               std::vector<NodeState> leaves);

  MerkleTree(MerkleTree&&) = default;
  MerkleTree& operator=(MerkleTree&&) = default;
  // Copying a tree is expensive and rarely meant; use Copy().
  MerkleTree(const MerkleTree&) = delete;
  MerkleTree& operator=(const MerkleTree&) = delete;
  MerkleTree Copy() const;

  int depth() const { return depth_; }
  uint64_t leaf_count() const { return uint64_t{1} << depth_; }

  const NodeState& root() const { return nodes_[0]; }
  // REQUIRES: 0 <= level <= depth(), index < 2^level.
  const NodeState& node(int level, uint64_t index) const {
    return nodes_[(uint64_t{1} << level) - 1 + index];
  }
  // REQUIRES: leaf < leaf_count().
  const NodeState& leaf(uint64_t leaf) const { return node(depth_, leaf); }

  // Applies a change to one leaf and its ancestors: `digest_delta` is XORed
  // in (old row digest ^ new row digest) and `count_delta` added.
  // REQUIRES: leaf < leaf_count(); counts never go negative.
  void Update(uint64_t leaf, const Digest128& digest_delta,
              int64_t count_delta);

  // The tree of depth `new_depth` over the same rows.
  // REQUIRES: 0 <= new_depth <= depth().
  MerkleTree Folded(int new_depth) const;

 private:
  MerkleTree(int depth, std::vector<NodeState> nodes)
      : depth_(depth), nodes_(std::move(nodes)) {}
  // Recomputes every inner node from the leaves.
  void RebuildInnerLevels();

  int depth_;
  // Heap order: node (level, index) at (2^level - 1 + index).
  std::vector<NodeState> nodes_;
};

}  // namespace tree
}  // namespace tally

#endif  // TALLY_TREE_MERKLE_TREE_H_
