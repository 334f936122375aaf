// A PostgreSQL logical replication connection (libpq, `replication=database`)
// speaking the streaming replication protocol: identify the server, create
// and drop logical slots, and stream pgoutput changes from a slot while
// confirming what has been stored.
//
//   TALLY_ASSIGN_OR_RETURN(std::unique_ptr<ReplicationStream> stream,
//                          ReplicationStream::Connect(conninfo));
//   TALLY_ASSIGN_OR_RETURN(SystemIdentity id, stream->IdentifySystem());
//   TALLY_RETURN_IF_ERROR(stream->StartReplication("tally_db3", stored_lsn,
//                                                  {"tally_db3"}));
//   while (!stopping) {
//     TALLY_ASSIGN_OR_RETURN(std::optional<ReplicationMessage> m,
//                            stream->Next(absl::Seconds(1)));
//     if (!m) continue;  // nothing within the timeout: check `stopping`
//     ...  // XLogData: ParsePgOutputMessage(payload); store; then
//     TALLY_RETURN_IF_ERROR(stream->SendStatus(stored_end_lsn, false));
//   }
//
// The connection is in one of two modes. Before StartReplication it runs
// replication commands (IdentifySystem, CreateLogicalSlot, DropSlot). After
// a successful StartReplication it is streaming: only Next and SendStatus
// may be called, until the stream ends (an error from Next); commands are
// then refused with kFailedPrecondition.
//
// Errors carry the server's message and SQLSTATE, with the codes of
// pg/wire/connection.h (StatusCodeForSqlState): kUnavailable when the server
// cannot be reached or the connection broke (retrying may help),
// kUnauthenticated / kPermissionDenied for a refused login or a missing
// privilege, kAlreadyExists / kNotFound for a slot that exists / does not,
// kResourceExhausted when the server is out of slots or WAL senders,
// kFailedPrecondition when its state forbids the request (wal_level below
// logical; a slot active for another connection, which PostgreSQL also
// reports for a moment after our own previous connection closed: retry),
// kInvalidArgument for a bad name, kDataLoss for a malformed message.
//
// Thread-compatible: one thread uses a stream at a time (a libpq connection
// is not thread-safe).
#ifndef TALLY_PG_WIRE_REPLICATION_STREAM_H_
#define TALLY_PG_WIRE_REPLICATION_STREAM_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "pg/wire/connection.h"
#include "pg/wire/lsn.h"
#include "pg/wire/replication_messages.h"

namespace tally {
namespace pg {

// IDENTIFY_SYSTEM's answer. A different `system_id` than the one tally
// stored means another cluster (for instance a promoted standby or a
// restored backup): its slots and positions are not ours.
struct SystemIdentity {
  std::string system_id;  // decimal, as the server prints it
  uint32_t timeline = 0;
  Lsn xlog_position = kInvalidLsn;  // the current WAL flush position
  std::string database;             // the database this connection is bound to
};

// CREATE_REPLICATION_SLOT's answer.
struct CreatedSlot {
  std::string name;
  // Changes committed after this LSN are streamed from the slot; everything
  // before it is in the snapshot.
  Lsn consistent_point = kInvalidLsn;
  // The exported snapshot, for `SET TRANSACTION SNAPSHOT '<name>'` in a
  // REPEATABLE READ transaction on another connection.
  std::string snapshot_name;
};

class ReplicationStream {
 public:
  // Connects with `conninfo` (a libpq keyword/value string or URL) and
  // `options`, as a logical replication connection (`options.replication`
  // is set to "database"), bound to the database the conninfo names.
  // `options.query_timeout` bounds each replication command.
  // Returns Connection::Open's errors (kUnavailable when the server cannot
  // be reached, kUnauthenticated for a refused login, ...).
  static absl::StatusOr<std::unique_ptr<ReplicationStream>> Connect(
      absl::string_view conninfo, ConnectOptions options = {});

