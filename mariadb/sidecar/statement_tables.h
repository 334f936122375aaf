// TablesAStatementMayChange: the tables a statement of the binary log (a
// QUERY event: DDL, or DML a session logged in statement format) may
// change, as the statement names them ("db.t", or "t" in its default
// database), so that a sidecar rebuilds a kept table a statement changed
// and leaves it alone when the statement only reads it.
//
// String literals and comments are skipped (the words in them are no
// table), executable comments (/*!50100 ... */) are read as code, and
// backtick-quoted names are read without their quotes. Then:
//  - INSERT / REPLACE [modifiers] [INTO] T ...: T alone (the SELECT part
//    of INSERT ... SELECT only reads: pt-table-checksum's REPLACE INTO
//    percona.checksums ... SELECT ... FROM a kept table changes no kept
//    table);
//  - UPDATE ... SET: every name before SET (a multi-table UPDATE may
//    change each table it joins);
//  - DELETE [modifiers] FROM T followed by WHERE, ORDER, LIMIT or nothing:
//    T alone;
//  - anything else (DDL, multi-table DELETE, SET STATEMENT ... FOR, ...):
//    every name in it, which may rebuild a table needlessly but never
//    misses one.
// What no statement shows: a trigger's or an updatable view's writes to a
// table the statement does not name (in statement format the server logs
// the statement alone).
//
//   for (const std::string& name : TablesAStatementMayChange(sql)) ...
//
// Thread-safety: a pure function.
#ifndef TALLY_MARIADB_SIDECAR_STATEMENT_TABLES_H_
#define TALLY_MARIADB_SIDECAR_STATEMENT_TABLES_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace tally {
namespace mariadb {

// The names (words of the statement: "db.t" or "t", as written) of the
// tables `statement` may change; may hold words that are no table.
std::vector<std::string> TablesAStatementMayChange(absl::string_view statement);

}  // namespace mariadb
}  // namespace tally

#endif  // TALLY_MARIADB_SIDECAR_STATEMENT_TABLES_H_
