// The canonical bytes of a PostgreSQL row as a tally row.
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
//   RowCodec codec = schema.codec();  // pg/schema/table_schema.h: with the
//   shapes std::string key, value; TALLY_RETURN_IF_ERROR(codec.Encode(fields,
//   &key, &value));  // COPY row std::vector<Field> back; std::string local; //
//   holds the local bytes when some are rewritten
//   TALLY_RETURN_IF_ERROR(codec.Decode(key, value, &local, &back));  // apply
//
// Types whose send() bytes embed type OIDs (arrays of user-defined types,
// composites, ranges of them, at any depth; pg/schema/type_shape.h) are written
// in canonical form: every embedded OID of a non-builtin type is 0, so two
// databases whose `mood[]` or `pair` got different OIDs encode a row alike.
// Encode and EncodeKey are the one place rows become canonical (the build,
// the capture, the TOAST re-read, verify and `tally diff URL URL` all go
// through them); Decode and DecodeKey give the fields back in the local
// database's form, its OIDs written back (what the database itself sends;
// PostgreSQL 15.18 would take a foreign OID of a user type too, but tally
// does not rely on that). Builtin OIDs are kept, so `int[]` encodes as it
// always did.
//
// Thread-safety: pure functions and an immutable value type.
#ifndef TALLY_PG_SCHEMA_ROW_CODEC_H_
#define TALLY_PG_SCHEMA_ROW_CODEC_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "pg/schema/type_shape.h"
#include "pg/wire/field.h"

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
// the key and how many the value, and the shapes of the columns whose
// values embed OIDs to rewrite.
class RowCodec {
 public:
  // Per canonical column, the shape of its type; null for a column whose
  // bytes need no rewriting.
  using ColumnShapes = std::vector<std::shared_ptr<const TypeShape>>;

  // A codec of columns that need no rewriting.
  RowCodec(size_t key_columns, size_t value_columns)
      : key_columns_(key_columns), value_columns_(value_columns) {}
  // REQUIRES: `shapes` is null or has key_columns + value_columns entries.
  RowCodec(size_t key_columns, size_t value_columns,
           std::shared_ptr<const ColumnShapes> shapes);

  size_t key_columns() const { return key_columns_; }
  size_t value_columns() const { return value_columns_; }
  size_t columns() const { return key_columns_ + value_columns_; }

  // True when some column's values embed OIDs that Encode and Decode
  // rewrite.
  bool rewrites() const { return shapes_ != nullptr; }

  // Appends `fields`, the values of the canonical columns `first_column`,
  // `first_column` + 1, ..., from the database, in the framing above and
  // in canonical form. Returns kDataLoss naming the column for a value its
  // type's shape does not describe; `*out` is then as it was.
  absl::Status AppendCanonical(absl::Span<const Field> fields,
                               size_t first_column, std::string* out) const;

  // Encodes one row whose fields are in canonical order (a row of a COPY
  // of the canonical SELECT list), as the database sent them. Replaces
  // `*key` and `*value` with canonical bytes. A table with no non-key
  // column has an empty value. Returns kInvalidArgument when `fields` is
  // not key_columns() + value_columns() long, kDataLoss for a malformed
  // value (AppendCanonical).
  absl::Status Encode(absl::Span<const Field> fields, std::string* key,
                      std::string* value) const;

  // Encodes only the key, from the key columns' fields (a pgoutput 'K'
  // tuple, a key the user typed). Returns kInvalidArgument when
  // `key_fields` is not key_columns() long, kDataLoss as Encode.
  absl::Status EncodeKey(absl::Span<const Field> key_fields,
                         std::string* key) const;

  // Replaces `*fields` with the fields of the row the canonical `key` and
  // `value` encode, in the form the local database receives (its OIDs
  // written back). The fields point into `key` and `value`, or into
  // `*storage` when some column is rewritten (a copy of the row's bytes
  // then): they are valid while those are unchanged. Returns
  // kInvalidArgument when either is not the encoding of this codec's
  // columns, or a value is malformed for its type.
  absl::Status Decode(absl::string_view key, absl::string_view value,
                      std::string* storage, std::vector<Field>* fields) const;

  // Replaces `*fields` with the key columns' fields of `key`, as Decode.
  absl::Status DecodeKey(absl::string_view key, std::string* storage,
                         std::vector<Field>* fields) const;

 private:
  // Rewrites in place, to the local OIDs, the fields of canonical columns
  // `first_column`... that point into `*storage`.
  absl::Status ToLocal(size_t first_column, std::vector<Field>* fields) const;

  size_t key_columns_;
  size_t value_columns_;
  // Null when no column is rewritten (the common case: no work per row).
  std::shared_ptr<const ColumnShapes> shapes_;
};

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_SCHEMA_ROW_CODEC_H_
