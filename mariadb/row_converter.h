// RowConverter: a row of MariaDB values (a scan's, a read by key's, a
// binary log image's) turned into the canonical fields of its table's
// canonical columns (pg/schema/row_codec.h), ready for RowCodec::Encode or
// a digest.
//
//   RowConverter c = table.converter();             // rows of select_list()
//   TALLY_ASSIGN_OR_RETURN(absl::Span<const pg::Field> fields,
//                          c.Convert(row));
//   codec.Encode(fields, &key, &value);
//
// A row may list its columns in another order, or hold columns the
// canonical row leaves out (a binary log image has every column, generated
// ones included): `positions` says where each canonical column is.
//
// Thread-compatible: Convert reuses one buffer; the fields it returns
// point into it until the next call.
#ifndef TALLY_MARIADB_ROW_CONVERTER_H_
#define TALLY_MARIADB_ROW_CONVERTER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "mariadb/column_mapping.h"
#include "mariadb/connection.h"
#include "pg/wire/field.h"

namespace tally {
namespace mariadb {

class RowConverter {
 public:
  // `mappings[i]` and `names[i]` are canonical column i's; `positions[i]`
  // its index in the rows given to Convert. `table` names the table in
  // errors. REQUIRES: the three have the same size.
  RowConverter(std::string table, std::vector<ColumnMapping> mappings,
               std::vector<std::string> names, std::vector<size_t> positions);

  // The canonical fields of `row`. Returns kInvalidArgument for a row too
  // short for the positions, and AppendCanonical's error (kOutOfRange for a
  // value PostgreSQL cannot hold) prefixed with the table and column.
  absl::StatusOr<absl::Span<const pg::Field>> Convert(
      absl::Span<const Value> row);

  size_t columns() const { return mappings_.size(); }

 private:
  std::string table_;
  std::vector<ColumnMapping> mappings_;
  std::vector<std::string> names_;
  std::vector<size_t> positions_;
  std::string buffer_;
  std::vector<size_t> ends_;
  std::vector<bool> nulls_;
  std::vector<pg::Field> fields_;
};

}  // namespace mariadb
}  // namespace tally

#endif  // TALLY_MARIADB_ROW_CONVERTER_H_
