#include "mariadb/sidecar/index_marker.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "mariadb/sidecar/tally_tables.h"
#include "tree/status_macros.h"

namespace tally {
namespace mariadb {
namespace {

std::string MarkerTable() {
  return absl::StrCat(QuoteIdentifier(kTallySchema), ".",
                      QuoteIdentifier(kIndexMarkerTable));
}

}  // namespace

absl::StatusOr<std::string> ServerIdentity(Connection& conn) {
  TALLY_ASSIGN_OR_RETURN(
      TextRows rows,
      conn.Query("SELECT CONCAT('server_id ', @@server_id, ' on ', "
                 "@@hostname, ':', @@port, ' ', @@datadir)"));
  if (rows.empty() || !rows[0][0].has_value()) {
    return absl::InternalError("the server did not say its identity");
  }
  return *rows[0][0];
}

absl::StatusOr<std::optional<IndexMarker>> ReadIndexMarker(
    Connection& conn, absl::string_view node) {
  TALLY_ASSIGN_OR_RETURN(
      TextRows present,
      conn.Query(absl::StrCat(
          "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = ",
          conn.Quote(kTallySchema),
          " AND TABLE_NAME = ", conn.Quote(kIndexMarkerTable))));
  if (present.empty()) return std::nullopt;
  TALLY_ASSIGN_OR_RETURN(
      TextRows rows, conn.Query(absl::StrCat(
                         "SELECT server, first_build_gtid FROM ", MarkerTable(),
                         " WHERE node = ", conn.Quote(node))));
  if (rows.empty()) return std::nullopt;
  IndexMarker m;
  m.node = std::string(node);
  if (!rows[0][0].has_value() || !rows[0][1].has_value()) {
    return absl::DataLossError(absl::StrCat(
        "the index marker of node ", node, " in ", MarkerTable(),
        " is not one tally wrote (server or first_build_gtid missing)"));
  }
  m.server = *rows[0][0];
  m.first_build_gtid = *rows[0][1];
  return m;
}

absl::Status WriteIndexMarker(Connection& conn, const IndexMarker& marker) {
  TALLY_RETURN_IF_ERROR(EnsureTallyTable(
      conn, kIndexMarkerTable,
      "node varchar(255) COLLATE utf8mb4_bin PRIMARY KEY, server text NOT "
      "NULL, first_build_gtid text NOT NULL, written timestamp(6) NOT NULL "
      "DEFAULT CURRENT_TIMESTAMP(6)",
      "tally's index marker"));
  return conn.Exec(
      absl::StrCat("INSERT INTO ", MarkerTable(),
                   " (node, server, first_build_gtid) VALUES (",
                   conn.Quote(marker.node), ", ", conn.Quote(marker.server),
                   ", ", conn.Quote(marker.first_build_gtid),
                   ") ON DUPLICATE KEY UPDATE server = VALUES(server), "
                   "first_build_gtid = VALUES(first_build_gtid), written = "
                   "CURRENT_TIMESTAMP(6)"));
}

}  // namespace mariadb
}  // namespace tally
