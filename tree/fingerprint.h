// Seeded, shortened fingerprints: what nodes and rows travel as in a seeded
// exchange (tree_view.h, ViewRequest::seeded).
//
// A diff session picks a fresh 64-bit seed; every node and row fingerprint
// on the wire is a hash of the full 64-bit fingerprint under that seed, cut
// to a few bits. Two different nodes then look equal with probability 2^-bits
// in one session, independently of every other session: a false match cannot
// repeat, unlike with the fixed low 64 bits, and so may be made likely enough
// to be worth the bytes it saves (docs/design/diff.md, "Short fingerprints").
//
//   const uint64_t f = NodeFingerprint(seed, digest, 16);  // 0..65535
//   std::string packed = PackBits(values, 16);              // 2 bytes each
//
// Thread-safe: pure functions.
#ifndef TALLY_TREE_FINGERPRINT_H_
#define TALLY_TREE_FINGERPRINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tree/tree_view.h"

namespace tally {
namespace tree {

// Widths a seeded exchange may use for nodes and rows.
inline constexpr int kMinFingerprintBits = 8;
inline constexpr int kMaxFingerprintBits = 64;

// `bits` low bits of a seeded hash of the node's 64-bit fingerprint and row
// count. REQUIRES: 1 <= bits <= 64.
uint64_t NodeFingerprint(uint64_t seed, const NodeDigest& node, int bits);

// `bits` low bits of a seeded hash of the row's key and 64-bit digest
// fingerprint: equal for two rows only when (up to chance) they are the same
// key in the same state. REQUIRES: 1 <= bits <= 64.
uint64_t RowFingerprint(uint64_t seed, const RowEntry& row, int bits);

// A seed for the next session: unpredictable enough that no two sessions
// share one (time, address entropy and a counter mixed).
uint64_t NewSessionSeed();

// `values` packed little-endian at `bits` each (the last byte zero-padded).
// REQUIRES: 1 <= bits <= 64 and every value < 2^bits.
std::string PackBits(absl::Span<const uint64_t> values, int bits);

// The inverse: exactly `count` values of `bits` each. Returns
// kInvalidArgument when `packed` is not the size PackBits gives.
absl::StatusOr<std::vector<uint64_t>> UnpackBits(absl::string_view packed,
                                                 int bits, size_t count);

// Bytes PackBits produces.
inline size_t PackedBytes(size_t count, int bits) {
  return (count * static_cast<size_t>(bits) + 7) / 8;
}

}  // namespace tree
}  // namespace tally

#endif  // TALLY_TREE_FINGERPRINT_H_
