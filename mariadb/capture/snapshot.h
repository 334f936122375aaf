// A consistent snapshot of a MariaDB database and the binary log position
// it stands at: where a MariaDB sidecar's index build starts, so that the
// rows it reads and the changes it follows after them meet exactly — no
// change missed, none applied twice.
//
//   TALLY_ASSIGN_OR_RETURN(SnapshotPosition at, BeginSnapshot(conn));
//   table.ForEachRow(conn, "", ...);   // the rows as of `at`
//   conn.Exec("COMMIT");
//   BinlogStreamOptions o;
//   o.start_gtid = at.gtid;            // the changes after them
//
// `START TRANSACTION WITH CONSISTENT SNAPSHOT` makes InnoDB's read view and
// the binary log position agree: the session's status variables
// Binlog_snapshot_file and Binlog_snapshot_position name the end of the
// last transaction the snapshot sees, and BINLOG_GTID_POS turns that file
// position into the GTID state a binlog client starts from (every
// replication domain's last transaction). Tables of other engines than
// InnoDB are not covered by the snapshot.
//
// Thread-compatible: uses only the connection given.
#ifndef TALLY_MARIADB_CAPTURE_SNAPSHOT_H_
#define TALLY_MARIADB_CAPTURE_SNAPSHOT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "mariadb/connection.h"

namespace tally {
namespace mariadb {

struct SnapshotPosition {
  std::string file;       // the binary log file ("bin.000002")
  uint64_t position = 0;  // the offset in it
  // The GTID state at that position ("0-1-1234,1-2-7"); "" when the server
  // has written no GTID yet.
  std::string gtid;
};

// Opens a consistent-snapshot transaction on `conn` (REPEATABLE READ) and
// returns its binary log position. The caller reads in it and ends it.
// Returns kFailedPrecondition when the server logs no binary log (log_bin
// off: there would be no changes to follow), a connection's error
// otherwise; the transaction is rolled back on error.
// REQUIRES: no transaction open on `conn`.
absl::StatusOr<SnapshotPosition> BeginSnapshot(Connection& conn);

}  // namespace mariadb
}  // namespace tally

#endif  // TALLY_MARIADB_CAPTURE_SNAPSHOT_H_
