#include "pg/wire/connection.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace tally {
namespace pg {
namespace {

std::string Trimmed(const char* text) {
  if (text == nullptr) return "";
  return std::string(absl::StripAsciiWhitespace(text));
}

// Where a connection points, for messages (never the password).
std::string Describe(const PGconn* conn) {
  const char* host = PQhost(conn);
  const char* port = PQport(conn);
  const char* db = PQdb(conn);
  return absl::StrCat("postgresql ", host ? host : "?", ":", port ? port : "?",
                      "/", db ? db : "?");
}

absl::StatusCode CodeForConnectFailure(absl::string_view message) {
  // A connection string libpq cannot parse: retrying cannot help.
  if (absl::StrContains(message, "invalid connection option") ||
      absl::StrContains(message, "invalid URI") ||
      absl::StrContains(message, "missing \"=\" after") ||
      absl::StrContains(message, "unterminated quoted string") ||
      absl::StrContains(message, "invalid integer value") ||
      absl::StrContains(message, "invalid port number")) {
    return absl::StatusCode::kInvalidArgument;
  }
  if (absl::StrContains(message, "password authentication failed") ||
      absl::StrContains(message, "no password supplied") ||
      absl::StrContains(message, "authentication failed")) {
    return absl::StatusCode::kUnauthenticated;
  }
  if (absl::StrContains(message, "no pg_hba.conf entry") ||
      absl::StrContains(message, "permission denied")) {
    return absl::StatusCode::kPermissionDenied;
  }
  if (absl::StrContains(message, "does not exist")) {
    return absl::StatusCode::kNotFound;
  }
  return absl::StatusCode::kUnavailable;
}

}  // namespace

absl::StatusCode StatusCodeForSqlState(absl::string_view s) {
  using C = absl::StatusCode;
  if (s.size() != 5) return C::kUnknown;
  const absl::string_view cls = s.substr(0, 2);
  if (s == "42501") return C::kPermissionDenied;
  if (s == "42P01" || s == "42704" || s == "42883" || s == "3D000" ||
      s == "42P02" || s == "42703") {
    return C::kNotFound;
  }
  if (s == "23505" || s == "42710" || s == "42P07" || s == "42P04") {
    return C::kAlreadyExists;
  }
  if (s == "57014") return C::kCancelled;

  if (cls == "08" || s.substr(0, 4) == "57P0") return C::kUnavailable;
  if (cls == "28") return C::kUnauthenticated;
  if (cls == "42" || cls == "22") return C::kInvalidArgument;
  if (cls == "23" || cls == "55") return C::kFailedPrecondition;
  if (cls == "53" || cls == "54") return C::kResourceExhausted;
  if (cls == "40") return C::kAborted;
  if (cls == "0A") return C::kUnimplemented;
  return C::kUnknown;
}

absl::Status StatusFromResult(const PGconn* conn, const PGresult* result,
                              absl::string_view what) {
  if (result == nullptr) {
    return absl::UnavailableError(absl::StrCat(what, ": ", Describe(conn), ": ",
                                               Trimmed(PQerrorMessage(conn))));
  }
  const char* sqlstate = PQresultErrorField(result, PG_DIAG_SQLSTATE);
  std::string message =
      Trimmed(PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY));
  if (message.empty()) message = Trimmed(PQresultErrorMessage(result));
  if (message.empty()) message = Trimmed(PQerrorMessage(conn));
  const std::string detail =
      Trimmed(PQresultErrorField(result, PG_DIAG_MESSAGE_DETAIL));
  const std::string hint =
      Trimmed(PQresultErrorField(result, PG_DIAG_MESSAGE_HINT));
  std::string text = absl::StrCat(what, ": ", message);
  if (!detail.empty()) absl::StrAppend(&text, " (", detail, ")");
  if (!hint.empty()) absl::StrAppend(&text, " hint: ", hint);
  absl::StatusCode code = absl::StatusCode::kUnavailable;
  if (sqlstate != nullptr) {
    absl::StrAppend(&text, " [SQLSTATE ", sqlstate, "]");
    code = StatusCodeForSqlState(sqlstate);
  } else if (PQstatus(conn) == CONNECTION_OK) {
    code = absl::StatusCode::kUnknown;
  }
  return absl::Status(code, text);
}

Result& Result::operator=(Result&& other) noexcept {
  if (this != &other) {
    PQclear(result_);
    result_ = other.release();
  }
  return *this;
}

Result::~Result() { PQclear(result_); }

