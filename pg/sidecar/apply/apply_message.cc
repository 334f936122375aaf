#include "pg/sidecar/apply/apply_message.h"

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "pg/wire/internal/big_endian.h"

namespace tally {
namespace pg {
namespace {

using internal::LoadBigEndian32;
using internal::LoadBigEndian64;
using internal::PutBigEndian32;
using internal::PutBigEndian64;

constexpr char kFormat = 0x01;
constexpr uint8_t kFlagDeleted = 0x01;
constexpr uint8_t kFlagErased = 0x02;

void PutString(std::string* out, absl::string_view s) {
  PutBigEndian32(out, static_cast<uint32_t>(s.size()));
  out->append(s.data(), s.size());
}

// Names listed once, each row referring to its name by index.
class NameTable {
 public:
  uint32_t IndexOf(const std::string& name) {
    auto [it, inserted] = index_.try_emplace(name, names_.size());
    if (inserted) names_.push_back(&name);
    return it->second;
  }
  void AppendTo(std::string* out) const {
    PutBigEndian32(out, static_cast<uint32_t>(names_.size()));
    for (const std::string* name : names_) PutString(out, *name);
  }

 private:
  absl::flat_hash_map<absl::string_view, uint32_t> index_;
  std::vector<const std::string*> names_;
};

// Reads the message front to back; every read checks the bytes left.
class Reader {
 public:
  explicit Reader(absl::string_view bytes) : bytes_(bytes) {}

  bool U8(uint8_t* v) {
    if (!Has(1)) return false;
    *v = static_cast<uint8_t>(bytes_[pos_++]);
    return true;
  }
  bool U32(uint32_t* v) {
    if (!Has(4)) return false;
    *v = LoadBigEndian32(bytes_.data() + pos_);
    pos_ += 4;
    return true;
  }
  bool U64(uint64_t* v) {
    if (!Has(8)) return false;
    *v = LoadBigEndian64(bytes_.data() + pos_);
    pos_ += 8;
    return true;
  }
  bool Bytes(size_t n, absl::string_view* v) {
    if (!Has(n)) return false;
    *v = bytes_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  bool String(std::string* v) {
    uint32_t n;
    absl::string_view s;
    if (!U32(&n) || !Bytes(n, &s)) return false;
    v->assign(s.data(), s.size());
    return true;
  }
  bool Names(std::vector<std::string>* names) {
    uint32_t n;
    if (!U32(&n)) return false;
    // Each name takes at least its 4-byte length: a count that cannot fit
    // is refused before anything is allocated for it.
    if (n > (bytes_.size() - pos_) / 4) return false;
    names->resize(n);
    for (std::string& name : *names) {
      if (!String(&name)) return false;
    }
    return true;
  }
  size_t pos() const { return pos_; }
  size_t left() const { return bytes_.size() - pos_; }

 private:
  bool Has(size_t n) const { return bytes_.size() - pos_ >= n; }

  absl::string_view bytes_;
  size_t pos_ = 0;
};

absl::Status Corrupt(absl::string_view what, size_t at) {
  return absl::DataLossError(
      absl::StrCat("'tally.apply' message, byte ", at, ": ", what));
}

}  // namespace

std::string EncodeApplyMessage(const ApplyMessage& message) {
  NameTable keyspaces, origins;
  std::string rows;
  for (const AppliedRow& row : message.rows) {
    PutBigEndian32(&rows, keyspaces.IndexOf(row.keyspace));
    PutString(&rows, row.key);
    PutBigEndian64(&rows, row.version.timestamp.raw());
    PutBigEndian32(&rows, origins.IndexOf(row.version.origin));
    rows.push_back(
        static_cast<char>((row.deleted || row.erased ? kFlagDeleted : 0) |
                          (row.erased ? kFlagErased : 0)));
  }
  std::string out;
  out.push_back(kFormat);
  PutBigEndian64(&out, message.apply_sequence);
  out += message.token.Encode();
  keyspaces.AppendTo(&out);
  origins.AppendTo(&out);
  PutBigEndian32(&out, static_cast<uint32_t>(message.rows.size()));
  out += rows;
  return out;
}

absl::StatusOr<ApplyMessage> DecodeApplyMessage(absl::string_view bytes) {
  Reader r(bytes);
  ApplyMessage m;
  uint8_t format;
  if (!r.U8(&format)) return Corrupt("empty", 0);
  if (format != kFormat) {
    return Corrupt(absl::StrCat("unknown format ", int{format}), 0);
  }
  absl::string_view token;
  if (!r.U64(&m.apply_sequence) || !r.Bytes(RowToken::kEncodedBytes, &token)) {
    return Corrupt("truncated header", r.pos());
  }
  auto decoded = RowToken::Decode(token);
  if (!decoded.ok()) return Corrupt(decoded.status().message(), 9);
  m.token = *decoded;
  std::vector<std::string> keyspaces, origins;
  if (!r.Names(&keyspaces)) return Corrupt("truncated keyspace list", r.pos());
  if (!r.Names(&origins)) return Corrupt("truncated origin list", r.pos());
  uint32_t count;
  if (!r.U32(&count)) return Corrupt("truncated row count", r.pos());
  // A row takes at least 21 bytes.
  if (count > r.left() / 21) {
    return Corrupt(
        absl::StrCat(count, " rows cannot fit in ", r.left(), " bytes"),
        r.pos());
  }
  m.rows.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    AppliedRow& row = m.rows[i];
    uint32_t keyspace, origin;
    uint64_t timestamp;
    uint8_t flags;
    if (!r.U32(&keyspace) || !r.String(&row.key) || !r.U64(&timestamp) ||
        !r.U32(&origin) || !r.U8(&flags)) {
      return Corrupt(absl::StrCat("truncated row ", i), r.pos());
    }
    if (keyspace >= keyspaces.size() || origin >= origins.size()) {
      return Corrupt(absl::StrCat("row ", i, " names keyspace ", keyspace,
                                  " and origin ", origin, " of ",
                                  keyspaces.size(), " and ", origins.size()),
                     r.pos());
    }
    if ((flags & ~(kFlagDeleted | kFlagErased)) ||
        ((flags & kFlagErased) && !(flags & kFlagDeleted))) {
      return Corrupt(absl::StrCat("row ", i, " has unknown flags ", int{flags}),
                     r.pos());
    }
    row.keyspace = keyspaces[keyspace];
    row.version.timestamp = tree::HlcTimestamp::FromRaw(timestamp);
    row.version.origin = origins[origin];
    row.deleted = flags & kFlagDeleted;
    row.erased = flags & kFlagErased;
  }
  if (r.left() != 0) {
    return Corrupt(absl::StrCat(r.left(), " bytes after the last row"),
                   r.pos());
  }
  return m;
}

}  // namespace pg
}  // namespace tally
