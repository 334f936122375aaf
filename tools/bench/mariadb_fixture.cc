#include "tools/bench/mariadb_fixture.h"

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "support/process.h"

ABSL_FLAG(std::string, pt_table_sync, "/usr/bin/pt-table-sync",
          "mariadb scenarios: the baseline's program (percona-toolkit)");

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

absl::Status DifferMaria(testing::MariaDbServer& db, uint64_t rows) {
  const uint64_t step = rows / 100;
  return MariaExec(
      db, absl::StrCat("UPDATE db1.t SET a = -a WHERE id IN (SELECT 1 + seq * ",
                       step,
                       " FROM db1.seq_0_to_39); DELETE FROM db1.t WHERE "
                       "id IN (SELECT 2 + seq * ",
                       step,
                       " FROM db1.seq_40_to_69); INSERT INTO db1.t "
                       "SELECT ",
                       rows, " + seq, 0, 'new', NOW(6) FROM db1.seq_1_to_30"));
}

absl::StatusOr<double> TimePtTableSync(const testing::MariaDbServer& a,
                                       const testing::MariaDbServer& b) {
  const absl::Time start = absl::Now();
  const testing::CommandResult r = testing::RunCommand(
      {absl::GetFlag(FLAGS_pt_table_sync), "--print",
       absl::StrCat("h=127.0.0.1,P=", a.port(), ",u=root,D=db1,t=t"),
       absl::StrCat("h=127.0.0.1,P=", b.port(), ",u=root,D=db1,t=t")},
      absl::Minutes(30));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  int statements = 0;
  for (absl::string_view line : absl::StrSplit(r.out, '\n')) {
    if (absl::StartsWith(line, "INSERT ") ||
        absl::StartsWith(line, "UPDATE ") ||
        absl::StartsWith(line, "DELETE ") ||
        absl::StartsWith(line, "REPLACE ")) {
      ++statements;
    }
  }
  // Its exit status is 2 when a table differed.
  if (r.exit_code != 2 || statements != 100) {
    return absl::InternalError(
        absl::StrCat("pt-table-sync exited ", r.exit_code, " with ", statements,
                     " statements (expected 100): ", r.err.substr(0, 500)));
  }
  return seconds;
}

}  // namespace bench
}  // namespace tally