uint64_t Result::AffectedRows() const {
  uint64_t n = 0;
  if (result_ == nullptr) return 0;
  if (!absl::SimpleAtoi(PQcmdTuples(result_), &n)) return 0;
  return n;
}

absl::StatusOr<std::unique_ptr<Connection>> Connection::Open(
    absl::string_view conninfo, const ConnectOptions& options) {
  const std::string dbname(conninfo);
  const std::string timeout = absl::StrCat(
      std::max<int64_t>(2, absl::ToInt64Seconds(options.connect_timeout)));
  std::vector<const char*> keys = {"dbname",
                                   "connect_timeout",
                                   "application_name",
                                   "client_encoding",
                                   "keepalives",
                                   "keepalives_idle",
                                   "keepalives_interval",
                                   "keepalives_count"};
  std::vector<const char*> values = {dbname.c_str(),
                                     timeout.c_str(),
                                     options.application_name.c_str(),
                                     "UTF8",
                                     "1",
                                     "10",
                                     "5",
                                     "3"};
  if (!options.replication.empty()) {
    keys.push_back("replication");
    values.push_back(options.replication.c_str());
  }
  keys.push_back(nullptr);
  values.push_back(nullptr);
  PGconn* conn = PQconnectdbParams(keys.data(), values.data(),
                                   /*expand_dbname=*/1);
  if (conn == nullptr) {
    return absl::ResourceExhaustedError(
        "libpq could not allocate a connection");
  }
  if (PQstatus(conn) != CONNECTION_OK) {
    const std::string message = Trimmed(PQerrorMessage(conn));
    const std::string where = Describe(conn);
    PQfinish(conn);
    return absl::Status(CodeForConnectFailure(message),
                        absl::StrCat("connecting to ", where, ": ", message));
  }
  // Non-blocking sends would need a flush loop around every call; libpq's
  // blocking sends are bounded by the TCP keepalives above, and every
  // wait for the server goes through WaitSocket with a deadline.
  return std::unique_ptr<Connection>(new Connection(conn, options));
}

Connection::~Connection() { PQfinish(conn_); }

std::string Connection::LastError() const {
  return Trimmed(PQerrorMessage(conn_));
}

absl::Status Connection::WaitSocket(bool read, bool write,
                                    absl::Time deadline) const {
  const int fd = PQsocket(conn_);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat(Describe(conn_), ": the connection is closed"));
  }
  while (true) {
    pollfd p{};
    p.fd = fd;
    p.events = static_cast<short>((read ? POLLIN : 0) | (write ? POLLOUT : 0));
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat(
          Describe(conn_), ": no answer from the server within the timeout"));
    }
    const int64_t ms =
        std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 60 * 60 * 1000);
    const int r = poll(&p, 1, static_cast<int>(ms));
    if (r > 0) return absl::OkStatus();
    if (r < 0 && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat(
          Describe(conn_), ": waiting on the socket: ", std::strerror(errno)));
    }
  }
}

void Connection::Cancel() const {
  PGcancel* cancel = PQgetCancel(conn_);
  if (cancel == nullptr) return;
  char error[256];
  PQcancel(cancel, error, sizeof(error));
  PQfreeCancel(cancel);
}

absl::StatusOr<Result> Connection::CollectResults(absl::string_view what) {
  absl::Time deadline = absl::Now() + options_.query_timeout;
  bool timed_out = false;
  absl::Status first_error;
  Result last;
  while (true) {
    while (PQisBusy(conn_)) {
      absl::Status waited =
          WaitSocket(/*read=*/true, /*write=*/false, deadline);
      if (absl::IsDeadlineExceeded(waited) && !timed_out) {
        // Ask the server to stop, then give it a little while to say so;
        // a server that does not answer at all leaves the connection
        // unusable, which healthy() reports.
        timed_out = true;
        Cancel();
        deadline = absl::Now() + absl::Seconds(5);
        continue;
      }
      if (!waited.ok()) {
        return absl::Status(waited.code(),
                            absl::StrCat(what, ": ", waited.message()));
      }
      if (PQconsumeInput(conn_) == 0) {
        return StatusFromResult(conn_, nullptr, what);
      }
    }
    PGresult* r = PQgetResult(conn_);
    if (r == nullptr) break;
    const ExecStatusType st = PQresultStatus(r);
    if (st == PGRES_COPY_OUT && timed_out) {
      // The copy began only after the query ran past its timeout (the
      // server sends its first rows late): the cancel sent ends it; its
      // rows are dropped and the timeout reported.
      PQclear(r);
      DrainCopyOut(deadline);
      continue;
    }
    if (st == PGRES_COPY_OUT || st == PGRES_COPY_IN || st == PGRES_COPY_BOTH) {
      if (!first_error.ok()) {
        PQclear(r);
        return first_error;
      }
      return Result(r);
    }
    if (st == PGRES_FATAL_ERROR || st == PGRES_BAD_RESPONSE ||
        st == PGRES_NONFATAL_ERROR) {
      if (first_error.ok()) first_error = StatusFromResult(conn_, r, what);
      PQclear(r);
      continue;
    }
    last = Result(r);
  }
  if (timed_out) {
    return absl::DeadlineExceededError(absl::StrCat(
        what, ": cancelled after ",
        absl::FormatDuration(options_.query_timeout), " (query timeout)"));
  }
  if (!first_error.ok()) return first_error;
  return last;
}

