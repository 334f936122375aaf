// The ad-hoc diff and repair of two PostgreSQL tables, without a daemon:
// what `tally diff URL URL` and `tally repair URL URL --source=A` run.
//
//   TALLY_ASSIGN_OR_RETURN(TableDiff d,
//                          DiffTables(*conn_a, *conn_b, "public.t",
//                          "public.t"));
//   for (const RowDifference& r : d.differences) Print(r.key, r.in_a, r.in_b);
//   TALLY_ASSIGN_OR_RETURN(RepairCounts c,
//                          RepairTable(*conn_a, d.schema, *conn_b,
//                                      d.schema_b, keys));
//   TALLY_ASSIGN_OR_RETURN(std::vector<std::string> left,
//                          StillDifferent(*conn_a, d.schema, *conn_b,
//                                         d.schema_b, keys));
//
// The diff reads both schemas first (each side in a REPEATABLE READ
// transaction, so the scan reads the table the schema describes) and
// refuses two tables whose fingerprints differ, naming the difference;
// then it scans both tables at once, one thread per side
// (pg/table_diff/table_scan.h), compares the 2^12 leaf digests, and compares
// row by row only the rows of the leaves that differ. The differing keys are
// exact: every key whose row is absent on one side or whose digest differs, and
// no other.
//
// The repair makes the target's rows at the given keys what the source
// holds now (it re-reads them, so a row the source changed since the scan
// is copied as it is now): rows the source has are upserted from the
// source's canonical bytes (binary COPY into a temporary table, then
// INSERT ... ON CONFLICT (primary key) DO UPDATE), rows it lacks are
// deleted on the target, all in one transaction. It does not lock either
// table: an application writing the same rows during a repair can leave
// them different, which StillDifferent then reports.
//
// Each side keeps its own schema: the fingerprints agree, but the OIDs of
// user types differ between databases, and the canonical bytes get each
// database's own OIDs back before they reach it (pg/schema/row_codec.h).
//
// Thread-safety: the functions use only the connections given, and
// DiffTables runs one thread per connection.
#ifndef TALLY_PG_TABLE_DIFF_TABLE_DIFF_H_
#define TALLY_PG_TABLE_DIFF_TABLE_DIFF_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "pg/schema/table_schema.h"
#include "pg/table_diff/table_scan.h"
#include "pg/wire/connection.h"
#include "tree/digest.h"

