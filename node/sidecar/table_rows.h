// TableRows: `tally get/put/del` for the tables of a sidecar.
//
// A table's keyspace holds canonical row bytes (pg/schema/row_codec.h)
// nobody can type, so the operator addresses a row by its primary key as
// text, one value per key column in key order, and reads and writes it as
// JSON of column -> value:
//
//   std::unique_ptr<TableRows> rows =
//       NewPostgresTableRows(config.postgres, config.tables);
//   rows->Get("public.users", {"42"})            -> {"id":"42","name":"Ada"}
//   rows->Put("public.users", {"42"}, R"({"name":"Grace"})")
//   rows->Delete("public.users", {"42"})
//
// A put or delete is an ordinary write on a plain connection (not marked as
// tally's own): capture indexes it like any application write, stamps its
// version and sends it to the peers. A put sets the columns the JSON names
// (the database converts each value from its text, so a value reads as the
// database would read it), the key columns taken from the key values;
// columns the JSON leaves out keep their value (or their default, for a
// new row). A get reads the row as it is in the table now, which may be
// ahead of the index.
//
// Each call opens its own connection (operator commands, not a data path),
// so calls run in parallel and nothing is held between them. Two
// implementations: node/sidecar/postgres_table_rows.h and
// node/sidecar/mariadb_table_rows.h.
//
// Thread-safe.
#ifndef TALLY_NODE_SIDECAR_TABLE_ROWS_H_
#define TALLY_NODE_SIDECAR_TABLE_ROWS_H_

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tally {
namespace node {

class TableRows {
 public:
  // `tables`: the configured tables, validated by node/config/config.h.
  explicit TableRows(std::vector<std::string> tables)
      : tables_(std::move(tables)) {}
  virtual ~TableRows() = default;
  TableRows(const TableRows&) = delete;
  TableRows& operator=(const TableRows&) = delete;

  // True when `keyspace` is one of the configured tables.
  bool Holds(absl::string_view keyspace) const {
    return std::find(tables_.begin(), tables_.end(), keyspace) != tables_.end();
  }

  // The row with primary key `key` as a JSON object of column -> text value
  // (null for NULL). kNotFound "no row ..." when absent; kInvalidArgument
  // when `key` has not one value per key column or a value is not of its
  // column's type; kFailedPrecondition for a table without a primary key;
  // the database's errors otherwise (kUnavailable when it cannot be
  // reached). REQUIRES: Holds(keyspace).
  virtual absl::StatusOr<std::string> Get(
      absl::string_view keyspace,
      const std::vector<std::string>& key) const = 0;

  // Inserts or updates the row with primary key `key`, setting the columns
  // `json` (an object of column -> value) names. kInvalidArgument for JSON
  // that is not an object, a column the table lacks, a key column whose
  // JSON value differs from `key`, a value the database cannot convert, or
  // a constraint the row breaks. REQUIRES: Holds(keyspace).
  virtual absl::Status Put(absl::string_view keyspace,
                           const std::vector<std::string>& key,
                           absl::string_view json) const = 0;

  // Deletes the row with primary key `key`; kNotFound when there is none.
  // REQUIRES: Holds(keyspace).
  virtual absl::Status Delete(absl::string_view keyspace,
                              const std::vector<std::string>& key) const = 0;

 private:
  // Constant after construction.
  const std::vector<std::string> tables_;
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_SIDECAR_TABLE_ROWS_H_
