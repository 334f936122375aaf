// The CopyData messages of PostgreSQL's streaming replication protocol, as a
// logical replication client sees them after START_REPLICATION: the server
// sends XLogData ('w', one decoded message each) and primary keepalives
// ('k'); the client sends standby status updates ('r') to confirm what it
// has durably stored.
//
//   TALLY_ASSIGN_OR_RETURN(ReplicationMessage m,
//                          ParseReplicationMessage(copy_data));
//   const auto* keepalive = std::get_if<PrimaryKeepalive>(&m);
//   if (keepalive != nullptr && keepalive->reply_requested) {
//     StandbyStatusUpdate status;
//     status.written_lsn = status.flushed_lsn = status.applied_lsn = stored;
//     Send(EncodeStandbyStatusUpdate(status));
//   }
//
// Every integer is big-endian; LSNs are 64-bit WAL positions; times are
// PostgreSQL timestamps (µs since 2000-01-01 UTC).
//
// Errors: the bytes come from another process. A truncated message, bytes
// after its end or an unknown type byte give kDataLoss naming what.
//
// Thread-safe: pure functions.
#ifndef TALLY_PG_WIRE_REPLICATION_MESSAGES_H_
#define TALLY_PG_WIRE_REPLICATION_MESSAGES_H_

#include <cstdint>
#include <string>
#include <variant>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tally {
namespace pg {

// PostgreSQL's epoch, 2000-01-01 00:00:00 UTC, in seconds after the Unix
// epoch.
inline constexpr int64_t kPgEpochUnixSeconds = 946684800;

// A PostgreSQL timestamp (µs since 2000-01-01 UTC) as an absl::Time, and
// back (rounded down to the microsecond).
absl::Time FromPgTimestamp(int64_t pg_micros);
int64_t ToPgTimestamp(absl::Time time);

// 'w': WAL data. For a logical slot, `payload` is one output plugin message
// (pgoutput: see pgoutput.h); it is a view into the parsed CopyData.
struct XLogData {
  uint64_t wal_start = 0;  // where the payload's WAL starts (0 for some)
  uint64_t wal_end = 0;    // the server's current end of WAL
  int64_t send_time_us = 0;
  absl::string_view payload;
};

// 'k': the server is alive; `wal_end` is its current end of WAL. When
// `reply_requested`, the client must answer with a status update at once or
// be disconnected after wal_sender_timeout.
struct PrimaryKeepalive {
  uint64_t wal_end = 0;
  int64_t send_time_us = 0;
  bool reply_requested = false;
};

using ReplicationMessage = std::variant<XLogData, PrimaryKeepalive>;

// Parses the contents of one CopyData message from the server.
// Returns kDataLoss for an empty, truncated or over-long message, an
// unknown type byte, or a reply flag other than 0 or 1.
absl::StatusOr<ReplicationMessage> ParseReplicationMessage(
    absl::string_view copy_data);

// 'r': what the client has received (written), durably stored (flushed)
// and applied. For a logical slot the server moves the slot's
// confirmed_flush_lsn to `flushed_lsn`: WAL before it may be recycled and
// transactions that end at or before it are never sent again.
struct StandbyStatusUpdate {
  uint64_t written_lsn = 0;
  uint64_t flushed_lsn = 0;
  uint64_t applied_lsn = 0;
  int64_t client_time_us = 0;
  // Asks the server for a keepalive at once (to measure the round trip).
  bool reply_requested = false;
};

// The CopyData contents to send for `update` (34 bytes).
std::string EncodeStandbyStatusUpdate(const StandbyStatusUpdate& update);

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_WIRE_REPLICATION_MESSAGES_H_
