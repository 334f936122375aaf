// 128-bit digests of rows and of sets of rows.
//
// A row digest is XXH3-128 over an unambiguous, length-prefixed encoding of
// everything that makes a row what it is: keyspace, key, version (HLC
// timestamp and origin long name), deleted flag and value. Two different rows
// never encode to the same bytes, so they collide only by hash accident.
//
// The digest of a set of rows is the XOR of their digests: adding or removing
// a row is one XOR, the same whatever the order, and the digest of a union of
// disjoint sets is the XOR of their digests. The empty set has the zero digest.
//
//   Digest128 d = RowDigest("users", "alice", version, false, "v1");
//   leaf ^= d;  // add;  leaf ^= d again removes it.
//
// Thread-safe: value types and pure functions.
#ifndef TALLY_TREE_DIGEST_H_
#define TALLY_TREE_DIGEST_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "tree/version.h"

namespace tally {
namespace tree {

struct Digest128 {
  uint64_t high = 0;
  uint64_t low = 0;

  bool IsZero() const { return high == 0 && low == 0; }
  Digest128& operator^=(const Digest128& other) {
    high ^= other.high;
    low ^= other.low;
    return *this;
  }
  friend Digest128 operator^(Digest128 a, const Digest128& b) { return a ^= b; }
  friend bool operator==(const Digest128& a, const Digest128& b) {
    return a.high == b.high && a.low == b.low;
  }
  friend bool operator!=(const Digest128& a, const Digest128& b) {
    return !(a == b);
  }

  // The 64-bit fingerprint that nodes and rows travel as. A false "equal"
  // (probability 2^-64 per comparison) would hide one key from the descent
  // until a row under that node changes; the root comparison uses all 128
  // bits, so the replicas are still seen to differ.
  uint64_t Fingerprint() const { return low; }

  // 32 lower-case hex digits, high half first.
  std::string ToHex() const;
  // Parses what ToHex() printed. Returns false on malformed input.
  static bool FromHex(absl::string_view hex, Digest128* out);

  // 16 bytes, big-endian, high half first (the on-disk encoding).
  void AppendTo(std::string* dst) const;
  // REQUIRES: `bytes` points at 16 readable bytes.
  static Digest128 Load(const char* bytes);
};

// The digest of one row. `deleted` rows (tombstones) are digested too, with
// their value (normally empty), so that a delete is a difference.
Digest128 RowDigest(absl::string_view keyspace, absl::string_view key,
                    const Version& version, bool deleted,
                    absl::string_view value);

}  // namespace tree
}  // namespace tally

#endif  // TALLY_TREE_DIGEST_H_
