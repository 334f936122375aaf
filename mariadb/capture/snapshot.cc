#include "mariadb/capture/snapshot.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tree/status_macros.h"

namespace tally {
namespace mariadb {

absl::StatusOr<SnapshotPosition> BeginSnapshot(Connection& conn) {
  TALLY_RETURN_IF_ERROR(
      conn.Exec("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"));
  TALLY_RETURN_IF_ERROR(
      conn.Exec("START TRANSACTION WITH CONSISTENT SNAPSHOT"));
  auto fail = [&](absl::Status s) {
    conn.Exec("ROLLBACK").IgnoreError();
    return s;
  };
  absl::StatusOr<TextRows> status =
      conn.Query("SHOW SESSION STATUS LIKE 'binlog_snapshot_%'");
  if (!status.ok()) return fail(status.status());
  SnapshotPosition at;
  for (const TextRow& row : *status) {
    const std::string name = row[0].value_or("");
    const std::string value = row[1].value_or("");
    if (name == "Binlog_snapshot_file") at.file = value;
    if (name == "Binlog_snapshot_position") {
      (void)absl::SimpleAtoi(value, &at.position);
    }
  }
  if (at.file.empty()) {
    return fail(absl::FailedPreconditionError(
        "the server writes no binary log (log_bin is OFF): a sidecar "
        "follows changes in it; start mariadbd with --log-bin"));
  }
  absl::StatusOr<TextRows> gtid = conn.Query(absl::StrCat(
      "SELECT BINLOG_GTID_POS(", conn.Quote(at.file), ", ", at.position, ")"));
  if (!gtid.ok()) return fail(gtid.status());
  if (gtid->empty() || !(*gtid)[0][0].has_value()) {
    return fail(absl::FailedPreconditionError(absl::StrCat(
        "BINLOG_GTID_POS found no GTID state at ", at.file, ":", at.position)));
  }
  at.gtid = *(*gtid)[0][0];
  return at;
}

}  // namespace mariadb
}  // namespace tally