  ReplicationStream(const ReplicationStream&) = delete;
  ReplicationStream& operator=(const ReplicationStream&) = delete;
  ~ReplicationStream();

  // IDENTIFY_SYSTEM. REQUIRES: not streaming.
  absl::StatusOr<SystemIdentity> IdentifySystem();

  // CREATE_REPLICATION_SLOT name LOGICAL pgoutput (SNAPSHOT 'export').
  // The exported snapshot stays importable only while this connection stays
  // idle: the next command on it (or closing it) ends the snapshot. So a
  // bootstrap imports the snapshot on its reader connections, reads, and
  // only then calls StartReplication here.
  // `name`: 1 to 63 characters of [a-z0-9_] (PostgreSQL's rule for slot
  // names); otherwise kInvalidArgument. kAlreadyExists when the slot exists.
  // REQUIRES: not streaming.
  absl::StatusOr<CreatedSlot> CreateLogicalSlot(absl::string_view name);

  // DROP_REPLICATION_SLOT name WAIT (waits while another connection uses
  // the slot). kNotFound when there is no such slot. REQUIRES: not streaming.
  absl::Status DropSlot(absl::string_view name);

  // START_REPLICATION SLOT slot LOGICAL start_lsn with pgoutput protocol 1,
  // binary values and logical decoding messages, for `publications`.
  // The server streams transactions that end after
  // max(start_lsn, the slot's confirmed_flush_lsn): a stream can never go
  // back before what was confirmed. Returns once the server has entered
  // streaming mode (or refused: kNotFound for an unknown slot, kInternal or
  // kFailedPrecondition with the server's message otherwise; an unknown
  // publication is reported by the first Next, when the server decodes).
  // REQUIRES: not streaming; `publications` not empty.
  absl::Status StartReplication(absl::string_view slot, Lsn start_lsn,
                                const std::vector<std::string>& publications);

  // The next message from the server, or nullopt when none arrived within
  // `timeout` (so a caller can check for shutdown and send status updates:
  // the server disconnects a client that stays silent for
  // wal_sender_timeout, 60 s by default). Never blocks longer than
  // `timeout` waiting for the server. XLogData's payload is a view into this
  // stream's buffer, valid until the next call to Next.
  // Returns kUnavailable when the connection broke or the server ended the
  // stream, the server's error when it ended the stream with one (an
  // unknown publication, a slot invalidated meanwhile), kDataLoss for a
  // malformed message. After an error the stream is no longer streaming;
  // open a new one to resume.
  // REQUIRES: streaming.
  absl::StatusOr<std::optional<ReplicationMessage>> Next(
      absl::Duration timeout);

  // Sends a standby status update: written = flushed = applied =
  // `flushed_lsn`, the client time now. Never call it with a position
  // whose changes are not durably stored: it is the slot's promise. The server
  // then may recycle WAL before `flushed_lsn` and never resends transactions
  // ending at or before it. `reply_requested` asks for an immediate keepalive.
  // Returns kUnavailable when the connection broke. REQUIRES: streaming.
  absl::Status SendStatus(Lsn flushed_lsn, bool reply_requested);

  // True between a successful StartReplication and the end of the stream.
  bool streaming() const { return streaming_; }

 private:
  explicit ReplicationStream(std::unique_ptr<Connection> connection);

  absl::Status RequireIdle(absl::string_view what) const;
  absl::Status RequireStreaming(absl::string_view what) const;
  // Ends streaming mode and returns the status that explains why: the
  // server's error, or kUnavailable "the server ended the stream".
  absl::Status EndOfStream(absl::string_view context);

  // Frees the last CopyData message (which XLogData's payload views).
  void ReleaseBuffer();

  const std::unique_ptr<Connection> connection_;
  char* buffer_ = nullptr;  // from PQgetCopyData; PQfreemem'd
  bool streaming_ = false;
};

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_WIRE_REPLICATION_STREAM_H_
