#include "tools/bench/mariadb_fixture.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace tally {
namespace bench {

absl::Status MariaExec(testing::MariaDbServer& db, const std::string& sql) {
  absl::StatusOr<std::string> r = db.Execute(sql);
  return r.status();
}

absl::Status FillMariaTable(testing::MariaDbServer& db, uint64_t rows) {
  return MariaExec(
      db, absl::StrCat("CREATE DATABASE IF NOT EXISTS db1; DROP TABLE IF "
                       "EXISTS db1.t; CREATE TABLE db1.t (id bigint PRIMARY "
                       "KEY, a int, b varchar(40), c datetime(6)); INSERT "
                       "INTO db1.t SELECT seq, seq, MD5(seq), TIMESTAMP "
                       "'2026-01-01 00:00:00' + INTERVAL seq SECOND FROM "
                       "db1.seq_1_to_",
                       rows, "; ANALYZE TABLE db1.t"));
}

}  // namespace bench
}  // namespace tally
