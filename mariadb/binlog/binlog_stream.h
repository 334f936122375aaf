// BinlogStream: a MariaDB binary log client — tally connects as a replica
// (Connector/C's replication API for the framing only) and reads the
// server's events from a GTID position, tracking the position to resume
// from after the last complete transaction.
//
//   BinlogStreamOptions options;
//   options.replica_server_id = 4242;      // unique per reader
//   options.start_gtid = "0-1-42";         // or "" for the current end
//   TALLY_ASSIGN_OR_RETURN(std::unique_ptr<BinlogStream> stream,
//                          BinlogStream::Open(target, options));
//   for (;;) {
//     TALLY_ASSIGN_OR_RETURN(BinlogEvent e, stream->Next(absl::Seconds(5)));
//     if (e.idle()) continue;               // nothing new for 5 s
//     if (IsRowsEvent(e.type)) {
//       TALLY_ASSIGN_OR_RETURN(RowsEvent rows,
//                              DecodeRowsEvent(e.type, e.body, *e.table_map));
//     }
//     ... stream->gtid_state() ...           // store to resume later
//   }
//
// What the stream relies on in the server and Connector/C 3.3:
// * The server sends GTID events only to a replica that declares it
//   understands them (@mariadb_slave_capability=4), event checksums only to
//   one that declares the algorithm, and heartbeats at the period it asks
//   for; a GTID start position is @slave_connect_state with an empty file
//   name.
// * At each binlog rotation Connector/C misreads the ROTATE event (the
//   bytes are intact: this stream parses them itself) and fails on the
//   artificial ROTATE that follows (error 5021); fetching again continues
//   with the next file. The stream recovers from that one error after a
//   ROTATE; any other error ends it.
// * Two readers with the same server_id cannot stream at once: the second
//   one's connection ends the first's.
//
// Thread-compatible: one thread at a time.
#ifndef TALLY_MARIADB_BINLOG_BINLOG_STREAM_H_
#define TALLY_MARIADB_BINLOG_BINLOG_STREAM_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "mariadb/binlog/row_events.h"
#include "mariadb/url.h"

struct st_mysql;
struct st_mariadb_rpl;
struct st_mariadb_rpl_event;

namespace tally {
namespace mariadb {
namespace binlog {

// A global transaction id: domain-server-sequence.
struct Gtid {
  uint32_t domain_id = 0;
  uint32_t server_id = 0;
  uint64_t sequence = 0;
  std::string ToString() const;  // "0-1-42"
};

// Parses a GTID position: GTIDs separated by commas ("0-1-42,1-2-7"), at
// most one per domain; "" is the empty position. kInvalidArgument
// otherwise.
absl::StatusOr<std::map<uint32_t, Gtid>> ParseGtidPosition(
    absl::string_view text);
// The position's text, by domain.
std::string GtidPositionText(const std::map<uint32_t, Gtid>& position);

// One event as the stream hands it out.
struct BinlogEvent {
  int type = 0;  // EventType (row_events.h); kHeartbeatEvent when idle
  // The common header.
  uint32_t timestamp = 0;  // seconds since the epoch
  uint32_t server_id = 0;  // the server (or session server_id) that wrote it
  uint16_t flags = 0;
  uint32_t log_position = 0;  // the end of this event in its binlog file
  std::string log_file;       // the binlog file being read (from ROTATE)
  // The event's bytes after the common header, without the checksum.
  std::string body;

  // GTID: the transaction that begins; its flags (bit 0: standalone, a
  // statement without COMMIT, as DDL is).
  std::optional<Gtid> gtid;
  uint8_t gtid_flags = 0;
  // XID: the commit's transaction number.
  uint64_t xid = 0;
  // QUERY: the statement and its default database; ANNOTATE_ROWS: the
  // statement that made the row events that follow.
  std::string statement;
  std::string database;
  // TABLE_MAP, and rows events: the table's map (the last TABLE_MAP of
  // that table id in this transaction); null when none was seen.
  std::shared_ptr<const TableMap> table_map;
  // ROTATE: the next file and the position in it.
  std::string rotate_file;
  uint64_t rotate_position = 0;

