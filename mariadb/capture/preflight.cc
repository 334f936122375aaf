#include "mariadb/capture/preflight.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tree/status_macros.h"

namespace tally {
namespace mariadb {
namespace {

// A server variable's value, upper-cased ("" when the server has none).
absl::StatusOr<std::string> Variable(Connection& conn, const char* name) {
  TALLY_ASSIGN_OR_RETURN(TextRows rows,
                         conn.Query(absl::StrCat("SELECT @@GLOBAL.", name)));
  if (rows.empty() || !rows[0][0].has_value()) return std::string();
  return absl::AsciiStrToUpper(*rows[0][0]);
}

}  // namespace

absl::Status CheckServerForSidecar(Connection& conn) {
  std::vector<std::string> problems;
  TALLY_ASSIGN_OR_RETURN(std::string log_bin, Variable(conn, "log_bin"));
  if (log_bin != "1" && log_bin != "ON") {
    problems.push_back(
        "the binary log is off: start mariadbd with --log-bin (a sidecar "
        "follows changes in it)");
  }
  struct Setting {
    const char* name;
    const char* wanted;
    const char* why;
  };
  for (const Setting& s :
       {Setting{"binlog_format", "ROW",
                "a change logged as a statement cannot be turned into rows"},
        Setting{"binlog_row_image", "FULL",
                "a partial row image cannot be turned into a row"},
        Setting{"binlog_row_metadata", "FULL",
                "the log must name each column, its signedness and the "
                "key"}}) {
    TALLY_ASSIGN_OR_RETURN(std::string value, Variable(conn, s.name));
    if (value != s.wanted) {
      problems.push_back(absl::StrCat(
          s.name, " is ", value.empty() ? "unset" : value, ": set ", s.name,
          "=", s.wanted, " (SET GLOBAL and in the server's configuration; ",
          s.why, ")"));
    }
  }
  // The current user's global privileges, as the server grants them.
  TALLY_ASSIGN_OR_RETURN(
      TextRows granted,
      conn.Query(
          "SELECT PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES "
          "WHERE GRANTEE = CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), "
          "'@', 1), '''@''', SUBSTRING_INDEX(CURRENT_USER(), '@', -1), "
          "'''')"));
  std::vector<std::string> have;
  for (const TextRow& r : granted) {
    have.push_back(absl::AsciiStrToUpper(r[0].value_or("")));
  }
  auto holds = [&](const std::string& privilege) {
    return std::find(have.begin(), have.end(), privilege) != have.end() ||
           std::find(have.begin(), have.end(), "SUPER") != have.end();
  };
  std::vector<std::string> missing;
  for (const char* privilege :
       {"REPLICATION SLAVE", "BINLOG MONITOR", "BINLOG REPLAY"}) {
    if (!holds(privilege)) missing.push_back(privilege);
  }
  if (!missing.empty()) {
    problems.push_back(absl::StrCat(
        "the user lacks ", absl::StrJoin(missing, ", "), ": GRANT ",
        absl::StrJoin(missing, ", "),
        " ON *.* TO the sidecar's user (REPLICATION SLAVE reads the binary "
        "log, BINLOG MONITOR its position, BINLOG REPLAY marks tally's own "
        "writes)"));
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("this MariaDB server cannot have a tally sidecar yet: ",
                   absl::StrJoin(problems, "; ")));
}

absl::Status CheckTableForSidecar(Connection& conn, absl::string_view table) {
  const size_t dot = table.find('.');
  if (dot == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", table, " is not qualified as database.table"));
  }
  TALLY_ASSIGN_OR_RETURN(
      TextRows cascading,
      conn.Query(
          absl::StrCat("SELECT CONSTRAINT_NAME, UNIQUE_CONSTRAINT_SCHEMA, "
                       "REFERENCED_TABLE_NAME, DELETE_RULE, UPDATE_RULE FROM "
                       "information_schema.REFERENTIAL_CONSTRAINTS WHERE "
                       "CONSTRAINT_SCHEMA = ",
                       conn.Quote(table.substr(0, dot)),
                       " AND TABLE_NAME = ", conn.Quote(table.substr(dot + 1)),
                       " AND (DELETE_RULE NOT IN ('RESTRICT', 'NO ACTION') OR "
                       "UPDATE_RULE NOT IN ('RESTRICT', 'NO ACTION')) ORDER BY "
                       "CONSTRAINT_NAME")));
  if (cascading.empty()) return absl::OkStatus();
  std::vector<std::string> named;
  for (const TextRow& row : cascading) {
    auto text = [&](size_t i) { return row[i].value_or(""); };
    named.push_back(absl::StrCat("foreign key ", text(0), " to ", text(1), ".",
                                 text(2), " is ON DELETE ", text(3),
                                 " ON UPDATE ", text(4)));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "table ", table, ": ", absl::StrJoin(named, "; "),
      ". MariaDB does not write the rows a cascading foreign key changes "
      "into the binary log, so tally would not see them and the peers' "
      "copies would keep the old rows: make each ON DELETE RESTRICT ON "
      "UPDATE RESTRICT (the application then changes the referencing rows "
      "itself, and those changes are logged), or do not keep ",
      table));
}

}  // namespace mariadb
}  // namespace tally
