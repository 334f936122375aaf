#include "tree/token.h"

#include <xxhash.h>

#include "absl/strings/str_format.h"

namespace tally {
namespace tree {
namespace {

// Part of the on-disk and on-wire format: never change it.
constexpr XXH64_hash_t kTokenSeed = 0x7a11'7a11'5eed'0001ULL;

}  // namespace

Token TokenOf(absl::string_view key) {
  return XXH3_64bits_withSeed(key.data(), key.size(), kTokenSeed);
}

std::string NodeRef::DebugString() const {
  return absl::StrFormat("node(level=%d, index=%d)", level, index);
}

}  // namespace tree
}  // namespace tally
