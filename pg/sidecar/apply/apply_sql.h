// The SQL of the apply (pg/sidecar/apply/pg_backend.h): the staging table a
// table's rows are copied into, the COPY that fills it, the statement that
// merges them into the table, and the apply session's settings.
//
// The staging table has fixed columns, then the table's own in canonical
// order (c0, c1, ...):
//   i    int4      the row's index in the ApplyRows call
//   op   "char"    'u' update under the CAS, 'd' delete under the CAS,
//                  'i' insert if absent, 'n' nothing to write (applied if
//                  the row is absent)
//   ets  timestamptz, eor oid: the expected token (a RowToken,
//                  pg/sidecar/apply/row_token.h)
//
// The merge statement (MergeSql) never waits for a row lock: it first locks
// the rows to update and delete with `FOR UPDATE OF t SKIP LOCKED`, so that
// a row an application holds is skipped (reported busy, to be tried again
// in a later transaction) instead of waited for while the apply holds
// other rows; then it updates and deletes the locked rows whose
// pg_xact_commit_timestamp_origin(xmin) still equals the expected token,
// inserts the rows to insert that its snapshot does not see (ON CONFLICT
// DO NOTHING; OVERRIDING SYSTEM VALUE, so that an identity column
// GENERATED ALWAYS takes the value of the row's source), and checks that
// rows to be absent are. It returns one row per staging row it settled:
// ('a', i) applied, ('b', i) busy. A row it does not return was refused:
// an application changed it since tallyd captured it.
//
// The only waits left are those SKIP LOCKED cannot avoid: an insert whose
// key an application's uncommitted transaction inserts or updates, a
// unique index other than the key. The session's lock_timeout
// (ApplySessionSettings) bounds them.
//
// Thread-safety: pure functions.
#ifndef TALLY_PG_SIDECAR_APPLY_APPLY_SQL_H_
#define TALLY_PG_SIDECAR_APPLY_APPLY_SQL_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "pg/schema/table_schema.h"

namespace tally {
namespace pg {

// CREATE TEMP TABLE IF NOT EXISTS `temp` (the fixed columns, then `t`'s
// columns as c0, c1, ... of its types and collations) ON COMMIT DELETE
// ROWS.
std::string CreateStageSql(const TableSchema& t, absl::string_view temp);

// COPY pg_temp.`temp` (every column) FROM STDIN (FORMAT binary).
std::string CopyStageSql(const TableSchema& t, absl::string_view temp);

// The merge statement of the rows staged in pg_temp.`temp` into `t`.
std::string MergeSql(const TableSchema& t, absl::string_view temp);

// The settings the apply session runs with, one statement each:
// session_replication_role = replica (first; the caller fails without it:
// ordinary triggers and the foreign keys' triggers do not fire on applied
// rows, as under PostgreSQL's own logical replication apply) and
// lock_timeout = `lock_timeout`.
std::vector<std::string> ApplySessionSettings(absl::Duration lock_timeout);

// SET deadlock_timeout = `timeout`: a deadlock that involves the apply is
// found by the apply's session first, which is then the victim. Only a
// superuser may set it; the caller ignores a refusal.
std::string ApplyDeadlockTimeoutSql(absl::Duration timeout);

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_SIDECAR_APPLY_APPLY_SQL_H_
