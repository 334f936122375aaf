// Network-order (big-endian) integers as PostgreSQL's protocols and binary
// formats send them, and as tally's PostgreSQL encodings write them: append
// functions, loads from memory known to be long enough, and a
// bounds-checked reader over a received message.
//
//   BigEndianReader in(payload);
//   uint64_t lsn;
//   if (!in.ReadU64(&lsn)) return Truncated("Begin", "final LSN");
//
// The reader never reads past its input: every Read* returns false, and
// leaves the reader unchanged, when too few bytes are left. Callers turn
// that into a status naming the field, which only they know.
//
// pg/ keeps its own copy instead of including storage/internal/coding.h:
// pg/ must not depend on another layer's private helpers.
//
// Thread-compatible: pure functions; a reader is a cursor over memory it
// does not own.
#ifndef TALLY_PG_WIRE_INTERNAL_BIG_ENDIAN_H_
#define TALLY_PG_WIRE_INTERNAL_BIG_ENDIAN_H_

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/string_view.h"

namespace tally {
namespace pg {
namespace internal {

inline void PutBigEndian8(std::string* out, uint8_t v) {
  out->push_back(static_cast<char>(v));
}

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

class BigEndianReader {
 public:
  // `in` must outlive the reader and every view it returns.
  explicit BigEndianReader(absl::string_view in) : in_(in) {}

  size_t remaining() const { return in_.size(); }
  bool empty() const { return in_.empty(); }
  // How far into the input the cursor is (for error messages).
  size_t offset() const { return consumed_; }

  bool ReadU8(uint8_t* v) {
    if (in_.size() < 1) return false;
    *v = static_cast<uint8_t>(in_[0]);
    Skip(1);
    return true;
  }

  bool ReadU16(uint16_t* v) {
    if (in_.size() < 2) return false;
    const auto* u = reinterpret_cast<const unsigned char*>(in_.data());
    *v = static_cast<uint16_t>((u[0] << 8) | u[1]);
    Skip(2);
    return true;
  }

  bool ReadU32(uint32_t* v) {
    if (in_.size() < 4) return false;
    const auto* u = reinterpret_cast<const unsigned char*>(in_.data());
    *v = (uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) |
         (uint32_t{u[2]} << 8) | uint32_t{u[3]};
    Skip(4);
    return true;
  }

  bool ReadU64(uint64_t* v) {
    if (in_.size() < 8) return false;
    uint32_t hi = 0, lo = 0;
    ReadU32(&hi);
    ReadU32(&lo);
    *v = (uint64_t{hi} << 32) | lo;
    return true;
  }

  // Signed forms: the same bits in two's complement (PostgreSQL's int2,
  // int4 and int8 on the wire).
  bool ReadI16(int16_t* v) {
    uint16_t u;
    if (!ReadU16(&u)) return false;
    *v = static_cast<int16_t>(u);
    return true;
  }
  bool ReadI32(int32_t* v) {
    uint32_t u;
    if (!ReadU32(&u)) return false;
    *v = static_cast<int32_t>(u);
    return true;
  }
  bool ReadI64(int64_t* v) {
    uint64_t u;
    if (!ReadU64(&u)) return false;
    *v = static_cast<int64_t>(u);
    return true;
  }

  // The next `n` bytes, as a view into the input.
  bool ReadBytes(size_t n, absl::string_view* v) {
    if (in_.size() < n) return false;
    *v = in_.substr(0, n);
    Skip(n);
    return true;
  }

  // A NUL-terminated string (the protocol's "String"); the view excludes
  // the terminator. False when no NUL is left in the input.
  bool ReadCString(absl::string_view* v) {
    if (in_.empty()) return false;
    const void* nul = std::memchr(in_.data(), '\0', in_.size());
    if (nul == nullptr) return false;
    const size_t n = static_cast<const char*>(nul) - in_.data();
    *v = in_.substr(0, n);
    Skip(n + 1);
    return true;
  }

 private:
  void Skip(size_t n) {
    in_.remove_prefix(n);
    consumed_ += n;
  }

  absl::string_view in_;
  size_t consumed_ = 0;
};

}  // namespace internal
}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_WIRE_INTERNAL_BIG_ENDIAN_H_
