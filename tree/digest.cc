#include "tree/digest.h"

#include <xxhash.h>

#include <cstring>
#include <memory>

#include "absl/strings/str_format.h"

namespace tally {
namespace tree {
namespace {

void AppendFixed64(std::string* dst, uint64_t v) {
  char buf[8];
  for (int i = 0; i < 8; ++i) buf[i] = static_cast<char>(v >> (56 - 8 * i));
  dst->append(buf, 8);
}

uint64_t LoadFixed64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

char* PutFixed64(char* dst, uint64_t v) {
  for (int i = 0; i < 8; ++i) dst[i] = static_cast<char>(v >> (56 - 8 * i));
  return dst + 8;
}

// Length-prefixed so that ("ab", "c") and ("a", "bc") differ.
char* PutField(char* dst, absl::string_view field) {
  dst = PutFixed64(dst, field.size());
  if (!field.empty()) std::memcpy(dst, field.data(), field.size());
  return dst + field.size();
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string Digest128::ToHex() const {
  return absl::StrFormat("%016x%016x", high, low);
}

bool Digest128::FromHex(absl::string_view hex, Digest128* out) {
  if (hex.size() != 32) return false;
  uint64_t halves[2] = {0, 0};
  for (int i = 0; i < 32; ++i) {
    const int v = HexValue(hex[i]);
    if (v < 0) return false;
    halves[i / 16] = (halves[i / 16] << 4) | static_cast<uint64_t>(v);
  }
  out->high = halves[0];
  out->low = halves[1];
  return true;
}

void Digest128::AppendTo(std::string* dst) const {
  AppendFixed64(dst, high);
  AppendFixed64(dst, low);
}

Digest128 Digest128::Load(const char* bytes) {
  return Digest128{LoadFixed64(bytes), LoadFixed64(bytes + 8)};
}

Digest128 RowDigest(absl::string_view keyspace, absl::string_view key,
                    const Version& version, bool deleted,
                    absl::string_view value) {
  // The fields, length-prefixed, hashed in one piece: on the stack when
  // they fit (a heap buffer per row was a malloc and free in every write).
  const size_t size = 4 * 8 + 8 + 1 + keyspace.size() + key.size() +
                      version.origin.size() + value.size();
  constexpr size_t kStackBytes = 1024;
  char stack[kStackBytes];
  std::unique_ptr<char[]> heap;
  char* const encoded = size <= kStackBytes
                            ? stack
                            : (heap = std::make_unique<char[]>(size)).get();
  char* p = PutField(encoded, keyspace);
  p = PutField(p, key);
  p = PutFixed64(p, version.timestamp.raw());
  p = PutField(p, version.origin);
  *p++ = deleted ? 1 : 0;
  p = PutField(p, value);
  const XXH128_hash_t h =
      XXH3_128bits(encoded, static_cast<size_t>(p - encoded));
  return Digest128{h.high64, h.low64};
}

}  // namespace tree
}  // namespace tally
