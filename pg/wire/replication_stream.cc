#include "pg/wire/replication_stream.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "tree/status_macros.h"

namespace tally {
namespace pg {
namespace {

absl::Status CheckSlotName(absl::string_view name) {
  if (name.empty() || name.size() > 63) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "replication slot name '%s' is %d characters; PostgreSQL allows 1 to "
        "63",
        name, name.size()));
  }
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
      return absl::InvalidArgumentError(
          absl::StrCat("replication slot name '", name,
                       "' may hold only lower-case letters, digits and '_'"));
    }
  }
  return absl::OkStatus();
}

// `text` as a single-quoted string of the replication command grammar,
// which has no backslash escapes: a quote is doubled.
std::string QuoteReplicationLiteral(absl::string_view text) {
  return absl::StrCat("'", absl::StrReplaceAll(text, {{"'", "''"}}), "'");
}

// A position the server printed; a bad one means the server (or what
// answers as one) is broken.
absl::StatusOr<Lsn> ParseServerLsn(absl::string_view text,
                                   absl::string_view what) {
  absl::StatusOr<Lsn> lsn = ParseLsn(text);
  if (!lsn.ok()) {
    return absl::DataLossError(
        absl::StrCat(what, ": the server's answer: ", lsn.status().message()));
  }
  return lsn;
}

absl::Status CheckShape(const Result& r, int columns, absl::string_view what) {
  if (r.rows() == 1 && r.columns() >= columns) return absl::OkStatus();
  return absl::DataLossError(
      absl::StrFormat("%s answered %d rows of %d columns; expected 1 row of "
                      "at least %d",
                      what, r.rows(), r.columns(), columns));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ReplicationStream>> ReplicationStream::Connect(
    absl::string_view conninfo, ConnectOptions options) {
  options.replication = "database";
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<Connection> connection,
                         Connection::Open(conninfo, options));
  return std::unique_ptr<ReplicationStream>(
      new ReplicationStream(std::move(connection)));
}

ReplicationStream::ReplicationStream(std::unique_ptr<Connection> connection)
    : connection_(std::move(connection)) {}

ReplicationStream::~ReplicationStream() { ReleaseBuffer(); }

void ReplicationStream::ReleaseBuffer() {
  if (buffer_ != nullptr) PQfreemem(buffer_);
  buffer_ = nullptr;
}

absl::Status ReplicationStream::RequireIdle(absl::string_view what) const {
  if (!streaming_) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(what,
                   ": the connection is streaming; replication commands are "
                   "refused until the stream ends"));
}

absl::Status ReplicationStream::RequireStreaming(absl::string_view what) const {
  if (streaming_) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(what,
                   ": the connection is not streaming (call "
                   "StartReplication first, or the stream ended)"));
}

absl::StatusOr<SystemIdentity> ReplicationStream::IdentifySystem() {
  constexpr absl::string_view kWhat = "IDENTIFY_SYSTEM";
  TALLY_RETURN_IF_ERROR(RequireIdle(kWhat));
  TALLY_ASSIGN_OR_RETURN(Result r, connection_->Exec("IDENTIFY_SYSTEM"));
  TALLY_RETURN_IF_ERROR(CheckShape(r, 4, kWhat));
  SystemIdentity id;
  id.system_id = std::string(r.Value(0, 0));
  if (!absl::SimpleAtoi(r.Value(0, 1), &id.timeline)) {
    return absl::DataLossError(
        absl::StrCat("IDENTIFY_SYSTEM: timeline '", r.Value(0, 1), "'"));
  }
  TALLY_ASSIGN_OR_RETURN(id.xlog_position,
                         ParseServerLsn(r.Value(0, 2), "IDENTIFY_SYSTEM"));
  id.database = std::string(r.Value(0, 3));
  return id;
}

absl::StatusOr<CreatedSlot> ReplicationStream::CreateLogicalSlot(
    absl::string_view name) {
  constexpr absl::string_view kWhat = "CREATE_REPLICATION_SLOT";
  TALLY_RETURN_IF_ERROR(RequireIdle(kWhat));
  TALLY_RETURN_IF_ERROR(CheckSlotName(name));
  // The name needs no quoting: CheckSlotName allows identifier characters
  // only.
  TALLY_ASSIGN_OR_RETURN(
      Result r,
      connection_->Exec(absl::StrCat("CREATE_REPLICATION_SLOT ", name,
                                     " LOGICAL pgoutput (SNAPSHOT 'export')")));
  TALLY_RETURN_IF_ERROR(CheckShape(r, 3, kWhat));
  CreatedSlot slot;
  slot.name = std::string(r.Value(0, 0));
  TALLY_ASSIGN_OR_RETURN(
      slot.consistent_point,
      ParseServerLsn(r.Value(0, 1),
                     "CREATE_REPLICATION_SLOT consistent point"));
  if (r.IsNull(0, 2)) {
    return absl::DataLossError(
        "CREATE_REPLICATION_SLOT exported no snapshot although asked to");
  }
  slot.snapshot_name = std::string(r.Value(0, 2));
  return slot;
}

absl::Status ReplicationStream::DropSlot(absl::string_view name) {
  constexpr absl::string_view kWhat = "DROP_REPLICATION_SLOT";
  TALLY_RETURN_IF_ERROR(RequireIdle(kWhat));
  TALLY_RETURN_IF_ERROR(CheckSlotName(name));
  return connection_
      ->Exec(absl::StrCat("DROP_REPLICATION_SLOT ", name, " WAIT"))
      .status();
}

