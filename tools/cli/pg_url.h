// The PostgreSQL URLs `tally diff` and `tally repair` take instead of node
// addresses:
//
//   postgresql://USER[:PASSWORD]@HOST[:PORT]/DB?table=public.t&table=public.u
//
// `table=` (repeatable) is tally's, not libpq's: it is taken out before the
// rest goes to libpq unchanged (sslmode=..., connect_timeout=..., and any
// other libpq parameter stay). A URL never appears in output as given: the
// display form leaves out the password and `password=`.
//
//   absl::StatusOr<PostgresTarget> t = ParsePostgresUrl(argv[1]);
//   Connection::Open(t->conninfo, {});  t->tables == {"public.t", ...}
//
// Thread-safe: pure functions.
#ifndef TALLY_TOOLS_CLI_PG_URL_H_
#define TALLY_TOOLS_CLI_PG_URL_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tally {
namespace cli {

struct PostgresTarget {
  std::string conninfo;             // the URL without its table= parameters
  std::vector<std::string> tables;  // the table= values, decoded, in order
  std::string display;              // the URL without password or tables
};

// True for "postgresql://..." and "postgres://..." (libpq's two schemes).
bool IsPostgresUrl(absl::string_view arg);

// Splits `url`. Returns kInvalidArgument (without the password) for a URL
// that is not one of libpq's schemes, a bad %-escape in a table= value, or
// an empty table name.
absl::StatusOr<PostgresTarget> ParsePostgresUrl(absl::string_view url);

}  // namespace cli
}  // namespace tally

#endif  // TALLY_TOOLS_CLI_PG_URL_H_
