#include "pg/wire/binary_copy.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pg/wire/internal/big_endian.h"

namespace tally {
namespace pg {
namespace {

using internal::LoadBigEndian16;
using internal::LoadBigEndian32;
using internal::PutBigEndian16;
using internal::PutBigEndian32;

// Header: signature, flags, extension length (then the extension).
constexpr size_t kFixedHeaderBytes = 11 + 4 + 4;
// Flags bit 16: every tuple carries an OID (WITH OIDS, gone since PG 12).
constexpr uint32_t kFlagHasOids = uint32_t{1} << 16;
// Bits 0-15 are critical: a reader must refuse a stream that sets one it
// does not know. Bits 17-31 may be ignored.
constexpr uint32_t kCriticalFlags = 0xffff;

}  // namespace

CopyBinaryReader::CopyBinaryReader(RowCallback on_row, int expected_fields)
    : on_row_(std::move(on_row)), expected_fields_(expected_fields) {}

absl::Status CopyBinaryReader::Corrupt(absl::string_view what,
                                       uint64_t at) const {
  return absl::DataLossError(absl::StrCat("binary COPY stream, byte ", at, " (",
                                          rows_, " rows read): ", what));
}

absl::Status CopyBinaryReader::Feed(absl::string_view piece) {
  if (!error_.ok()) return error_;
  if (piece.empty()) return absl::OkStatus();
  size_t used = 0;
  absl::Status s;
  if (pending_.empty()) {
    // The common case: parse straight from the caller's piece and keep
    // only an incomplete tail.
    s = Parse(piece, &used);
    // Usually the piece was one whole row (libpq returns one CopyData
    // message at a time): nothing to keep.
    if (s.ok() && used < piece.size()) {
      pending_.assign(piece.data() + used, piece.size() - used);
    }
  } else {
    pending_.append(piece.data(), piece.size());
    // A large row arriving in many pieces is parsed once, when it is all
    // here, not once per piece.
    if (pending_.size() < need_) return absl::OkStatus();
    s = Parse(pending_, &used);
    if (s.ok()) pending_.erase(0, used);
  }
  if (!s.ok()) {
    error_ = s;
    pending_.clear();
    return s;
  }
  offset_ += used;
  return absl::OkStatus();
}

absl::Status CopyBinaryReader::Parse(absl::string_view data, size_t* used) {
  size_t pos = 0;  // start of the current unit
  need_ = 0;
  while (pos < data.size() || state_ == State::kHeader) {
    const char* p = data.data() + pos;
    const size_t avail = data.size() - pos;
    const uint64_t at = offset_ + pos;
    switch (state_) {
      case State::kHeader: {
        if (avail < kFixedHeaderBytes) {
          // The signature is checked as soon as its bytes are here, so a
          // stream that is not binary COPY fails on its first piece.
          const size_t n = std::min(avail, kCopyBinarySignature.size());
          if (absl::string_view(p, n) != kCopyBinarySignature.substr(0, n)) {
            return Corrupt("bad signature: not a binary COPY stream", at);
          }
          need_ = kFixedHeaderBytes;
          *used = pos;
          return absl::OkStatus();
        }
        if (absl::string_view(p, kCopyBinarySignature.size()) !=
            kCopyBinarySignature) {
          return Corrupt("bad signature: not a binary COPY stream", at);
        }
        const uint32_t flags = LoadBigEndian32(p + 11);
        if (flags & kFlagHasOids) {
          return Corrupt(
              "rows carry OIDs (flag bit 16), which tally never asks for",
              at + 11);
        }
        if (flags & kCriticalFlags) {
          return Corrupt(absl::StrFormat("unknown critical header flags 0x%04x",
                                         flags & kCriticalFlags),
                         at + 11);
        }
        const uint32_t ext = LoadBigEndian32(p + 15);
        if (ext > INT32_MAX) {
          return Corrupt(absl::StrCat("negative header extension length ",
                                      static_cast<int32_t>(ext)),
                         at + 15);
        }
        if (avail < kFixedHeaderBytes + ext) {
          need_ = kFixedHeaderBytes + ext;
          *used = pos;
          return absl::OkStatus();
        }
        pos += kFixedHeaderBytes + ext;
        state_ = State::kRows;
        break;
      }
      case State::kRows: {
        if (avail < 2) {
          need_ = 2;
          *used = pos;
          return absl::OkStatus();
        }
        const int16_t count = static_cast<int16_t>(LoadBigEndian16(p));
        if (count == -1) {
          pos += 2;
          state_ = State::kDone;
          break;
        }
        if (count < 0) {
          return Corrupt(absl::StrCat("negative field count ", count), at);
        }
        if (expected_fields_ != kAnyFieldCount && count != expected_fields_) {
          return Corrupt(absl::StrCat("a row of ", count, " fields; expected ",
                                      expected_fields_),
                         at);
        }
        // Sized once (rows of one COPY all have the same count), then
        // assigned in place: no capacity check per field.
        fields_.resize(static_cast<size_t>(count));
        size_t q = 2;  // offset within the row
        for (int i = 0; i < count; ++i) {
          if (avail < q + 4) {
            need_ = q + 4;
            *used = pos;
            return absl::OkStatus();
          }
          const int32_t len = static_cast<int32_t>(LoadBigEndian32(p + q));
          if (len == -1) {
            fields_[i] = Field::Null();
            q += 4;
            continue;
          }
          if (len < 0) {
            return Corrupt(absl::StrCat("field ", i, " has length ", len),
                           at + q);
          }
          if (avail < q + 4 + static_cast<size_t>(len)) {
            need_ = q + 4 + static_cast<size_t>(len);
            *used = pos;
            return absl::OkStatus();
          }
          fields_[i] = Field::Of(absl::string_view(p + q + 4, len));
          q += 4 + static_cast<size_t>(len);
        }
        absl::Status s = on_row_(fields_);
        if (!s.ok()) return s;
        ++rows_;
        pos += q;
        break;
      }
      case State::kDone:
        return Corrupt(
            absl::StrCat(data.size() - pos, " bytes after the trailer"), at);
    }
  }
  *used = pos;
  return absl::OkStatus();
}

absl::Status CopyBinaryReader::Finish() {
  if (!error_.ok()) return error_;
  if (state_ == State::kDone) return absl::OkStatus();
  const uint64_t at = offset_ + pending_.size();
  if (state_ == State::kHeader) {
    return Corrupt(absl::StrCat("the stream ends inside its header (",
                                pending_.size(), " bytes)"),
                   at);
  }
  if (pending_.empty()) {
    return Corrupt("the stream ends without its trailer", at);
  }
  return Corrupt(
      absl::StrCat("the stream ends inside row ", rows_ + 1, " (",
                   pending_.size(), " of at least ", need_, " bytes)"),
      at);
}

CopyBinaryWriter::CopyBinaryWriter() {
  buffer_.append(kCopyBinarySignature.data(), kCopyBinarySignature.size());
  PutBigEndian32(&buffer_, 0);  // flags
  PutBigEndian32(&buffer_, 0);  // header extension length
}

absl::Status CopyBinaryWriter::AddRow(absl::Span<const Field> fields) {
  if (finished_) {
    return absl::FailedPreconditionError(
        "a row added to a binary COPY stream after its trailer");
  }
  if (fields.size() > kMaxFields) {
    return absl::InvalidArgumentError(
        absl::StrCat("a binary COPY row of ", fields.size(),
                     " fields; the limit is ", kMaxFields));
  }
  size_t bytes = 2;
  for (size_t i = 0; i < fields.size(); ++i) {
    bytes += 4;
    if (fields[i].is_null()) continue;
    if (fields[i].bytes().size() > INT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(
          "field ", i, " of a binary COPY row is ", fields[i].bytes().size(),
          " bytes; the limit is ", INT32_MAX));
    }
    bytes += fields[i].bytes().size();
  }
  buffer_.reserve(buffer_.size() + bytes);
  PutBigEndian16(&buffer_, static_cast<uint16_t>(fields.size()));
  for (const Field& f : fields) {
    if (f.is_null()) {
      PutBigEndian32(&buffer_, 0xffffffffu);
      continue;
    }
    PutBigEndian32(&buffer_, static_cast<uint32_t>(f.bytes().size()));
    buffer_.append(f.bytes().data(), f.bytes().size());
  }
  ++rows_;
  return absl::OkStatus();
}

void CopyBinaryWriter::Finish() {
  finished_ = true;
  PutBigEndian16(&buffer_, 0xffff);
}

std::string CopyBinaryWriter::TakeBuffered() {
  std::string out;
  out.swap(buffer_);
  return out;
}

}  // namespace pg
}  // namespace tally
