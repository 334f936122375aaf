// TokenFilter: a Bloom filter of row tokens that grows with what it holds.
// It answers "maybe present" for every token added to it, and "absent" for
// most tokens never added (about 1% per level answer "maybe" wrongly). The
// store asks it before the last-writer-wins read of a row it writes: a key
// whose token was never added has no row, so the read is skipped.
//
// A token is already a well-mixed 64-bit hash of the key (tree/token.h),
// so the filter hashes nothing itself: keys that share a token share their
// answer, which is a false positive and never a false negative.
//
// Layout: blocked Bloom filter (Putze, Sanders, Singler, "Cache-, Hash- and
// Space-Efficient Bloom Filters"): each token sets kProbes bits within one
// 64-byte block, so an answer costs one cache line per level. A level holds
// `capacity` tokens at kBitsPerToken bits each; when the newest level is
// full a new one twice as large is added (a scalable Bloom filter, Almeida
// et al.): an answer looks at every level (9 at 10M tokens from the
// smallest first level), and a level is never rebuilt, because the filter
// does not keep the tokens. Levels cost kBitsPerToken / 8 bytes per token
// of capacity: 1.5 MB per million tokens, 3 MB at worst (right after a
// level is added the capacity is twice the tokens).
//
//   TokenFilter filter(/*expected_tokens=*/rows);
//   filter.Add(token);
//   if (!filter.MayContain(other)) ... `other` was never added ...
//
// Not thread-safe: the owner serializes every call (internal/row_presence.h).
#ifndef TALLY_STORAGE_INTERNAL_TOKEN_FILTER_H_
#define TALLY_STORAGE_INTERNAL_TOKEN_FILTER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tree/token.h"

namespace tally {
namespace storage {
namespace internal {

class TokenFilter {
 public:
  static constexpr int kBitsPerToken = 12;
  static constexpr int kProbes = 7;
  // The first level holds at least this many tokens.
  static constexpr uint64_t kMinCapacity = 32 * 1024;
  static constexpr int kGrowth = 2;

  // The first level is sized for `expected_tokens` (at least kMinCapacity).
  explicit TokenFilter(uint64_t expected_tokens = 0);

  void Add(tree::Token token);
  // False only if `token` was never added.
  bool MayContain(tree::Token token) const;

  // Tokens added (a token added twice counts twice).
  uint64_t added() const;
  int levels() const { return static_cast<int>(levels_.size()); }
  size_t memory_bytes() const;

 private:
  static constexpr int kWordsPerBlock = 8;  // 512 bits, one cache line
  struct Level {
    explicit Level(uint64_t capacity);
    bool MayContain(tree::Token token) const;
    void Add(tree::Token token);
    uint64_t capacity = 0;
    uint64_t added = 0;
    uint64_t blocks = 0;
    std::vector<uint64_t> words;
  };
  std::vector<Level> levels_;
};

}  // namespace internal
}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_INTERNAL_TOKEN_FILTER_H_
