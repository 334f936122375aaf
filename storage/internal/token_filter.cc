#include "storage/internal/token_filter.h"

#include <algorithm>

namespace tally {
namespace storage {
namespace internal {
namespace {

// The block of `token` among `blocks` (Lemire's multiply-shift range
// reduction: no division, every block equally likely).
uint64_t BlockOf(tree::Token token, uint64_t blocks) {
  return static_cast<uint64_t>(
      (static_cast<unsigned __int128>(token) * blocks) >> 64);
}

// The bits within a block come from a second hash of the token: the high
// bits chose the block, so the low bits alone would correlate with it.
uint64_t ProbeBits(tree::Token token) {
  uint64_t h = token * 0x9E3779B97F4A7C15ull;
  return h ^ (h >> 29);
}

}  // namespace

TokenFilter::Level::Level(uint64_t capacity_tokens)
    : capacity(capacity_tokens),
      blocks(std::max<uint64_t>(
          1, capacity_tokens * kBitsPerToken / (kWordsPerBlock * 64))),
      words(blocks * kWordsPerBlock, 0) {}

void TokenFilter::Level::Add(tree::Token token) {
  uint64_t* block = &words[BlockOf(token, blocks) * kWordsPerBlock];
  uint64_t bits = ProbeBits(token);
  for (int i = 0; i < kProbes; ++i, bits >>= 9) {
    const uint64_t bit = bits & 511;
    block[bit >> 6] |= uint64_t{1} << (bit & 63);
  }
  ++added;
}

bool TokenFilter::Level::MayContain(tree::Token token) const {
  const uint64_t* block = &words[BlockOf(token, blocks) * kWordsPerBlock];
  uint64_t bits = ProbeBits(token);
  for (int i = 0; i < kProbes; ++i, bits >>= 9) {
    const uint64_t bit = bits & 511;
    if ((block[bit >> 6] & (uint64_t{1} << (bit & 63))) == 0) return false;
  }
  return true;
}

TokenFilter::TokenFilter(uint64_t expected_tokens) {
  levels_.emplace_back(std::max(expected_tokens, kMinCapacity));
}

void TokenFilter::Add(tree::Token token) {
  if (levels_.back().added >= levels_.back().capacity) {
    levels_.emplace_back(levels_.back().capacity * kGrowth);
  }
  levels_.back().Add(token);
}

uint64_t TokenFilter::added() const {
  uint64_t added = 0;
  for (const Level& level : levels_) added += level.added;
  return added;
}

bool TokenFilter::MayContain(tree::Token token) const {
  // The newest level first: it holds most of the tokens.
  for (auto it = levels_.rbegin(); it != levels_.rend(); ++it) {
    if (it->MayContain(token)) return true;
  }
  return false;
}

size_t TokenFilter::memory_bytes() const {
  size_t bytes = 0;
  for (const Level& level : levels_) bytes += level.words.size() * 8;
  return bytes;
}

}  // namespace internal
}  // namespace storage
}  // namespace tally
