#include "pg/sidecar/capture_position.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pg/wire/internal/big_endian.h"

namespace tally {
namespace pg {
namespace {

using internal::BigEndianReader;
using internal::PutBigEndian32;
using internal::PutBigEndian64;
using internal::PutBigEndian8;

constexpr uint8_t kFormat = 1;
constexpr uint8_t kHasPartial = 1;
constexpr uint8_t kHasFingerprints = 2;

absl::Status Bad(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("capture position: ", what,
                                          " (not a position this tally "
                                          "wrote; rebuild the index)"));
}

}  // namespace

std::string CapturePosition::Encode() const {
  std::string out;
  PutBigEndian8(&out, kFormat);
  PutBigEndian8(&out, (partial.has_value() ? kHasPartial : 0) |
                          (fingerprints.empty() ? 0 : kHasFingerprints));
  PutBigEndian64(&out, system_id);
  PutBigEndian64(&out, resume_lsn);
  if (partial.has_value()) {
    PutBigEndian64(&out, partial->end_lsn);
    PutBigEndian64(&out, partial->changes_done);
    PutBigEndian64(&out, partial->version.timestamp.raw());
    PutBigEndian32(&out, static_cast<uint32_t>(partial->version.origin.size()));
    out.append(partial->version.origin);
  }
  if (!fingerprints.empty()) {
    PutBigEndian32(&out, static_cast<uint32_t>(fingerprints.size()));
    for (const auto& [keyspace, fingerprint] : fingerprints) {
      PutBigEndian32(&out, static_cast<uint32_t>(keyspace.size()));
      out.append(keyspace);
      PutBigEndian32(&out, static_cast<uint32_t>(fingerprint.size()));
      out.append(fingerprint);
    }
  }
  return out;
}

absl::StatusOr<CapturePosition> CapturePosition::Decode(
    absl::string_view bytes) {
  BigEndianReader in(bytes);
  uint8_t format = 0, flags = 0;
  if (!in.ReadU8(&format)) return Bad("empty");
  if (format != kFormat) {
    return Bad(absl::StrFormat("unknown format %d", format));
  }
  CapturePosition p;
  if (!in.ReadU8(&flags) || !in.ReadU64(&p.system_id) ||
      !in.ReadU64(&p.resume_lsn)) {
    return Bad("truncated");
  }
  if ((flags & ~(kHasPartial | kHasFingerprints)) != 0) {
    return Bad(absl::StrFormat("unknown flags 0x%02x", flags));
  }
  if ((flags & kHasPartial) != 0) {
    Partial partial;
    uint64_t raw = 0;
    uint32_t origin_len = 0;
    absl::string_view origin;
    if (!in.ReadU64(&partial.end_lsn) || !in.ReadU64(&partial.changes_done) ||
        !in.ReadU64(&raw) || !in.ReadU32(&origin_len) ||
        !in.ReadBytes(origin_len, &origin)) {
      return Bad("truncated partial transaction");
    }
    partial.version.timestamp = tree::HlcTimestamp::FromRaw(raw);
    partial.version.origin = std::string(origin);
    p.partial = std::move(partial);
  }
  if ((flags & kHasFingerprints) != 0) {
    uint32_t count = 0;
    if (!in.ReadU32(&count) || count == 0) return Bad("bad fingerprint count");
    for (uint32_t i = 0; i < count; ++i) {
      uint32_t len = 0;
      absl::string_view keyspace, fingerprint;
      if (!in.ReadU32(&len) || !in.ReadBytes(len, &keyspace) ||
          !in.ReadU32(&len) || !in.ReadBytes(len, &fingerprint)) {
        return Bad("truncated fingerprints");
      }
      if (!p.fingerprints.emplace(keyspace, fingerprint).second) {
        return Bad(absl::StrCat("keyspace ", keyspace, " twice"));
      }
    }
  }
  if (!in.empty()) {
    return Bad(absl::StrFormat("%d bytes after the end", in.remaining()));
  }
  return p;
}

std::string CapturePosition::DebugString() const {
  std::string s =
      absl::StrFormat("system %d resume %s", system_id, FormatLsn(resume_lsn));
  if (partial.has_value()) {
    absl::StrAppendFormat(&s,
                          " (partial: %d changes of the transaction ending %s)",
                          partial->changes_done, FormatLsn(partial->end_lsn));
  }
  return s;
}

}  // namespace pg
}  // namespace tally
