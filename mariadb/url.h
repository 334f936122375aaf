// The MariaDB and MySQL URLs that `tally diff`, `tally repair` and tallyd
// take:
//
//   mariadb://USER[:PASSWORD]@HOST[:PORT]/DB?table=db.t&table=db.u
//   mysql://...                      (the same)
//
// USER and PASSWORD may be %-escaped (a password holding '@' or '/').
// The port defaults to 3306. `table=` (repeatable) names tables as
// "database.table"; `socket=PATH` connects through a Unix socket instead
// of TCP. Nothing else is accepted: an unknown parameter is an error, not
// ignored. A URL never appears in output as given: the display form
// leaves out the password.
//
//   TALLY_ASSIGN_OR_RETURN(MariaDbTarget t, ParseMariaDbUrl(argv[1]));
//   Connection::Open(t, timeout);  t.tables == {"db1.t", ...}
//
// Thread-safe: pure functions.
#ifndef TALLY_MARIADB_URL_H_
#define TALLY_MARIADB_URL_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tally {
namespace mariadb {

struct MariaDbTarget {
  std::string host;
  int port = 3306;
  std::string socket;  // empty: TCP to host:port
  std::string user;
  std::string password;
  std::string database;             // may be empty
  std::vector<std::string> tables;  // the table= values, in order
  // "mariadb://USER@HOST:PORT/DB": no password, no parameters.
  std::string display;
};

// True for "mariadb://..." and "mysql://...".
bool IsMariaDbUrl(absl::string_view arg);

// Splits `url`. Returns kInvalidArgument (never quoting the password) for
// another scheme, a URL without a host, a bad port or %-escape, an empty
// or unqualified table name, or a parameter other than table= and socket=.
absl::StatusOr<MariaDbTarget> ParseMariaDbUrl(absl::string_view url);

}  // namespace mariadb
}  // namespace tally

#endif  // TALLY_MARIADB_URL_H_
