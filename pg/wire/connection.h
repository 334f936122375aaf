// Connection: one libpq connection to a PostgreSQL server, RAII-wrapped,
// with every failure returned as an absl::Status.
//
// tally uses libpq's C API directly (libpqxx cannot run the streaming
// replication protocol, and throws). This file is the only place that turns
// libpq's results and errors into tally's conventions:
//
//   absl::StatusOr<std::unique_ptr<Connection>> c =
//       Connection::Open("postgresql://tally@127.0.0.1:5432/app", {});
//   absl::StatusOr<Result> r = (*c)->Exec("SELECT 1");
//   (*r).Value(0, 0) == "1"
//
// Errors. A server error becomes a Status whose code follows the SQLSTATE's
// class (StatusFromSqlState) and whose message names what was being done,
// the server's message, its detail and hint, and the SQLSTATE. A connection
// that cannot be made is kUnavailable (kUnauthenticated for a rejected
// password, kNotFound for a missing database or role, kInvalidArgument for
// a connection string libpq cannot parse); a connection lost
// mid-query is kUnavailable. Every wait on the server is bounded: a query
// that runs past `ConnectOptions::query_timeout` is cancelled and returns
// kDeadlineExceeded, so a stalled or dead database never blocks a caller
// forever.
//
// Thread-compatible: one thread at a time per Connection (libpq's rule).
#ifndef TALLY_PG_WIRE_CONNECTION_H_
#define TALLY_PG_WIRE_CONNECTION_H_

#include <libpq-fe.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace tally {
namespace pg {

// The Status code for a SQLSTATE (five characters; "" when the server sent
// none): 08 connection → kUnavailable; 28 authorization → kUnauthenticated;
// 42501 insufficient privilege → kPermissionDenied; 42P01/42704/42883/3D000
// undefined objects → kNotFound; other 42 syntax/access rule errors →
// kInvalidArgument; 23505 unique violation, 42710/42P07 duplicates, 42710 →
// kAlreadyExists; other 23 → kFailedPrecondition; 53 insufficient
// resources and 54 limits → kResourceExhausted; 55 object not in
// prerequisite state (also 55006 object in use: a slot or origin another
// session holds, briefly even after it closed — callers that wait for it
// retry on this code) → kFailedPrecondition; 57014 query canceled →
// kCancelled; 57P0x shutdown / cannot connect now → kUnavailable; 40
// transaction rollback (serialization, deadlock) → kAborted; 22 data
// exception → kInvalidArgument; 0A feature not supported →
// kUnimplemented; anything else kUnknown.
absl::StatusCode StatusCodeForSqlState(absl::string_view sqlstate);

// Owns one PGresult. Move-only.
class Result {
 public:
  Result() = default;
  explicit Result(PGresult* result) : result_(result) {}
  Result(Result&& other) noexcept : result_(other.release()) {}
  Result& operator=(Result&& other) noexcept;
  ~Result();

  int rows() const { return result_ ? PQntuples(result_) : 0; }
  int columns() const { return result_ ? PQnfields(result_) : 0; }
  bool IsNull(int row, int column) const {
    return PQgetisnull(result_, row, column) != 0;
  }
  // The field's bytes: text, or the binary send() form when the query
  // asked for binary results. Valid while the Result lives.
  absl::string_view Value(int row, int column) const {
    return absl::string_view(PQgetvalue(result_, row, column),
                             PQgetlength(result_, row, column));
  }
  std::optional<absl::string_view> NullableValue(int row, int column) const {
    if (IsNull(row, column)) return std::nullopt;
    return Value(row, column);
  }
  // The column's index by name, or -1.
  int ColumnIndex(const char* name) const { return PQfnumber(result_, name); }
  // Rows a command changed (INSERT/UPDATE/DELETE/COPY...), 0 if none.
  uint64_t AffectedRows() const;
  ExecStatusType status() const { return PQresultStatus(result_); }

  PGresult* get() const { return result_; }
  PGresult* release() {
    PGresult* r = result_;
    result_ = nullptr;
    return r;
  }

 private:
  PGresult* result_ = nullptr;
};

// One query parameter. Unset `value` sends NULL. Binary parameters are the
// type's send() bytes and must name their type (`type_oid`); text
// parameters may leave it 0 (the server infers it).
struct Param {
  std::optional<std::string> value;
  bool binary = false;
  Oid type_oid = 0;