void Connection::DrainCopyOut(absl::Time deadline) {
  while (true) {
    char* buffer = nullptr;
    const int n = PQgetCopyData(conn_, &buffer, /*async=*/1);
    if (n > 0) {
      PQfreemem(buffer);
      continue;
    }
    if (n < 0) return;  // ended (its result follows) or failed
    if (!WaitSocket(true, false, deadline).ok() || PQconsumeInput(conn_) == 0) {
      return;
    }
  }
}

absl::StatusOr<Result> Connection::Exec(absl::string_view sql) {
  const std::string text(sql);
  if (PQsendQuery(conn_, text.c_str()) == 0) {
    return StatusFromResult(conn_, nullptr, "sending a query");
  }
  return CollectResults(absl::StrCat("running \"", sql.substr(0, 60),
                                     sql.size() > 60 ? "...\"" : "\""));
}

namespace {

// The parallel arrays libpq takes parameters in (pointing into `params`,
// which must outlive them).
struct ParamArrays {
  explicit ParamArrays(absl::Span<const Param> params) {
    for (const Param& p : params) {
      types.push_back(p.type_oid);
      values.push_back(p.value ? p.value->data() : nullptr);
      lengths.push_back(p.value ? static_cast<int>(p.value->size()) : 0);
      formats.push_back(p.binary ? 1 : 0);
    }
  }
  std::vector<Oid> types;
  std::vector<const char*> values;
  std::vector<int> lengths;
  std::vector<int> formats;
};

}  // namespace

absl::StatusOr<Result> Connection::ExecParams(absl::string_view sql,
                                              absl::Span<const Param> params,
                                              bool binary_results) {
  const std::string text(sql);
  const ParamArrays p(params);
  if (PQsendQueryParams(conn_, text.c_str(), static_cast<int>(params.size()),
                        p.types.data(), p.values.data(), p.lengths.data(),
                        p.formats.data(), binary_results ? 1 : 0) == 0) {
    return StatusFromResult(conn_, nullptr, "sending a query");
  }
  return CollectResults(absl::StrCat("running \"", sql.substr(0, 60),
                                     sql.size() > 60 ? "...\"" : "\""));
}

absl::StatusOr<Result> Connection::ExecPrepared(absl::string_view sql,
                                                absl::Span<const Param> params,
                                                bool binary_results) {
  const ParamArrays p(params);
  const std::string what = absl::StrCat("running \"", sql.substr(0, 60),
                                        sql.size() > 60 ? "...\"" : "\"");
  auto it = prepared_.find(sql);
  if (it == prepared_.end()) {
    if (prepared_.size() >= kMaxPrepared) {
      // A protocol-level prepared statement outlives the transaction it was
      // made in, so this may run inside one; only an aborted transaction
      // refuses it, and then the statements are simply kept a while longer.
      if (!Exec("DEALLOCATE ALL").ok()) {
        return ExecParams(sql, params, binary_results);
      }
      prepared_.clear();
    }
    std::string name = absl::StrCat("tally_p", ++next_prepared_);
    const std::string text(sql);
    if (PQsendPrepare(conn_, name.c_str(), text.c_str(),
                      static_cast<int>(params.size()), p.types.data()) == 0) {
      return StatusFromResult(conn_, nullptr, "sending a query");
    }
    absl::StatusOr<Result> prepared =
        CollectResults(absl::StrCat("preparing ", what));
    if (!prepared.ok()) return prepared.status();
    it = prepared_.emplace(std::string(sql), std::move(name)).first;
  }
  if (PQsendQueryPrepared(conn_, it->second.c_str(),
                          static_cast<int>(params.size()), p.values.data(),
                          p.lengths.data(), p.formats.data(),
                          binary_results ? 1 : 0) == 0) {
    return StatusFromResult(conn_, nullptr, "sending a query");
  }
  absl::StatusOr<Result> result = CollectResults(what);
  if (!result.ok() &&
      (result.status().code() == absl::StatusCode::kUnimplemented ||
       absl::StrContains(result.status().message(), "prepared statement"))) {
    // "cached plan must not change result type" (a DDL changed a column the
    // statement returns) or a statement the session no longer has: the
    // next call prepares it anew (the old one, if any, stays until the
    // next DEALLOCATE ALL).
    prepared_.erase(it);
  }
  return result;
}

