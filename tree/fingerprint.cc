#include "tree/fingerprint.h"

#include <xxhash.h>

#include <cstring>
#include <random>

#include "absl/strings/str_format.h"

namespace tally {
namespace tree {
namespace {

uint64_t LowBits(uint64_t v, int bits) {
  return bits >= 64 ? v : v & ((uint64_t{1} << bits) - 1);
}

}  // namespace

uint64_t NodeFingerprint(uint64_t seed, const NodeDigest& node, int bits) {
  char buf[16];
  std::memcpy(buf, &node.fingerprint, 8);
  std::memcpy(buf + 8, &node.count, 8);
  return LowBits(XXH3_64bits_withSeed(buf, sizeof(buf), seed), bits);
}

uint64_t RowFingerprint(uint64_t seed, const RowEntry& row, int bits) {
  // The key's hash under the seed, then the digest under that: no encoding
  // of (key, digest) pairs is ambiguous.
  const uint64_t key = XXH3_64bits_withSeed(row.key.data(), row.key.size(),
                                            seed ^ 0x9E3779B97F4A7C15ull);
  const uint64_t fingerprint = row.digest.Fingerprint();
  return LowBits(XXH3_64bits_withSeed(&fingerprint, 8, key), bits);
}

uint64_t NewSessionSeed() {
  std::random_device device;
  return (uint64_t{device()} << 32) ^ device();
}

std::string PackBits(absl::Span<const uint64_t> values, int bits) {
  std::string out(PackedBytes(values.size(), bits), '\0');
  size_t bit = 0;
  for (uint64_t v : values) {
    for (int done = 0; done < bits;) {
      const size_t byte = bit / 8;
      const int shift = static_cast<int>(bit % 8);
      const int take = std::min(8 - shift, bits - done);
      const uint64_t part = (v >> done) & ((uint64_t{1} << take) - 1);
      out[byte] = static_cast<char>(static_cast<uint8_t>(out[byte]) |
                                    static_cast<uint8_t>(part << shift));
      done += take;
      bit += static_cast<size_t>(take);
    }
  }
  return out;
}

absl::StatusOr<std::vector<uint64_t>> UnpackBits(absl::string_view packed,
                                                 int bits, size_t count) {
  if (bits < 1 || bits > 64) {
    return absl::InvalidArgumentError(
        absl::StrFormat("fingerprints of %d bits; widths are 1..64", bits));
  }
  if (packed.size() != PackedBytes(count, bits)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d packed bytes do not hold %d values of %d bits (%d bytes do)",
        packed.size(), count, bits, PackedBytes(count, bits)));
  }
  std::vector<uint64_t> out(count, 0);
  size_t bit = 0;
  for (uint64_t& v : out) {
    for (int done = 0; done < bits;) {
      const size_t byte = bit / 8;
      const int shift = static_cast<int>(bit % 8);
      const int take = std::min(8 - shift, bits - done);
      const uint64_t part =
          (static_cast<uint8_t>(packed[byte]) >> shift) & ((1u << take) - 1);
      v |= part << done;
      done += take;
      bit += static_cast<size_t>(take);
    }
  }
  return out;
}

}  // namespace tree
}  // namespace tally
