// TableRows (node/sidecar/table_rows.h) of a sidecar to MariaDB.
//
// A get prints each value as the server prints it (times in UTC, the
// session's zone; binary columns as "\x" and lowercase hex digits, as
// PostgreSQL prints bytea; JSON columns as JSON). A put, in one
// transaction, locks the row by key and updates the columns the JSON names
// or inserts the row, under strict SQL mode: a value the column cannot
// hold is refused, never truncated. Values are checked before any
// statement runs where the server would otherwise convert them silently:
// an integer column takes only an integer, a number column only a number,
// a binary column only "\x" hex. Only tables whose columns map to
// PostgreSQL's canonical types (mariadb/column_mapping.h) are kept, so only
// those are served.
#ifndef TALLY_NODE_SIDECAR_MARIADB_TABLE_ROWS_H_
#define TALLY_NODE_SIDECAR_MARIADB_TABLE_ROWS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "node/sidecar/table_rows.h"

namespace tally {
namespace node {

// `url`: the node's mariadb:// URL; `tables`: "database.table" names.
// Returns kInvalidArgument for a URL that does not parse.
absl::StatusOr<std::unique_ptr<TableRows>> NewMariaDbTableRows(
    const std::string& url, std::vector<std::string> tables);

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_SIDECAR_MARIADB_TABLE_ROWS_H_
