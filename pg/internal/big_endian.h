// Big-endian (network order) integers, as PostgreSQL's binary formats and
// tally's PostgreSQL encodings write them.
//
// Thread-safety: pure functions.
#ifndef TALLY_PG_INTERNAL_BIG_ENDIAN_H_
#define TALLY_PG_INTERNAL_BIG_ENDIAN_H_

#include <cstdint>
#include <string>

namespace tally {
namespace pg {
namespace internal {

inline void PutBigEndian16(std::string* out, uint16_t v) {
  out->push_back(static_cast<char>(v >> 8));
  out->push_back(static_cast<char>(v));
}

inline void PutBigEndian32(std::string* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) {
    out->push_back(static_cast<char>(v >> shift));
  }
}

inline void PutBigEndian64(std::string* out, uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) {
    out->push_back(static_cast<char>(v >> shift));
  }
}

// REQUIRES: `p` points at 2 (4, 8) readable bytes.
inline uint16_t LoadBigEndian16(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return static_cast<uint16_t>((u[0] << 8) | u[1]);
}

inline uint32_t LoadBigEndian32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return (uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) |
         (uint32_t{u[2]} << 8) | uint32_t{u[3]};
}

inline uint64_t LoadBigEndian64(const char* p) {
  return (uint64_t{LoadBigEndian32(p)} << 32) | LoadBigEndian32(p + 4);
}

}  // namespace internal
}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_INTERNAL_BIG_ENDIAN_H_
