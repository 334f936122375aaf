// Fixed-width big-endian integers and length-prefixed strings: the byte
// encodings of tally's LevelDB records. Big-endian so that byte order is
// numeric order and a range of tokens or sequences is one contiguous scan.
#ifndef TALLY_STORAGE_INTERNAL_CODING_H_
#define TALLY_STORAGE_INTERNAL_CODING_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace tally {
namespace storage {
namespace internal {

inline void PutFixed32(std::string* dst, uint32_t v) {
  const char buf[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                       static_cast<char>(v >> 8), static_cast<char>(v)};
  dst->append(buf, 4);
}

inline void PutFixed64(std::string* dst, uint64_t v) {
  PutFixed32(dst, static_cast<uint32_t>(v >> 32));
  PutFixed32(dst, static_cast<uint32_t>(v));
}

inline uint32_t DecodeFixed32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return (uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) |
         (uint32_t{u[2]} << 8) | uint32_t{u[3]};
}

inline uint64_t DecodeFixed64(const char* p) {
  return (uint64_t{DecodeFixed32(p)} << 32) | DecodeFixed32(p + 4);
}

// Reads a fixed-width integer from the front of `in` and advances it.
// Returns false when `in` is too short.
inline bool GetFixed32(absl::string_view* in, uint32_t* v) {
  if (in->size() < 4) return false;
  *v = DecodeFixed32(in->data());
  in->remove_prefix(4);
  return true;
}

inline bool GetFixed64(absl::string_view* in, uint64_t* v) {
  if (in->size() < 8) return false;
  *v = DecodeFixed64(in->data());
  in->remove_prefix(8);
  return true;
}

// A 4-byte length, then the bytes.
inline void PutLengthPrefixed(std::string* dst, absl::string_view s) {
  PutFixed32(dst, static_cast<uint32_t>(s.size()));
  dst->append(s.data(), s.size());
}

inline bool GetLengthPrefixed(absl::string_view* in, absl::string_view* out) {
  uint32_t n;
  if (!GetFixed32(in, &n) || in->size() < n) return false;
  *out = in->substr(0, n);
  in->remove_prefix(n);
  return true;
}

inline std::string Fixed32String(uint32_t v) {
  std::string s;
  PutFixed32(&s, v);
  return s;
}

inline std::string Fixed64String(uint64_t v) {
  std::string s;
  PutFixed64(&s, v);
  return s;
}

}  // namespace internal
}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_INTERNAL_CODING_H_
