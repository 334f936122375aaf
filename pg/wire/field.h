// One column value of one PostgreSQL row, as the binary protocol carries
// it: the type's send() bytes, or SQL NULL.
//
// The COPY parser (pg/wire/binary_copy.h) hands rows out as fields, the row
// codec (pg/schema/row_codec.h) turns fields into tally's key and value bytes
// and back, and the COPY writer sends fields to the server. A field never owns
// its bytes: it points into the buffer of whoever produced it, and is valid as
// long as that buffer is (each producer says how long).
//
//   pg::Field id = pg::Field::Of(bytes);
//   pg::Field missing = pg::Field::Null();
//   if (!f.is_null()) Use(f.bytes());
//
// Thread-safety: a value type.
#ifndef TALLY_PG_WIRE_FIELD_H_
#define TALLY_PG_WIRE_FIELD_H_

#include "absl/strings/string_view.h"

namespace tally {
namespace pg {

class Field {
 public:
  // SQL NULL. (A default-constructed Field is NULL too.)
  static Field Null() { return Field(); }
  // A non-NULL value whose send() bytes are `bytes` (possibly empty: an
  // empty text or bytea is not NULL).
  static Field Of(absl::string_view bytes) { return Field(bytes); }

  Field() = default;

  bool is_null() const { return is_null_; }
  // The value's bytes. REQUIRES: !is_null().
  absl::string_view bytes() const { return bytes_; }

  friend bool operator==(const Field& a, const Field& b) {
    return a.is_null_ == b.is_null_ && a.bytes_ == b.bytes_;
  }
  friend bool operator!=(const Field& a, const Field& b) { return !(a == b); }

 private:
  explicit Field(absl::string_view bytes) : is_null_(false), bytes_(bytes) {}

  bool is_null_ = true;
  absl::string_view bytes_;
};

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_WIRE_FIELD_H_