absl::Status ReplicationStream::StartReplication(
    absl::string_view slot, Lsn start_lsn,
    const std::vector<std::string>& publications) {
  constexpr absl::string_view kWhat = "START_REPLICATION";
  TALLY_RETURN_IF_ERROR(RequireIdle(kWhat));
  TALLY_RETURN_IF_ERROR(CheckSlotName(slot));
  if (publications.empty()) {
    return absl::InvalidArgumentError(
        "START_REPLICATION needs at least one publication");
  }
  // pgoutput reads publication_names as a comma-separated list of SQL
  // identifiers, inside one string literal.
  std::vector<std::string> quoted;
  quoted.reserve(publications.size());
  for (const std::string& p : publications) {
    quoted.push_back(connection_->QuoteIdentifier(p));
  }
  const std::string command = absl::StrCat(
      "START_REPLICATION SLOT ", slot, " LOGICAL ", FormatLsn(start_lsn),
      " (proto_version '1', publication_names ",
      QuoteReplicationLiteral(absl::StrJoin(quoted, ",")),
      ", binary 'true', messages 'true')");
  TALLY_ASSIGN_OR_RETURN(Result r, connection_->Exec(command));
  if (r.status() != PGRES_COPY_BOTH) {
    return absl::InternalError(absl::StrCat(
        "START_REPLICATION ", slot, ": the server answered ",
        PQresStatus(r.status()), " instead of starting a CopyBoth stream"));
  }
  streaming_ = true;
  return absl::OkStatus();
}

absl::Status ReplicationStream::EndOfStream(absl::string_view context) {
  streaming_ = false;
  PGconn* conn = connection_->raw();
  // Answer the server's CopyDone so that it sends its final result (does
  // nothing when the server ended with an error instead).
  if (PQstatus(conn) == CONNECTION_OK) PQputCopyEnd(conn, nullptr);
  absl::Status status = absl::UnavailableError(
      absl::StrCat(context, ": the server ended the replication stream"));
  bool explained = false;
  const absl::Time deadline = absl::Now() + connection_->query_timeout();
  // PQgetResult blocks while libpq is busy: wait for the socket first so a
  // server that stops answering cannot hold us past the deadline.
  while (PQisBusy(conn) && PQstatus(conn) == CONNECTION_OK) {
    if (!connection_->WaitSocket(true, false, deadline).ok() ||
        PQconsumeInput(conn) == 0) {
      break;
    }
  }
  while (!PQisBusy(conn)) {
    Result r(PQgetResult(conn));
    if (r.get() == nullptr) break;
    const ExecStatusType s = r.status();
    if (s == PGRES_COPY_IN || s == PGRES_COPY_OUT || s == PGRES_COPY_BOTH) {
      break;  // libpq still in a copy state; never spin on it
    }
    if (!explained && s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) {
      status = StatusFromResult(conn, r.get(), context);
      explained = true;
    }
  }
  if (PQstatus(conn) == CONNECTION_BAD) {
    // A server going away is retryable, whatever its last words' SQLSTATE.
    status = absl::UnavailableError(
        explained ? std::string(status.message())
                  : absl::StrCat(context, ": the connection broke: ",
                                 connection_->LastError()));
  }
  return status;
}

absl::StatusOr<std::optional<ReplicationMessage>> ReplicationStream::Next(
    absl::Duration timeout) {
  constexpr absl::string_view kWhat = "replication stream";
  TALLY_RETURN_IF_ERROR(RequireStreaming(kWhat));
  PGconn* conn = connection_->raw();
  ReleaseBuffer();
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    char* buffer = nullptr;
    const int n = PQgetCopyData(conn, &buffer, /*async=*/1);
    if (n > 0) {
      buffer_ = buffer;
      TALLY_ASSIGN_OR_RETURN(ReplicationMessage m,
                             ParseReplicationMessage(absl::string_view(
                                 buffer, static_cast<size_t>(n))));
      return std::optional<ReplicationMessage>(std::move(m));
    }
    if (n == -1) return EndOfStream(kWhat);
    if (n < -1) {
      streaming_ = false;
      return absl::UnavailableError(
          absl::StrCat(kWhat, ": reading failed: ", connection_->LastError()));
    }
    // No complete message buffered: wait for the socket until the deadline,
    // then let libpq read what arrived.
    const absl::Status waited =
        connection_->WaitSocket(/*read=*/true, /*write=*/false, deadline);
    if (absl::IsDeadlineExceeded(waited)) {
      return std::optional<ReplicationMessage>();
    }
    if (!waited.ok()) {
      streaming_ = false;
      return waited;
    }
    if (PQconsumeInput(conn) == 0) {
      streaming_ = false;
      return absl::UnavailableError(absl::StrCat(
          kWhat, ": the connection broke: ", connection_->LastError()));
    }
  }
}

absl::Status ReplicationStream::SendStatus(Lsn flushed_lsn,
                                           bool reply_requested) {
  constexpr absl::string_view kWhat = "standby status update";
  TALLY_RETURN_IF_ERROR(RequireStreaming(kWhat));
  StandbyStatusUpdate update;
  update.written_lsn = flushed_lsn;
  update.flushed_lsn = flushed_lsn;
  update.applied_lsn = flushed_lsn;
  update.client_time_us = ToPgTimestamp(absl::Now());
  update.reply_requested = reply_requested;
  const std::string bytes = EncodeStandbyStatusUpdate(update);
  PGconn* conn = connection_->raw();
  if (PQputCopyData(conn, bytes.data(), static_cast<int>(bytes.size())) != 1 ||
      PQflush(conn) != 0) {
    streaming_ = false;
    return absl::UnavailableError(
        absl::StrCat(kWhat, ": sending failed: ", connection_->LastError()));
  }
  return absl::OkStatus();
}

}  // namespace pg
}  // namespace tally
