// EnsureTallyTable: creates one of tally's own tables in a MariaDB server's
// `tally` database (the apply log, apply_log.h; the index marker,
// index_marker.h) when it is missing.
//
// Whether the table exists is asked first (information_schema), and CREATE
// runs only when it does not: the server checks the CREATE privilege before
// IF NOT EXISTS, so a user without CREATE runs on a schema an administrator
// prepared. Such a user, meeting a missing table, gets kPermissionDenied with
// the statement to run.
//
//   TALLY_RETURN_IF_ERROR(EnsureTallyTable(conn, "apply_log",
//       "node varchar(255) COLLATE utf8mb4_bin PRIMARY KEY, ..."));
//
// Thread-compatible: uses the connection it is given.
#ifndef TALLY_MARIADB_SIDECAR_TALLY_TABLES_H_
#define TALLY_MARIADB_SIDECAR_TALLY_TABLES_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "mariadb/connection.h"

namespace tally {
namespace mariadb {

// The database tally's own tables live in.
inline constexpr absl::string_view kTallySchema = "tally";

// `columns`: the column definitions of CREATE TABLE, between the
// parentheses. The table is InnoDB, utf8mb4. `purpose` names it in errors
// ("tally's apply log").
absl::Status EnsureTallyTable(Connection& conn, absl::string_view table,
                              absl::string_view columns,
                              absl::string_view purpose);

}  // namespace mariadb
}  // namespace tally

#endif  // TALLY_MARIADB_SIDECAR_TALLY_TABLES_H_
