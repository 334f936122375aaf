// Connection: one client session with a MariaDB or MySQL server
// (Connector/C), the way tally reads and writes tables there.
//
//   TALLY_ASSIGN_OR_RETURN(std::unique_ptr<Connection> c,
//                          Connection::Open(target, absl::Seconds(30)));
//   TALLY_ASSIGN_OR_RETURN(TextRows rows, c->Query("SELECT @@version"));
//   c->Stream("SELECT id, a FROM db.t", [](absl::Span<const Value> row) {
//     ...;  // typed values (binary protocol): exact doubles and times
//   });
//
// Every session runs with `SET NAMES utf8mb4` (text arrives as UTF-8
// whatever the column's character set) and `time_zone = '+00:00'` (a
// TIMESTAMP column reads as UTC, so its instant does not depend on the
// server's zone). Errors name the server's error number and message, never
// the password.
//
// Thread-compatible: one thread at a time per connection.
#ifndef TALLY_MARIADB_CONNECTION_H_
#define TALLY_MARIADB_CONNECTION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "mariadb/url.h"

struct st_mysql;

namespace tally {
namespace mariadb {

// A date, time or both as the server sends it (MYSQL_TIME without the
// client library's header).
struct TimeValue {
  bool negative = false;  // TIME only
  uint32_t year = 0;
  uint32_t month = 0;
  uint32_t day = 0;
  uint32_t hour = 0;  // TIME: may exceed 23 (up to 838)
  uint32_t minute = 0;
  uint32_t second = 0;
  uint32_t microsecond = 0;
};

// One column's value of a streamed row.
struct Value {
  enum class Kind {
    kNull,
    kInt,     // every integer type, signed
    kUint,    // an UNSIGNED integer type
    kFloat,   // FLOAT
    kDouble,  // DOUBLE
    kTime,    // DATE, DATETIME, TIMESTAMP, TIME
    kBytes,   // every other type, as the text protocol would send it:
              // strings (UTF-8), blobs (raw), DECIMAL ("-12.500000"), JSON
  };
  Kind kind = Kind::kNull;
  int64_t i = 0;
  uint64_t u = 0;
  double d = 0;
  float f = 0;
  TimeValue time;
  absl::string_view bytes;  // valid until the callback returns
};

// Rows of a text-protocol query; nullopt for NULL.
using TextRow = std::vector<std::optional<std::string>>;
using TextRows = std::vector<TextRow>;

class Connection {
 public:
  // Connects to `target` (its database as the default one when given),
  // waiting at most `timeout` for the connection and for each read or
  // write on it. Returns kUnavailable for a server that cannot be reached,
  // kPermissionDenied for refused credentials (errors 1044, 1045),
  // kNotFound for an unknown database (1049).
  static absl::StatusOr<std::unique_ptr<Connection>> Open(
      const MariaDbTarget& target, absl::Duration timeout);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs one statement and returns its rows as text (none for a statement
  // without a result). Errors: StatusOfError below (the message is the
  // server's; callers say which database it came from).
  absl::StatusOr<TextRows> Query(absl::string_view sql);
  // Runs one statement, discarding any result.
  absl::Status Exec(absl::string_view sql);

  // Runs `sql` as a prepared statement and hands each row to `fn` as
  // typed values, without holding the result in memory (the rows arrive
  // as `fn` takes them). `fn`'s error ends the stream and is returned.
  absl::Status Stream(
      absl::string_view sql,
      const std::function<absl::Status(absl::Span<const Value>)>& fn);

  // The bytes of the values Stream has handed out so far (the rows'
  // payload, without the protocol's framing).
  uint64_t streamed_bytes() const { return streamed_bytes_; }
  // `text` as a string literal for this session ('it''s', escaped as the
  // session's sql_mode requires).
  std::string Quote(absl::string_view text) const;
  // The server's version string ("10.11.19-MariaDB-0+deb12u1-log").
  std::string server_version() const;
  // The target's display form (no password), for messages.
  const std::string& display() const { return display_; }

 private:
  Connection() = default;
  absl::Status Error(absl::string_view what) const;

  st_mysql* mysql_ = nullptr;
  std::string display_;
  // Bytes of streamed rows (Stream cannot see the network counters).
  uint64_t streamed_bytes_ = 0;
};

// The status for a server error `number` with `message`: kPermissionDenied
// for access errors (1044, 1045, 1142, 1143, 1227), kNotFound for an
// unknown database or table (1049, 1146), kUnavailable for a lost or
// refused connection (2002, 2003, 2006, 2013), kAlreadyExists for a
// duplicate key (1062), kFailedPrecondition otherwise; the message is
// "<what>: <message> (error <number>)" (without "<what>: " when empty).
absl::Status StatusOfError(unsigned number, absl::string_view message,
                           absl::string_view what);

// `name` quoted as a MariaDB identifier: `a``b`.
std::string QuoteIdentifier(absl::string_view name);

}  // namespace mariadb
}  // namespace tally

#endif  // TALLY_MARIADB_CONNECTION_H_
