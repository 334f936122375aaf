// The canonical bytes of a PostgreSQL row as a tally row (PG-DESIGN §2.2).
//
// A table's row becomes a tally key and value, both in one framing: for
// each column, a u32 big-endian length (0xFFFFFFFF for NULL) followed by
// the column's binary send() bytes (what binary COPY and pgoutput's binary
// mode carry). The key frames the primary-key columns, in primary-key
// order; the value frames the other columns. The token is tally's usual
// TokenOf(key), the digest its usual RowDigest over these bytes: an
// embedded node that stores the same bytes diffs equal with a PostgreSQL
// node.
//
// The canonical column order is defined here and only here
// (CanonicalColumnOrder): the primary-key columns in primary-key order,
// then every other column sorted by name, bytewise. Neither the physical
// column order (attnum, which ALTER TABLE and dump/restore change) nor a
// configured list enters it, so two databases with the same columns under
// the same names encode every row alike. Everything that reads or writes
// rows (the SELECT list of scans, the capture, the apply) lists columns in
// this order.
//
//   RowCodec codec(/*key_columns=*/1, /*value_columns=*/3);
//   std::string key, value;
//   TALLY_RETURN_IF_ERROR(codec.Encode(fields, &key, &value));  // COPY row
//   std::vector<Field> back;
//   TALLY_RETURN_IF_ERROR(codec.Decode(key, value, &back));     // apply
//
// Type caveat: the send() bytes of arrays and composites of user-defined
// types embed per-database type OIDs (PG-DESIGN §1.6), so such columns
// encode differently in two databases; they are not rewritten here.
//
// Thread-safety: pure functions and an immutable value type.
#ifndef TALLY_PG_ROW_CODEC_H_
#define TALLY_PG_ROW_CODEC_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "pg/field.h"

namespace tally {
namespace pg {

// The length that marks a NULL field.
inline constexpr uint32_t kNullFieldLength = 0xffffffffu;

// Returns the canonical order of a table's columns, as indexes into
// `column_names`: `primary_key` (indexes into `column_names`, in key order)
// first, then the remaining columns sorted by name (byte order, whatever
// the database's collation). Returns kInvalidArgument when the key is
// empty, names a column twice or out of range, or two columns share a
// name.
absl::StatusOr<std::vector<size_t>> CanonicalColumnOrder(
    absl::Span<const std::string> column_names,
    absl::Span<const size_t> primary_key);

// Appends `fields` in the framing above.
void AppendFields(absl::Span<const Field> fields, std::string* out);

// Appends to `fields` the fields framed in `bytes`, which must hold
// exactly `count` of them. The fields point into `bytes`. Returns
// kInvalidArgument (naming the field and offset) when `bytes` is truncated,
// holds more or fewer fields, or has a length that runs past its end;
// `fields` is then unchanged.
absl::Status DecodeFields(absl::string_view bytes, size_t count,
                          std::vector<Field>* fields);

// The encoding of one table's rows: how many of the canonical columns form
// the key and how many the value.
class RowCodec {
 public:
  RowCodec(size_t key_columns, size_t value_columns)
      : key_columns_(key_columns), value_columns_(value_columns) {}

  size_t key_columns() const { return key_columns_; }
  size_t value_columns() const { return value_columns_; }
  size_t columns() const { return key_columns_ + value_columns_; }

  // Encodes one row whose fields are in canonical order (a row of a COPY
  // of the canonical SELECT list). Replaces `*key` and `*value`. A table
  // with no non-key column has an empty value. Returns kInvalidArgument
  // when `fields` is not key_columns() + value_columns() long.
  absl::Status Encode(absl::Span<const Field> fields, std::string* key,
                      std::string* value) const;

  // Encodes only the key, from the key columns' fields (a pgoutput 'K'
  // tuple, a key the user typed). Returns kInvalidArgument when
  // `key_fields` is not key_columns() long.
  absl::Status EncodeKey(absl::Span<const Field> key_fields,
                         std::string* key) const;

  // Replaces `*fields` with the canonical fields of the row `key`,
  // `value` encode (pointing into them). Returns kInvalidArgument when
  // either is not the encoding of this codec's columns.
  absl::Status Decode(absl::string_view key, absl::string_view value,
                      std::vector<Field>* fields) const;

  // Replaces `*fields` with the key columns' fields of `key`.
  absl::Status DecodeKey(absl::string_view key,
                         std::vector<Field>* fields) const;

 private:
  size_t key_columns_;
  size_t value_columns_;
};

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_ROW_CODEC_H_