namespace tally {
namespace pg {

// One key whose rows differ. Both `in_a` and `in_b`: the values differ.
struct RowDifference {
  std::string key;  // canonical key bytes (pg/schema/row_codec.h)
  bool in_a = false;
  bool in_b = false;
};

// The differences between two scans of one keyspace, sorted by (token,
// key): the keys whose row is in one scan only or whose digests differ.
std::vector<RowDifference> CompareScans(const TableScan& a, const TableScan& b);

// What of two tables a diff compares: some columns (the key columns
// always; `columns` empty: all), not `exclude_columns`, and only the rows
// for which the SQL condition `where` holds on each side (empty: all). A
// repair of such a diff writes only the compared columns: a row it inserts
// takes the others' defaults, a row it updates keeps its own.
struct RowScope {
  std::vector<std::string> columns;
  std::vector<std::string> exclude_columns;
  std::string where;
};

// How a diff learns which rows differ.
enum class Transfer {
  // Every row of both tables is read here (binary COPY) and digested: the
  // fastest where the databases are near (a LAN).
  kRows,
  // Block hashes computed in each database first
  // (pg/table_diff/block_hashes.h), then only the rows of the buckets that
  // differ are read: for databases far away, whose rows would cross a slow
  // link.
  kBlockHashes,
};

// Where a running DiffTables is, for a progress line.
struct DiffProgress {
  enum class Step {
    kHashing,  // block hashes: each database hashes its rows (one query)
    kReading,  // rows read here: every row, or the differing buckets'
  };
  Step step = Step::kReading;
  // Rows and bytes read in this step so far (kReading), and the tables'
  // row estimates (pg_class.reltuples + 5%; 0 when unknown).
  uint64_t rows_read_a = 0;
  uint64_t rows_read_b = 0;
  uint64_t bytes_read_a = 0;
  uint64_t bytes_read_b = 0;
  uint64_t rows_estimated_a = 0;
  uint64_t rows_estimated_b = 0;
  // How many buckets are read in a kReading step of a block-hash diff (0:
  // every row is read).
  uint64_t buckets_differing = 0;
  absl::Duration elapsed;  // since DiffTables began
};
using DiffProgressFn = std::function<void(const DiffProgress&)>;

struct TableDiff {
  // The keyspace the rows were digested under: table A's qualified name.
  std::string keyspace;
  // A's schema, and B's (same fingerprint; its own type OIDs).
  TableSchema schema;
  TableSchema schema_b;
  uint64_t rows_a = 0;
  uint64_t rows_b = 0;
  // The roots of the whole tables (kRows only: a block-hash diff reads
  // only some rows, and leaves them zero).
  tree::Digest128 root_a;
  tree::Digest128 root_b;
  std::vector<RowDifference> differences;
  Transfer transfer = Transfer::kRows;
  // kBlockHashes: the buckets, and how many differed.
  uint64_t buckets = 0;
  uint64_t buckets_differing = 0;
  // What was read from each database: rows, and bytes of the answers
  // (block hashes and COPY streams).
  uint64_t rows_read_a = 0;
  uint64_t rows_read_b = 0;
  uint64_t bytes_read_a = 0;
  uint64_t bytes_read_b = 0;
};

// Compares table `table_a` of `a`'s database with `table_b` of `b`'s,
// within `scope` (its columns and condition apply to both; the schemas'
// fingerprints cover the compared columns only).
// Returns kFailedPrecondition naming the difference when the two schemas'
// fingerprints differ ("schemas of public.t differ: column a: integer in
// a, bigint in b"); the TableSchema::Read errors (kNotFound for a missing
// table, kFailedPrecondition for one without a primary key) and
// TableSchema::WithColumns's (kInvalidArgument) prefixed with the side;
// kInvalidArgument for a `where` holding ';' (one statement per scan); a
// connection's error (a `where` PostgreSQL refuses among them).
// REQUIRES: no transaction open on either connection; `a` and `b` are
// different connections.
// With Transfer::kBlockHashes, also kFailedPrecondition for a server
// older than PostgreSQL 14. `progress`, when set, is called about once a
// second from the calling thread while the databases work.
absl::StatusOr<TableDiff> DiffTables(Connection& a, Connection& b,
                                     absl::string_view table_a,
                                     absl::string_view table_b,
                                     const RowScope& scope = {},
                                     Transfer transfer = Transfer::kRows,
                                     const DiffProgressFn& progress = nullptr);

struct RepairCounts {
  uint64_t upserted = 0;  // rows inserted or updated on the target
  uint64_t deleted = 0;   // rows deleted on the target
};

// Makes the target's rows at `keys` equal to the source's, in one
// transaction on the target (see the file comment). Returns the
// connection's error; the target is then unchanged.
// REQUIRES: `source_schema` and `target_schema` were read from the two
// databases and have the same fingerprint; no transaction open on either
// connection.
absl::StatusOr<RepairCounts> RepairTable(Connection& source,
                                         const TableSchema& source_schema,
                                         Connection& target,
                                         const TableSchema& target_schema,
                                         absl::Span<const std::string> keys);

// The target half of RepairTable: makes the target's rows at `keys` what
// `rows` holds (canonical rows, as ReadRowsByKey returns them, from any
// database whose table has the target's fingerprint; a key without a row
// is deleted), in one transaction. Returns the connection's error; the
// target is then unchanged.
// REQUIRES: no transaction open on `target`.
absl::StatusOr<RepairCounts> WriteRows(Connection& target,
                                       const TableSchema& target_schema,
                                       absl::Span<const std::string> keys,
                                       absl::Span<const CanonicalRow> rows);

// Re-reads the rows at `keys` on both sides and returns the keys whose
// rows still differ (in the order of `keys`): the check of a repair
// without another full scan.
// REQUIRES as RepairTable.
absl::StatusOr<std::vector<std::string>> StillDifferent(
    Connection& a, const TableSchema& schema_a, Connection& b,
    const TableSchema& schema_b, absl::Span<const std::string> keys);

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_TABLE_DIFF_TABLE_DIFF_H_