  // True for a heartbeat: the server had nothing to send.
  bool idle() const { return type == kHeartbeatEvent; }
};

struct BinlogStreamOptions {
  // The server_id this reader registers with; must differ from every
  // server's and every other reader's.
  uint32_t replica_server_id = 0;
  // Where to start: a GTID position (the transactions after it), or empty
  // for the server's current end (@@gtid_binlog_pos).
  std::string start_gtid;
  // How often an idle server sends a heartbeat.
  absl::Duration heartbeat_period = absl::Seconds(1);
  // The longest silence (no event, no heartbeat) before the server counts
  // as gone; also the connect timeout. Whole seconds, at least 1; must
  // exceed the heartbeat period.
  absl::Duration read_timeout = absl::Seconds(5);
};

class BinlogStream {
 public:
  // Connects and starts the binlog dump. Returns kOutOfRange (with the
  // server's message) when the server no longer holds the binlogs from the
  // start position on, or never held its GTID (error 1236);
  // kInvalidArgument for bad options or a malformed position; kUnavailable
  // for a server that cannot be reached; kPermissionDenied without the
  // REPLICATION SLAVE privilege.
  static absl::StatusOr<std::unique_ptr<BinlogStream>> Open(
      const MariaDbTarget& target, const BinlogStreamOptions& options);
  ~BinlogStream();
  BinlogStream(const BinlogStream&) = delete;
  BinlogStream& operator=(const BinlogStream&) = delete;

  // The next event. When only heartbeats arrive for `timeout`, returns an
  // idle event instead (so it returns within about `timeout` plus one
  // heartbeat period while the server lives). Returns kUnavailable when
  // the connection is lost or the server stays silent for the read
  // timeout; kOutOfRange for error 1236; kDataLoss for an event it cannot
  // frame. After an error the stream is unusable: open a new one at
  // gtid_state().
  absl::StatusOr<BinlogEvent> Next(absl::Duration timeout);

  // The position after the last complete transaction read (per domain),
  // as text for Open: the start position advanced by every transaction's
  // end (XID, COMMIT, or a standalone statement).
  std::string gtid_state() const { return GtidPositionText(state_); }
  // The start position actually used (resolved when it was empty).
  const std::string& start_gtid() const { return start_gtid_; }
  // How many times Connector/C's error after a rotation was recovered from.
  int recovered_rotations() const { return recovered_rotations_; }

 private:
  BinlogStream() = default;
  // Fetches one event from Connector/C, recovering from the error after a
  // rotation; converts it.
  absl::StatusOr<BinlogEvent> Fetch();
  absl::Status Error(absl::string_view what) const;
  absl::StatusOr<BinlogEvent> Convert(const st_mariadb_rpl_event& raw);
  void Track(const BinlogEvent& event);

  st_mysql* mysql_ = nullptr;
  st_mariadb_rpl* rpl_ = nullptr;
  st_mariadb_rpl_event* event_ = nullptr;  // the last one fetched
  std::string display_;
  std::string start_gtid_;
  std::string log_file_;
  // The first events, fetched by Open to surface a bad start position.
  std::deque<BinlogEvent> pending_;
  // True right after a ROTATE: the one fetch error to recover from.
  bool after_rotate_ = false;
  int recovered_rotations_ = 0;
  absl::flat_hash_map<uint64_t, std::shared_ptr<const TableMap>> maps_;
  std::map<uint32_t, Gtid> state_;
  // The open transaction's GTID, and whether it ends with its statement.
  std::optional<Gtid> open_;
  bool open_standalone_ = false;
};

}  // namespace binlog
}  // namespace mariadb
}  // namespace tally

#endif  // TALLY_MARIADB_BINLOG_BINLOG_STREAM_H_
