#include "pg/sidecar/apply/row_token.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "pg/wire/internal/big_endian.h"

namespace tally {
namespace pg {
namespace {

constexpr char kTagCommitTime = 0x01;
constexpr char kTagNoCommitTime = 0x02;

// PostgreSQL's epoch, 2000-01-01 00:00:00 UTC, in Unix seconds.
constexpr int64_t kPostgresEpochUnixSeconds = 946684800;

}  // namespace

std::string RowToken::Encode() const {
  std::string out;
  out.reserve(kEncodedBytes);
  out.push_back(commit_time_us ? kTagCommitTime : kTagNoCommitTime);
  internal::PutBigEndian64(&out,
                           static_cast<uint64_t>(commit_time_us.value_or(0)));
  internal::PutBigEndian16(&out, origin.value);
  return out;
}

absl::StatusOr<RowToken> RowToken::Decode(absl::string_view bytes) {
  if (bytes.size() != kEncodedBytes) {
    return absl::DataLossError(
        absl::StrCat("a PostgreSQL row token is ", kEncodedBytes,
                     " bytes; this one is ", bytes.size()));
  }
  RowToken token;
  const int64_t time =
      static_cast<int64_t>(internal::LoadBigEndian64(bytes.data() + 1));
  token.origin.value = internal::LoadBigEndian16(bytes.data() + 9);
  switch (bytes[0]) {
    case kTagCommitTime:
      token.commit_time_us = time;
      break;
    case kTagNoCommitTime:
      if (time != 0) {
        return absl::DataLossError(
            "a PostgreSQL row token without a commit time carries one");
      }
      break;
    default:
      return absl::DataLossError(
          absl::StrCat("a PostgreSQL row token with unknown tag ",
                       static_cast<int>(static_cast<unsigned char>(bytes[0]))));
  }
  return token;
}

absl::StatusOr<RowToken> RowToken::FromBinary(Field timestamp, Field roident) {
  RowToken token;
  if (!timestamp.is_null()) {
    if (timestamp.bytes().size() != 8) {
      return absl::DataLossError(
          absl::StrCat("a binary timestamptz is 8 bytes; this one is ",
                       timestamp.bytes().size()));
    }
    token.commit_time_us = static_cast<int64_t>(
        internal::LoadBigEndian64(timestamp.bytes().data()));
  }
  if (!roident.is_null()) {
    if (roident.bytes().size() != 4) {
      return absl::DataLossError(absl::StrCat(
          "a binary oid is 4 bytes; this one is ", roident.bytes().size()));
    }
    const uint32_t id = internal::LoadBigEndian32(roident.bytes().data());
    if (id > 0xffff) {
      return absl::DataLossError(absl::StrCat(
          "replication origin id ", id, " is above PostgreSQL's 16-bit limit"));
    }
    token.origin.value = static_cast<uint16_t>(id);
  }
  return token;
}

std::string RowToken::DebugString() const {
  if (!commit_time_us) {
    return absl::StrCat("no commit time, origin ", origin.value);
  }
  const absl::Time t = absl::FromUnixSeconds(kPostgresEpochUnixSeconds) +
                       absl::Microseconds(*commit_time_us);
  return absl::StrCat(
      absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", t, absl::UTCTimeZone()),
      " origin ", origin.value);
}

}  // namespace pg
}  // namespace tally
