#include "tools/bench/mariadb_fixture.h"

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "support/process.h"

ABSL_FLAG(std::string, pt_table_sync, "/usr/bin/pt-table-sync",
          "mariadb scenarios: the baseline's program (percona-toolkit)");
ABSL_FLAG(std::string, pt_table_checksum, "/usr/bin/pt-table-checksum",
          "mariadb-warm: the master/replica baseline's checksum program "
          "(percona-toolkit)");

namespace tally {
namespace bench {
namespace {

// The statements pt-table-sync printed.
int PrintedStatements(absl::string_view out) {
  int statements = 0;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    if (absl::StartsWith(line, "INSERT ") ||
        absl::StartsWith(line, "UPDATE ") ||
        absl::StartsWith(line, "DELETE ") ||
        absl::StartsWith(line, "REPLACE ")) {
      ++statements;
    }
  }
  return statements;
}

}  // namespace

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
      // --no-check-slave: B may also be A's replica (mariadb-warm); the
      // tool only prints.
      {absl::GetFlag(FLAGS_pt_table_sync), "--print", "--no-check-slave",
       absl::StrCat("h=127.0.0.1,P=", a.port(), ",u=root,D=db1,t=t"),
       absl::StrCat("h=127.0.0.1,P=", b.port(), ",u=root,D=db1,t=t")},
      absl::Minutes(30));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const int statements = PrintedStatements(r.out);
  // Its exit status is 2 when a table differed.
  if (r.exit_code != 2 || statements != 100) {
    return absl::InternalError(
        absl::StrCat("pt-table-sync exited ", r.exit_code, " with ", statements,
                     " statements (expected 100): ", r.err.substr(0, 500)));
  }
  return seconds;
}

absl::Status MakeMariaReplica(testing::MariaDbServer& master,
                              testing::MariaDbServer& replica,
                              const std::string& do_table) {
  absl::StatusOr<std::string> position =
      master.Execute("SELECT @@gtid_binlog_pos");
  if (!position.ok()) return position.status();
  return MariaExec(
      replica,
      absl::StrFormat("SET GLOBAL replicate_do_table = '%s'; SET GLOBAL "
                      "gtid_slave_pos = '%s'; CHANGE MASTER TO MASTER_HOST = "
                      "'127.0.0.1', MASTER_PORT = %d, MASTER_USER = 'root', "
                      "MASTER_USE_GTID = slave_pos; START SLAVE",
                      do_table, *position, master.port()));
}

absl::StatusOr<PerconaTimes> TimePtTableChecksumAndSync(
    testing::MariaDbServer& master, const testing::MariaDbServer& replica) {
  // The replica is found through a DSN table (its processlist host has
  // no port to connect to); the checksums of the last run are replaced.
  absl::Status s = MariaExec(
      master,
      absl::StrCat("CREATE DATABASE IF NOT EXISTS percona; CREATE TABLE IF "
                   "NOT EXISTS percona.dsns (id int AUTO_INCREMENT PRIMARY "
                   "KEY, parent_id int, dsn varchar(255) NOT NULL); DELETE "
                   "FROM percona.dsns; INSERT INTO percona.dsns (dsn) VALUES "
                   "('h=127.0.0.1,P=",
                   replica.port(), ",u=root')"));
  if (!s.ok()) return s;
  const std::string master_dsn =
      absl::StrCat("h=127.0.0.1,P=", master.port(), ",u=root");
  PerconaTimes times;
  absl::Time start = absl::Now();
  const testing::CommandResult checked = testing::RunCommand(
      {absl::GetFlag(FLAGS_pt_table_checksum), "--databases=db1", "--tables=t",
       "--replicate=percona.checksums", "--no-check-binlog-format",
       "--no-check-replication-filters",
       "--recursion-method=dsn=D=percona,t=dsns", master_dsn},
      absl::Minutes(30));
  times.checksum_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  // Its exit status has bit 16 set when a chunk differed; the DIFFS column
  // of its table line says how many.
  for (absl::string_view line : absl::StrSplit(checked.out, '\n')) {
    std::vector<absl::string_view> f =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() >= 9 && f.back() == "db1.t") {
      (void)absl::SimpleAtoi(f[2], &times.differing_chunks);
    }
  }
  if (checked.exit_code != 16 || times.differing_chunks == 0) {
    return absl::InternalError(absl::StrCat(
        "pt-table-checksum exited ", checked.exit_code, " with ",
        times.differing_chunks, " differing chunks (expected some): ",
        checked.out.substr(0, 500), checked.err.substr(0, 500)));
  }
  start = absl::Now();
  const testing::CommandResult synced = testing::RunCommand(
      {absl::GetFlag(FLAGS_pt_table_sync), "--replicate=percona.checksums",
       "--sync-to-master", "--print", "--databases=db1", "--tables=t",
       absl::StrCat("h=127.0.0.1,P=", replica.port(), ",u=root")},
      absl::Minutes(30));
  times.sync_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const int statements = PrintedStatements(synced.out);
  if (synced.exit_code != 2 || statements != 100) {
    return absl::InternalError(absl::StrCat(
        "pt-table-sync --replicate exited ", synced.exit_code, " with ",
        statements, " statements (expected 100): ", synced.out.substr(0, 500),
        synced.err.substr(0, 500)));
  }
  return times;
}

}  // namespace bench
}  // namespace tally