absl::Status Connection::CopyOut(
    absl::string_view sql,
    absl::FunctionRef<absl::Status(absl::string_view chunk)> consume) {
  absl::StatusOr<Result> started = Exec(sql);
  if (!started.ok()) return started.status();
  if (started->status() != PGRES_COPY_OUT) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a COPY ... TO STDOUT: \"", sql.substr(0, 60), "\""));
  }
  absl::Status consumer_error;
  bool timed_out = false;
  bool got_data = false;
  absl::Time deadline = absl::Now() + options_.query_timeout;
  while (true) {
    char* buffer = nullptr;
    const int n = PQgetCopyData(conn_, &buffer, /*async=*/1);
    if (n > 0) {
      if (consumer_error.ok()) {
        consumer_error = consume(absl::string_view(buffer, n));
        if (!consumer_error.ok()) Cancel();
      }
      PQfreemem(buffer);
      // The timeout counts from the last data: the clock is read when
      // the copy has to wait, not once per row (a scan reads millions).
      got_data = true;
      continue;
    }
    if (n == 0) {
      if (got_data && !timed_out) {
        deadline = absl::Now() + options_.query_timeout;
        got_data = false;
      }
      absl::Status waited = WaitSocket(true, false, deadline);
      if (absl::IsDeadlineExceeded(waited) && !timed_out) {
        timed_out = true;
        Cancel();
        deadline = absl::Now() + absl::Seconds(5);
        continue;
      }
      if (!waited.ok()) return waited;
      if (PQconsumeInput(conn_) == 0) {
        return StatusFromResult(conn_, nullptr, "reading COPY data");
      }
      continue;
    }
    break;  // -1: the copy ended; -2: an error, reported by the result
  }
  absl::StatusOr<Result> finished = CollectResults("COPY");
  if (!consumer_error.ok()) return consumer_error;
  if (timed_out) {
    return absl::DeadlineExceededError(absl::StrCat(
        "COPY: no data for ", absl::FormatDuration(options_.query_timeout),
        " (query timeout); cancelled"));
  }
  return finished.status();
}

absl::StatusOr<uint64_t> Connection::CopyIn(absl::string_view sql,
                                            absl::string_view data) {
  absl::StatusOr<Result> started = Exec(sql);
  if (!started.ok()) return started.status();
  if (started->status() != PGRES_COPY_IN) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a COPY ... FROM STDIN: \"", sql.substr(0, 60), "\""));
  }
  constexpr size_t kChunk = 1 << 20;
  for (size_t at = 0; at < data.size(); at += kChunk) {
    const size_t n = std::min(kChunk, data.size() - at);
    if (PQputCopyData(conn_, data.data() + at, static_cast<int>(n)) != 1) {
      return StatusFromResult(conn_, nullptr, "sending COPY data");
    }
  }
  if (PQputCopyEnd(conn_, nullptr) != 1) {
    return StatusFromResult(conn_, nullptr, "ending COPY");
  }
  absl::StatusOr<Result> finished = CollectResults("COPY FROM STDIN");
  if (!finished.ok()) return finished.status();
  return finished->AffectedRows();
}

std::string Connection::QuoteIdentifier(absl::string_view name) const {
  char* quoted = PQescapeIdentifier(conn_, name.data(), name.size());
  if (quoted == nullptr) return "";
  std::string out(quoted);
  PQfreemem(quoted);
  return out;
}

std::string Connection::QuoteLiteral(absl::string_view text) const {
  char* quoted = PQescapeLiteral(conn_, text.data(), text.size());
  if (quoted == nullptr) return "";
  std::string out(quoted);
  PQfreemem(quoted);
  return out;
}

}  // namespace pg
}  // namespace tally
