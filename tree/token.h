// Tokens place keys in the tree.
//
// A token is the 64-bit XXH3 hash of a key with a fixed seed, so that every
// replica computes the same token for the same key without talking. A tree of
// depth d has 2^d leaves; a key belongs to leaf `token >> (64 - d)`.
//
// Below the leaves the token space keeps splitting: `NodeRef{level, index}`
// names the token range [index << (64 - level), (index + 1) << (64 - level))
// for any level in [0, 64], whatever the depth of the stored tree. Level 0 is
// the whole space; level 64 is a single token. Trees of different depths
// therefore name the same ranges the same way.
//
// Thread-safe: everything here is a pure function or a value type.
#ifndef TALLY_TREE_TOKEN_H_
#define TALLY_TREE_TOKEN_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace tally {
namespace tree {

using Token = uint64_t;

// Depth limits of a stored tree. Memory for a tree of depth d is about
// 48 * 2^d bytes (digest and row count for every node of every level):
// depth 16 (the default) 3 MiB, depth 20 48 MiB, depth 24 768 MiB.
inline constexpr int kMinDepth = 1;
inline constexpr int kMaxDepth = 24;
inline constexpr int kDefaultDepth = 16;

// The deepest level of the virtual token tree: one token per node.
inline constexpr int kTokenBits = 64;

// Returns the token of `key`. Stable across versions and machines: changing
// the seed or the hash would change every stored tree.
Token TokenOf(absl::string_view key);

// Returns the index of the node at `level` (0..64) that holds `token`.
inline uint64_t NodeIndexOf(Token token, int level) {
  return level == 0 ? 0 : token >> (kTokenBits - level);
}

// A node of the virtual 64-level token tree: a contiguous token range.
struct NodeRef {
  int level = 0;       // 0..64
  uint64_t index = 0;  // < 2^level

  // First and last token of the range (inclusive).
  Token first_token() const {
    return level == 0 ? 0 : index << (kTokenBits - level);
  }
  Token last_token() const {
    // Shifting a 64-bit value by 64 is undefined (x86 shifts by 0): a
    // level-64 range, one token, used to end at the last token of all.
    if (level >= kTokenBits) return first_token();
    return level == 0 ? ~Token{0} : first_token() | (~Token{0} >> level);
  }
  bool Contains(Token token) const {
    return NodeIndexOf(token, level) == index;
  }
  // The `i`-th descendant `levels_below` levels down.
  // REQUIRES: level + levels_below <= 64, i < 2^levels_below.
  NodeRef Descendant(int levels_below, uint64_t i) const {
    return NodeRef{level + levels_below,
                   levels_below == 0 ? index : (index << levels_below) | i};
  }
  bool operator==(const NodeRef& other) const {
    return level == other.level && index == other.index;
  }
  bool operator!=(const NodeRef& other) const { return !(*this == other); }
  // True for a well-formed reference: level in [0, 64], index < 2^level.
  bool IsValid() const {
    if (level < 0 || level > kTokenBits) return false;
    return level == kTokenBits || (index >> level) == 0;
  }
  std::string DebugString() const;
};

}  // namespace tree
}  // namespace tally

#endif  // TALLY_TREE_TOKEN_H_
