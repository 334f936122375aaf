// The checks a MariaDB sidecar makes of its server before it builds or
// follows anything: the binary log must hold full row images with their
// metadata, and the sidecar's user must hold the privileges it uses. Every
// problem found is named at once, each with its fix, so that an operator
// fixes them in one round.
//
//   TALLY_RETURN_IF_ERROR(CheckServerForSidecar(conn));
//
// Thread-compatible: uses only the connection given.
#ifndef TALLY_MARIADB_CAPTURE_PREFLIGHT_H_
#define TALLY_MARIADB_CAPTURE_PREFLIGHT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "mariadb/connection.h"

namespace tally {
namespace mariadb {

// What a sidecar needs of the server, with the fix of each shortfall:
//   log_bin ON                    (--log-bin)
//   binlog_format ROW             (a statement-logged change cannot be
//                                  turned into rows)
//   binlog_row_image FULL         (a partial image cannot be)
//   binlog_row_metadata FULL      (column names, signedness, the key)
//   the user's global privileges REPLICATION SLAVE (to read the binary
//   log), BINLOG MONITOR (its position) and BINLOG REPLAY (to mark tally's
//   own writes with a session server_id; SUPER also grants the three).
// Returns OK, or kFailedPrecondition listing every shortfall and its fix
// ("binlog_format is STATEMENT: set binlog_format=ROW (SET GLOBAL and in
// the server's configuration); ..."); a connection's error.
absl::Status CheckServerForSidecar(Connection& conn);

// What a sidecar needs of a kept table `table` ("db.t") beyond its columns
// and key (mariadb/table.h): no foreign key of it may cascade (ON DELETE or
// ON UPDATE CASCADE, SET NULL, SET DEFAULT). MariaDB does not write the
// rows a cascading action changes into the binary log (the replica's
// InnoDB is expected to cascade by itself), so no binary log reader sees
// them, and tally's apply, like a replica's, runs with foreign_key_checks
// off. Returns kFailedPrecondition naming each such constraint, its parent
// and the fix; a connection's error.
absl::Status CheckTableForSidecar(Connection& conn, absl::string_view table);

}  // namespace mariadb
}  // namespace tally

#endif  // TALLY_MARIADB_CAPTURE_PREFLIGHT_H_
