#include "mariadb/sidecar/tally_tables.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "tree/status_macros.h"

namespace tally {
namespace mariadb {

absl::Status EnsureTallyTable(Connection& conn, absl::string_view table,
                              absl::string_view columns,
                              absl::string_view purpose) {
  const std::string name =
      absl::StrCat(QuoteIdentifier(kTallySchema), ".", QuoteIdentifier(table));
  TALLY_ASSIGN_OR_RETURN(
      TextRows present,
      conn.Query(absl::StrCat(
          "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = ",
          conn.Quote(kTallySchema), " AND TABLE_NAME = ", conn.Quote(table))));
  if (!present.empty()) return absl::OkStatus();
  absl::Status s = conn.Exec(absl::StrCat("CREATE DATABASE IF NOT EXISTS ",
                                          QuoteIdentifier(kTallySchema)));
  const std::string create =
      absl::StrCat("CREATE TABLE IF NOT EXISTS ", name, " (", columns,
                   ") ENGINE=InnoDB DEFAULT CHARSET utf8mb4");
  if (s.ok()) s = conn.Exec(create);
  if (absl::IsPermissionDenied(s)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot create ", purpose, " ", name, " in ", conn.display(),
        ": the user needs CREATE on `", kTallySchema, "` (or create it: ",
        create, ") and SELECT, INSERT, UPDATE on it: ", s.message()));
  }
  return s;
}

}  // namespace mariadb
}  // namespace tally
