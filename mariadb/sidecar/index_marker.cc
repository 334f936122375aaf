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

absl::StatusOr<uint32_t> ServerId(Connection& conn) {
  TALLY_ASSIGN_OR_RETURN(TextRows rows, conn.Query("SELECT @@server_id"));
  uint32_t id = 0;
  if (rows.empty() || !rows[0][0].has_value() ||
      !absl::SimpleAtoi(*rows[0][0], &id)) {
    return absl::InternalError("SELECT @@server_id gave no number");
  }
  return id;
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
                         "SELECT server_id, first_build_gtid FROM ",
                         MarkerTable(), " WHERE node = ", conn.Quote(node))));
  if (rows.empty()) return std::nullopt;
  IndexMarker m;
  m.node = std::string(node);
  if (!rows[0][0].has_value() || !rows[0][1].has_value() ||
      !absl::SimpleAtoi(*rows[0][0], &m.server_id)) {
    return absl::DataLossError(absl::StrCat(
        "the index marker of node ", node, " in ", MarkerTable(),
        " is not one tally wrote (server_id or first_build_gtid missing)"));
  }
  m.first_build_gtid = *rows[0][1];
  return m;
}

absl::Status WriteIndexMarker(Connection& conn, const IndexMarker& marker) {
  TALLY_RETURN_IF_ERROR(EnsureTallyTable(
      conn, kIndexMarkerTable,
      "node varchar(255) COLLATE utf8mb4_bin PRIMARY KEY, server_id int "
      "unsigned NOT NULL, first_build_gtid text NOT NULL, written timestamp(6) "
      "NOT NULL DEFAULT CURRENT_TIMESTAMP(6)",
      "tally's index marker"));
  return conn.Exec(absl::StrCat(
      "INSERT INTO ", MarkerTable(),
      " (node, server_id, first_build_gtid) VALUES (", conn.Quote(marker.node),
      ", ", marker.server_id, ", ", conn.Quote(marker.first_build_gtid),
      ") ON DUPLICATE KEY UPDATE server_id = VALUES(server_id), "
      "first_build_gtid = VALUES(first_build_gtid), written = "
      "CURRENT_TIMESTAMP(6)"));
}

}  // namespace mariadb
}  // namespace tally
