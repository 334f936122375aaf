// `tally diff URL URL` and `tally repair URL URL --source=A|B [--dry-run]`:
// the ad-hoc comparison of tables in two PostgreSQL databases, without a
// tallyd (pg/table_diff/table_diff.h does the work; this prints).
//
// Tables: the table= parameters of the URLs or --table. One URL with tables
// (or --table) compares the same names on both sides; both URLs with tables
// pair them in order (a.t1 with b.t1', ...; the keyspace is A's name). No
// table anywhere compares every table with a primary key that the user
// can read outside pg_catalog and information_schema, and needs both
// databases to have the same such tables (a table on one side only is
// trouble, named).
//
// Output, one line per differing key then a summary line per table
// (--json: one JSON object per line, the summary last as {"summary":...}):
//   42  only in a
//   7  only in b
//   1000  differs
//   3 keys differ: table public.t, a=postgresql://u@h:5432/app (1000 rows,
//   root ...) b=... (1000 rows, root ...), 0.41 s
// Keys are printed as the key columns' text (C-escaped in text output).
//
// Exit codes as diff(1): 0 equal (repair: equal afterwards), 1 different
// (repair: still different afterwards; dry run: differences found), 2
// trouble (a schema mismatch, a missing table, a connection refused).
#ifndef TALLY_TOOLS_CLI_PG_PG_DIFF_H_
#define TALLY_TOOLS_CLI_PG_PG_DIFF_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tally {
namespace cli {

// Where a running comparison of one table is (pg::DiffProgress, in the
// CLI's words, so that this header needs no libpq).
struct PgDiffProgress {
  std::string table;
  // "hashing" (each database hashes its rows into buckets) or "reading"
  // (rows read here: every row, or the differing buckets').
  std::string step;
  uint64_t rows_read_a = 0;
  uint64_t rows_read_b = 0;
  uint64_t bytes_read_a = 0;
  uint64_t bytes_read_b = 0;
  uint64_t rows_estimated_a = 0;  // 0: unknown
  uint64_t rows_estimated_b = 0;
  uint64_t buckets_differing = 0;  // reading only some buckets; 0: all rows
  double elapsed_seconds = 0;
};

struct PgDiffOptions {
  std::string url_a;
  std::string url_b;
  std::vector<std::string> tables;  // --table
  // --columns, --exclude-columns, --where (pg/table_diff/table_diff.h).
  std::vector<std::string> columns;
  std::vector<std::string> exclude_columns;
  std::string where;
  // --transfer: "auto" or "" (chosen per table by measuring the links:
  // pg/table_diff/transfer_choice.h), "rows" (read every row of both
  // tables here), or "hashes" (block hashes computed in each database,
  // then only the rows of the buckets that differ:
  // pg/table_diff/block_hashes.h).
  std::string transfer;
  // Called about once a second while a table is compared. Optional.
  std::function<void(const PgDiffProgress&)> on_progress;
  // diff --values: under each differing key, the columns that differ with
  // their values on both sides (a row on one side only: its columns).
  bool values = false;
  bool json = false;
  // Bounds connecting and every wait on a server.
  absl::Duration timeout = absl::Seconds(30);
  // Repair: `source` is "A", "B" or one of the URLs as given.
  bool repair = false;
  std::string source;
  bool dry_run = false;
  // The process's whole command line (argv), for the `tally` binary's
  // RunPgDiff, which runs `tally-pg` with it.
  std::vector<std::string> command_line;
};

// Runs the command, printing to stdout. Returns the exit code (0 or 1), or
// the trouble (exit 2) as a one-line status without any password.
//
// Two definitions, one per binary: pg_diff.cc's runs the comparison (in
// `tally-pg`, linked against libpq); pg_diff_exec.cc's, in `tally`,
// replaces the process with `tally-pg` from the same directory, given the
// same command line, and returns only when that cannot start. So the node
// commands do not load libpq and its ~20 libraries (Kerberos, LDAP,
// GnuTLS: ~12 ms of every start), which only the URL commands use.
absl::StatusOr<int> RunPgDiff(const PgDiffOptions& options);

}  // namespace cli
}  // namespace tally

#endif  // TALLY_TOOLS_CLI_PG_PG_DIFF_H_
