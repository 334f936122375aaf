// MariaDbTable: what tally knows of one MariaDB (or MySQL) table — its
// schema in PostgreSQL's canonical terms, so that its rows digest and
// compare exactly as a PostgreSQL table's do (mariadb/column_mapping.h) —
// and the reads a diff and a repair make of it.
//
//   TALLY_ASSIGN_OR_RETURN(MariaDbTable t, MariaDbTable::Read(conn, "db1.t"));
//   t.schema().fingerprint();  // equal to the PostgreSQL table's when the
//                              // columns map
//   TALLY_ASSIGN_OR_RETURN(pg::TableScan scan, t.Scan(conn, "db1.t", ""));
//
// A keyspace is named "database.table". Generated columns are left out (as
// for PostgreSQL: each database computes its own).
//
// Thread-safety: an immutable value once read; the reads use only the
// connection given.
#ifndef TALLY_MARIADB_TABLE_H_
#define TALLY_MARIADB_TABLE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "mariadb/column_mapping.h"
#include "mariadb/connection.h"
#include "mariadb/row_converter.h"
#include "pg/schema/table_schema.h"
#include "pg/table_diff/table_scan.h"

namespace tally {
namespace mariadb {

class MariaDbTable {
 public:
  // Reads table `qualified_name` ("database.table") from
  // information_schema. Returns kInvalidArgument for a name without a
  // database; kNotFound when there is no such base table;
  // kFailedPrecondition for a table without a primary key, and for columns
  // that do not map, naming every one of them and why
  // (mariadb/column_mapping.h); a connection's error otherwise.
  static absl::StatusOr<MariaDbTable> Read(Connection& conn,
                                           absl::string_view qualified_name);

  // The schema as PostgreSQL would describe the same table declared with
  // the mapped types: columns in canonical order, fingerprint.
  const pg::TableSchema& schema() const { return *schema_; }
  // Per canonical column, its mapping.
  absl::Span<const ColumnMapping> mappings() const { return mappings_; }
  // `db`.`t`.
  const std::string& quoted_name() const { return quoted_name_; }
  // The quoted column names in canonical order, comma separated.
  const std::string& select_list() const { return select_list_; }
  // information_schema.TABLES.TABLE_ROWS (InnoDB's estimate), 0 unknown.
  uint64_t estimated_rows() const { return estimated_rows_; }

  // Reads every row (for which the SQL condition `where` holds, when not
  // empty) and digests it under `keyspace`, as pg::TableScan::Run digests
  // a PostgreSQL row. Returns the connection's error, or the value's
  // (kOutOfRange) naming the column, for a value PostgreSQL cannot hold.
  absl::StatusOr<pg::TableScan> Scan(Connection& conn,
                                     absl::string_view keyspace,
                                     absl::string_view where,
                                     pg::ScanCounters* counters) const;

  // Hands every row (for which the SQL condition `where` holds, when not
  // empty) to `fn` as canonical fields, in the connection's transaction
  // when one is open (a consistent snapshot). Errors as Scan's, or `fn`'s.
  absl::Status ForEachRow(
      Connection& conn, absl::string_view where,
      const std::function<absl::Status(absl::Span<const pg::Field>)>& fn) const;

  // The converter of rows read as select_list() lists the columns.
  RowConverter converter() const;
  // The converter of rows whose columns are `row_columns`, in that order
  // (a binary log image's, by the names its TABLE_MAP carries). Returns
  // kFailedPrecondition when a canonical column is missing from them or
  // they hold a column the table did not have (other than a generated
  // one): the table changed since it was read.
  absl::StatusOr<RowConverter> ConverterFor(
      absl::Span<const std::string> row_columns) const;

  // The rows at `keys` (canonical key bytes), as canonical key and value
  // bytes; absent keys are not returned.
  absl::StatusOr<std::vector<pg::CanonicalRow>> ReadRowsByKey(
      Connection& conn, absl::Span<const std::string> keys) const;

  // The canonical fields of `bytes` (a canonical key, or key + value as
  // RowCodec encodes them) as text, one per column: the key columns' for a
  // key; nullopt for NULL.
  absl::StatusOr<std::vector<std::optional<std::string>>> KeyTexts(
      absl::string_view key) const;

  // Makes the rows at `keys` what `rows` holds (canonical rows, as
  // ReadRowsByKey returns; a key without a row is deleted), in one
  // transaction: REPLACE-free upserts (INSERT ... ON DUPLICATE KEY UPDATE)
  // and DELETEs by key. Returns the rows written and deleted, or the
  // server's error (a row it refuses) with nothing changed.
  struct WriteCounts {
    uint64_t upserted = 0;
    uint64_t deleted = 0;
  };
  absl::StatusOr<WriteCounts> WriteRows(
      Connection& conn, absl::Span<const std::string> keys,
      absl::Span<const pg::CanonicalRow> rows) const;

  // The WHERE condition that picks the row at canonical key `key`:
  // "(`id` = 5 AND `tag` = 'eu')". Returns kDataLoss (or the value's
  // error, naming the column) for bytes that are not a key of this table.
  absl::StatusOr<std::string> KeyCondition(Connection& conn,
                                           absl::string_view key) const;
  // Column `column`'s canonical bytes `field` as a SQL literal for this
  // table ("NULL", "42", X'00ff', 'text' quoted for `conn`'s session).
  // Returns the error of CanonicalText naming the table and column for
  // bytes MariaDB cannot take as that column's value.
  absl::StatusOr<std::string> Literal(Connection& conn, size_t column,
                                      const pg::Field& field) const;

 private:
  MariaDbTable() = default;

  std::optional<pg::TableSchema> schema_;
  std::vector<ColumnMapping> mappings_;
  std::string quoted_name_;
  std::string select_list_;
  uint64_t estimated_rows_ = 0;
  // Generated columns: in the table's rows, not in the canonical row.
  std::vector<std::string> left_out_;
};

}  // namespace mariadb
}  // namespace tally

#endif  // TALLY_MARIADB_TABLE_H_