  static Param Text(std::string text) { return Param{std::move(text)}; }
  static Param Null() { return Param{}; }
  static Param Binary(std::string bytes, Oid type) {
    return Param{std::move(bytes), true, type};
  }
};

struct ConnectOptions {
  // How long to wait for the server to accept the connection.
  absl::Duration connect_timeout = absl::Seconds(10);
  // How long one query (or one wait on a COPY) may take before it is
  // cancelled. Infinite for none.
  absl::Duration query_timeout = absl::Minutes(5);
  // "database" opens a logical replication connection (START_REPLICATION
  // and friends); empty for an ordinary one.
  std::string replication;
  // Shown in pg_stat_activity.application_name.
  std::string application_name = "tally";
};

class Connection {
 public:
  // Connects with `conninfo`, a libpq connection string or URL
  // ("postgresql://user:pw@host:port/db?sslmode=..." or "host=... dbname=...").
  // The options add to it (and override the same keys in it); the session
  // uses client_encoding UTF8 and TCP keepalives (a database host that
  // vanishes is noticed within ~25 s even by a connection that only waits).
  // tally reads rows in binary, so no other session setting changes what it
  // reads.
  static absl::StatusOr<std::unique_ptr<Connection>> Open(
      absl::string_view conninfo, const ConnectOptions& options);

  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs one or more SQL commands (the simple query protocol) and returns
  // the last one's result. The only entry point for replication commands
  // (IDENTIFY_SYSTEM, CREATE_REPLICATION_SLOT, ...) on a replication
  // connection. A COPY result (PGRES_COPY_OUT/IN/BOTH) is returned as OK:
  // the caller then drives the copy.
  absl::StatusOr<Result> Exec(absl::string_view sql);

  // Runs one command with parameters ($1, $2, ...) through the extended
  // protocol; `binary_results` asks for every column in binary.
  absl::StatusOr<Result> ExecParams(absl::string_view sql,
                                    absl::Span<const Param> params,
                                    bool binary_results = false);

  // As ExecParams, through a statement this connection prepares on its
  // first use of `sql` (the same text later runs the prepared statement;
  // `params` must then have the same types): the server parses and plans
  // it once, not at every call — for the statements tally runs over and
  // over (reads of rows by key, the apply's merge), planning cost more
  // than running them. PostgreSQL re-plans a prepared statement by itself
  // when a table it uses changes. A statement whose result shape a DDL
  // changed ("cached plan must not change result type") fails once and is
  // prepared anew at the next call. At most kMaxPrepared statements are
  // kept; preparing one more first deallocates them all.
  absl::StatusOr<Result> ExecPrepared(absl::string_view sql,
                                      absl::Span<const Param> params,
                                      bool binary_results = false);
  static constexpr size_t kMaxPrepared = 128;

  // Runs `COPY ... TO STDOUT ...` and hands each chunk of the copy data
  // (one row per chunk for libpq) to `consume`, in order; an error from
  // `consume` stops the copy (the query is cancelled) and is returned.
  absl::Status CopyOut(
      absl::string_view sql,
      absl::FunctionRef<absl::Status(absl::string_view chunk)> consume);

  // Runs `COPY ... FROM STDIN ...`, sending `data` (the whole copy
  // stream, e.g. binary COPY format) and ending the copy. Returns the rows
  // the server loaded.
  absl::StatusOr<uint64_t> CopyIn(absl::string_view sql,
                                  absl::string_view data);

  // Quoting for SQL text built by tally (identifiers of configured tables).
  std::string QuoteIdentifier(absl::string_view name) const;
  std::string QuoteLiteral(absl::string_view text) const;

  // The server's version as PQserverVersion gives it (150018 for 15.18).
  int server_version() const { return PQserverVersion(conn_); }
  // False once the connection is broken (the caller should open another).
  bool healthy() const { return PQstatus(conn_) == CONNECTION_OK; }
  // The bound on one query's waits.
  absl::Duration query_timeout() const { return options_.query_timeout; }

  // For code that drives libpq itself (the replication stream's CopyBoth):
  // the raw connection, and a wait until its socket is readable (and/or
  // writable) or `deadline` passes; kDeadlineExceeded then, kUnavailable if
  // the socket failed.
  PGconn* raw() const { return conn_; }
  absl::Status WaitSocket(bool read, bool write, absl::Time deadline) const;

  // The connection's last error message, trimmed.
  std::string LastError() const;

 private:
  Connection(PGconn* conn, ConnectOptions options)
      : conn_(conn), options_(std::move(options)) {}

  // Waits for and collects every result of the query just sent; returns
  // the last, or the first error. Cancels the query at the deadline.
  absl::StatusOr<Result> CollectResults(absl::string_view what);
  // Sends a cancel request for the running query (best effort).
  void Cancel() const;
  // Reads and drops the rest of a COPY OUT (after a cancel), until it ends
  // or `deadline`.
  void DrainCopyOut(absl::Time deadline);

  PGconn* conn_;
  const ConnectOptions options_;
  // ExecPrepared's statements: SQL text -> the server-side name.
  absl::flat_hash_map<std::string, std::string> prepared_;
  // Names for the next prepared statements (tally_p1, tally_p2, ...).
  uint64_t next_prepared_ = 0;
};

// The Status for a failed PGresult (or a null one: the connection's error),
// prefixed with `what` ("reading table public.t: ...").
absl::Status StatusFromResult(const PGconn* conn, const PGresult* result,
                              absl::string_view what);

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_WIRE_CONNECTION_H_
