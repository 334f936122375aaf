// IndexMarker: what a MariaDB server remembers of a node's index having been
// built, so that a start whose store holds no index can tell an index LOST
// (data directory deleted, disk replaced) from a FIRST start — as the
// PostgreSQL sidecar's publication comment does (pg/sidecar/build_marker.h
// says why the two must build differently).
//
// The marker is the node's row in `tally`.`index_marker`, beside the apply
// log (apply_log.h) and, like it, keyed by the node's name:
//   node             the node's name
//   server           the server the index was built on (ServerIdentity)
//   first_build_gtid the GTID state of the node's first build's snapshot
// It is written once a build has stored its position (kept as it is when
// it already names this server), and by a start that resumes from a stored
// position while no marker names this server (an index built before markers
// existed: that position stands in for the first build's).
//
// The server's identity tells a copy apart: the `tally` database restored on
// another server (a dump, or a native replica, which replicates the table)
// holds a marker of another server, and a start there is a first start.
// MariaDB has no server UUID; the identity is its @@server_id, @@hostname,
// @@port and @@datadir, so a server moved to another host or directory
// counts as another (its start is a first start: the peers' rows win, as
// before markers existed).
//
//   TALLY_ASSIGN_OR_RETURN(std::optional<IndexMarker> m,
//                          ReadIndexMarker(conn, "db-3"));
//   TALLY_ASSIGN_OR_RETURN(std::string here, ServerIdentity(conn));
//   bool lost = m.has_value() && m->server == here;
//
// Thread-compatible: the functions use the connection they are given.
#ifndef TALLY_MARIADB_SIDECAR_INDEX_MARKER_H_
#define TALLY_MARIADB_SIDECAR_INDEX_MARKER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "mariadb/connection.h"

namespace tally {
namespace mariadb {

inline constexpr absl::string_view kIndexMarkerTable = "index_marker";

struct IndexMarker {
  std::string node;
  std::string server;
  std::string first_build_gtid;
};

// "server_id 1 on HOST:PORT DATADIR".
absl::StatusOr<std::string> ServerIdentity(Connection& conn);

// The node's marker; nullopt when none (or no marker table yet).
absl::StatusOr<std::optional<IndexMarker>> ReadIndexMarker(
    Connection& conn, absl::string_view node);

// Writes (replaces) the node's marker, creating the table when missing
// (kPermissionDenied naming the statement for a user without CREATE on
// `tally`).
absl::Status WriteIndexMarker(Connection& conn, const IndexMarker& marker);

}  // namespace mariadb
}  // namespace tally

#endif  // TALLY_MARIADB_SIDECAR_INDEX_MARKER_H_
