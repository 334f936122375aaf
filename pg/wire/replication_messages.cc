#include "pg/wire/replication_messages.h"

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "pg/wire/internal/big_endian.h"

namespace tally {
namespace pg {
namespace {

using internal::BigEndianReader;

constexpr size_t kXLogDataHeaderBytes = 8 + 8 + 8;
constexpr size_t kKeepaliveBytes = 8 + 8 + 1;

}  // namespace

absl::Time FromPgTimestamp(int64_t pg_micros) {
  return absl::FromUnixSeconds(kPgEpochUnixSeconds) +
         absl::Microseconds(pg_micros);
}

int64_t ToPgTimestamp(absl::Time time) {
  return absl::ToInt64Microseconds(time -
                                   absl::FromUnixSeconds(kPgEpochUnixSeconds));
}

absl::StatusOr<ReplicationMessage> ParseReplicationMessage(
    absl::string_view copy_data) {
  if (copy_data.empty()) {
    return absl::DataLossError("replication CopyData message is empty");
  }
  BigEndianReader in(copy_data.substr(1));
  switch (copy_data[0]) {
    case 'w': {
      XLogData m;
      if (in.remaining() < kXLogDataHeaderBytes) {
        return absl::DataLossError(
            absl::StrFormat("XLogData message truncated: %d header bytes of %d",
                            in.remaining(), kXLogDataHeaderBytes));
      }
      in.ReadU64(&m.wal_start);
      in.ReadU64(&m.wal_end);
      in.ReadI64(&m.send_time_us);
      in.ReadBytes(in.remaining(), &m.payload);
      return m;
    }
    case 'k': {
      PrimaryKeepalive m;
      if (in.remaining() != kKeepaliveBytes) {
        return absl::DataLossError(
            absl::StrFormat("primary keepalive message is %d bytes after its "
                            "type; expected %d",
                            in.remaining(), kKeepaliveBytes));
      }
      uint8_t reply = 0;
      in.ReadU64(&m.wal_end);
      in.ReadI64(&m.send_time_us);
      in.ReadU8(&reply);
      if (reply > 1) {
        return absl::DataLossError(absl::StrFormat(
            "primary keepalive: reply flag is %d; expected 0 or 1", reply));
      }
      m.reply_requested = reply == 1;
      return m;
    }
    default:
      return absl::DataLossError(absl::StrFormat(
          "unknown replication message type 0x%02x (expected 'w' XLogData "
          "or 'k' keepalive; %d bytes)",
          static_cast<uint8_t>(copy_data[0]), copy_data.size()));
  }
}

std::string EncodeStandbyStatusUpdate(const StandbyStatusUpdate& update) {
  std::string out;
  out.reserve(1 + 8 * 4 + 1);
  internal::PutBigEndian8(&out, 'r');
  internal::PutBigEndian64(&out, update.written_lsn);
  internal::PutBigEndian64(&out, update.flushed_lsn);
  internal::PutBigEndian64(&out, update.applied_lsn);
  internal::PutBigEndian64(&out, static_cast<uint64_t>(update.client_time_us));
  internal::PutBigEndian8(&out, update.reply_requested ? 1 : 0);
  return out;
}

}  // namespace pg
}  // namespace tally
