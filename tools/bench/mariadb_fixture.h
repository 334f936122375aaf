// What the MariaDB scenarios of tally-bench share: the benchmark table in
// a throwaway server (support/mariadb_server.h), filled the same way for
// every scenario so that their figures describe the same rows.
//
//   testing::MariaDbServerOptions options;
//   options.options = {"--innodb-buffer-pool-size=1G"};
//   TALLY_ASSIGN_OR_RETURN(std::unique_ptr<testing::MariaDbServer> db,
//                          testing::MariaDbServer::Start(options));
//   TALLY_RETURN_IF_ERROR(FillMariaTable(*db, 1000000));
//
// The table is db1.t(id bigint primary key, a int, b varchar(40), c
// datetime(6)), ids 1..rows, filled from the sequence engine's
// seq_1_to_N (one INSERT ... SELECT, so the binary log holds it as one
// transaction).
#ifndef TALLY_TOOLS_BENCH_MARIADB_FIXTURE_H_
#define TALLY_TOOLS_BENCH_MARIADB_FIXTURE_H_

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "support/mariadb_server.h"

ABSL_DECLARE_FLAG(std::string, pt_table_sync);
ABSL_DECLARE_FLAG(std::string, pt_table_checksum);

namespace tally {
namespace bench {

// Runs `sql` (one or more statements) with the mariadb client as root,
// discarding its output.
absl::Status MariaExec(testing::MariaDbServer& db, const std::string& sql);

// The 100 differences on db1.t filled with `rows` rows: 40 updates, 30
// deletes, 30 inserts, spread over the table.
absl::Status DifferMaria(testing::MariaDbServer& db, uint64_t rows);

// Times `pt-table-sync --print A B` on db1.t (--pt_table_sync); kInternal
// unless it prints exactly 100 statements (the differences DifferMaria
// makes).
absl::StatusOr<double> TimePtTableSync(const testing::MariaDbServer& a,
                                       const testing::MariaDbServer& b);

// Makes `replica` (started with a server_id of its own) a GTID replica of
// `master` from the master's position now, replicating `do_table` only
// when not empty.
absl::Status MakeMariaReplica(testing::MariaDbServer& master,
                              testing::MariaDbServer& replica,
                              const std::string& do_table = "");

// Percona's master/replica workflow on db1.t, timed in its two steps:
// `pt-table-checksum` on the master (chunk checksums computed on the
// master and, through statement-based replication, by the replica;
// --pt_table_checksum), then `pt-table-sync --replicate --sync-to-master
// --print` on the replica (the rows of the chunks that differ).
// kInternal unless the checksum finds differing chunks and the sync prints
// exactly 100 statements.
struct PerconaTimes {
  double checksum_seconds = 0;
  double sync_seconds = 0;
  int differing_chunks = 0;
};
absl::StatusOr<PerconaTimes> TimePtTableChecksumAndSync(
    testing::MariaDbServer& master, const testing::MariaDbServer& replica);

// (Re)creates db1.t with `rows` rows (ids 1..rows) and analyzes it, so that
// information_schema's row estimate is close.
absl::Status FillMariaTable(testing::MariaDbServer& db, uint64_t rows);

}  // namespace bench
}  // namespace tally

#endif  // TALLY_TOOLS_BENCH_MARIADB_FIXTURE_H_
