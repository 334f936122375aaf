// TableRows: `tally get/put/del` for the tables of a sidecar to PostgreSQL.
//
// A PostgreSQL table's keyspace holds canonical row bytes
// (pg/schema/row_codec.h) nobody can type, so the operator addresses a row by
// its primary key as text, one value per key column in key order, and reads and
// writes it as JSON of column -> value:
//
//   TableRows rows(config.postgres, config.tables);
//   rows.Get("public.users", {"42"})            -> {"id":"42","name":"Ada"}
//   rows.Put("public.users", {"42"}, R"({"name":"Grace"})")
//   rows.Delete("public.users", {"42"})
//
// A put or delete is an ordinary PostgreSQL write on a plain connection
// (not under tally's replication origin): capture indexes it like any
// application write, stamps its version and sends it to the peers. A put
// is `INSERT ... ON CONFLICT (key) DO UPDATE` of the columns the JSON names
// (json_populate_record does the text-to-type conversion, so a value reads
// as PostgreSQL would read it), the key columns taken from the key values;
// columns the JSON leaves out keep their value (or their default, for a new
// row). A get reads the row as it is in the table now, which may be ahead
// of the index.
//
// Each call opens its own connection (operator commands, not a data path),
// so calls run in parallel and nothing is held between them.
//
// Thread-safe.
#ifndef TALLY_NODE_SIDECAR_TABLE_ROWS_H_
#define TALLY_NODE_SIDECAR_TABLE_ROWS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tally {
namespace node {

class TableRows {
 public:
  // `conninfo`: the node's database (libpq string or URL); `tables`: the
  // configured tables ("schema.table", validated by node/config/config.h).
  TableRows(std::string conninfo, std::vector<std::string> tables);
  TableRows(const TableRows&) = delete;
  TableRows& operator=(const TableRows&) = delete;

  // True when `keyspace` is one of the configured tables.
  bool Holds(absl::string_view keyspace) const;

  // The row with primary key `key` as a JSON object of column -> text value
  // (null for NULL), columns in table order. kNotFound "no row ..." when
  // absent; kInvalidArgument when `key` has not one value per key column or
  // a value is not of its column's type; the database's errors otherwise
  // (kUnavailable when it cannot be reached).
  // REQUIRES: Holds(keyspace).
  absl::StatusOr<std::string> Get(absl::string_view keyspace,
                                  const std::vector<std::string>& key) const;

  // Inserts or updates the row with primary key `key`, setting the columns
  // `json` (an object of column -> value) names. kInvalidArgument for JSON
  // that is not an object, a column the table lacks, a key column whose
  // JSON value differs from `key`, a value PostgreSQL cannot convert, or a
  // constraint the row breaks. REQUIRES: Holds(keyspace).
  absl::Status Put(absl::string_view keyspace,
                   const std::vector<std::string>& key,
                   absl::string_view json) const;

  // Deletes the row with primary key `key`; kNotFound when there is none.
  // REQUIRES: Holds(keyspace).
  absl::Status Delete(absl::string_view keyspace,
                      const std::vector<std::string>& key) const;

 private:
  // Constant after construction.
  const std::string conninfo_;
  const std::vector<std::string> tables_;
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_SIDECAR_TABLE_ROWS_H_
