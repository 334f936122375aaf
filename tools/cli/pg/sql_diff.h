// `tally diff URL URL` and `tally repair URL URL` when either URL is a
// MariaDB (or MySQL) one: PostgreSQL against MariaDB, MariaDB against
// MariaDB. The rows of both tables are read here (the block-hash transfer
// is PostgreSQL's alone), digested in tally's canonical form
// (mariadb/column_mapping.h) and compared as two PostgreSQL tables are;
// output, JSON and exit codes are those of tools/cli/pg/pg_diff.h.
//
// Tables: table= in the URLs (a MariaDB table is database.table) or
// --table; a PostgreSQL table and a MariaDB one have different names, so a
// mixed pair names the table in each URL. Two MariaDB URLs without tables
// compare every table with a primary key in the URLs' databases.
#ifndef TALLY_TOOLS_CLI_PG_SQL_DIFF_H_
#define TALLY_TOOLS_CLI_PG_SQL_DIFF_H_

#include "absl/status/statusor.h"
#include "tools/cli/pg/pg_diff.h"

namespace tally {
namespace cli {

// Runs the command, printing to stdout. Returns the exit code (0 or 1),
// or the trouble (exit 2) as a one-line status without any password.
// REQUIRES: options.url_a or options.url_b is a MariaDB URL.
absl::StatusOr<int> RunSqlDiff(const PgDiffOptions& options);

}  // namespace cli
}  // namespace tally

#endif  // TALLY_TOOLS_CLI_PG_SQL_DIFF_H_
