#include "pg/row_codec.h"

#include <algorithm>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "pg/internal/big_endian.h"

namespace tally {
namespace pg {

using internal::LoadBigEndian32;

absl::StatusOr<std::vector<size_t>> CanonicalColumnOrder(
    absl::Span<const std::string> column_names,
    absl::Span<const size_t> primary_key) {
  if (primary_key.empty()) {
    return absl::InvalidArgumentError(
        "a table without a primary key has no canonical row encoding");
  }
  absl::flat_hash_set<absl::string_view> names;
  for (const std::string& name : column_names) {
    if (!names.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("two columns are named \"", name, "\""));
    }
  }
  std::vector<bool> in_key(column_names.size(), false);
  std::vector<size_t> order;
  order.reserve(column_names.size());
  for (size_t k : primary_key) {
    if (k >= column_names.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("primary-key column ", k, " of a table with ",
                       column_names.size(), " columns"));
    }
    if (in_key[k]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "column \"", column_names[k], "\" appears twice in the primary key"));
    }
    in_key[k] = true;
    order.push_back(k);
  }
  const size_t first_value = order.size();
  for (size_t i = 0; i < column_names.size(); ++i) {
    if (!in_key[i]) order.push_back(i);
  }
  std::sort(order.begin() + first_value, order.end(), [&](size_t a, size_t b) {
    return column_names[a] < column_names[b];
  });
  return order;
}

void AppendFields(absl::Span<const Field> fields, std::string* out) {
  size_t bytes = 0;
  for (const Field& f : fields) {
    bytes += 4 + (f.is_null() ? 0 : f.bytes().size());
  }
  // One resize and plain stores: a scan frames every row it reads, and a
  // push_back per length byte was an eighth of a diff's client time.
  const size_t at = out->size();
  out->resize(at + bytes);
  char* p = &(*out)[at];
  for (const Field& f : fields) {
    const uint32_t length = f.is_null()
                                ? kNullFieldLength
                                : static_cast<uint32_t>(f.bytes().size());
    p[0] = static_cast<char>(length >> 24);
    p[1] = static_cast<char>(length >> 16);
    p[2] = static_cast<char>(length >> 8);
    p[3] = static_cast<char>(length);
    p += 4;
    if (f.is_null() || f.bytes().empty()) continue;
    std::memcpy(p, f.bytes().data(), f.bytes().size());
    p += f.bytes().size();
  }
}

absl::Status DecodeFields(absl::string_view bytes, size_t count,
                          std::vector<Field>* fields) {
  const size_t first = fields->size();
  size_t pos = 0;
  for (size_t i = 0; i < count; ++i) {
    if (bytes.size() - pos < 4) {
      fields->resize(first);
      return absl::InvalidArgumentError(
          absl::StrCat("encoded row ends at field ", i, " of ", count,
                       " (byte ", pos, " of ", bytes.size(), ")"));
    }
    const uint32_t len = LoadBigEndian32(bytes.data() + pos);
    pos += 4;
    if (len == kNullFieldLength) {
      fields->push_back(Field::Null());
      continue;
    }
    if (bytes.size() - pos < len) {
      fields->resize(first);
      return absl::InvalidArgumentError(absl::StrCat(
          "field ", i, " of an encoded row is ", len, " bytes at byte ", pos,
          "; only ", bytes.size() - pos, " follow"));
    }
    fields->push_back(Field::Of(bytes.substr(pos, len)));
    pos += len;
  }
  if (pos != bytes.size()) {
    fields->resize(first);
    return absl::InvalidArgumentError(
        absl::StrCat("encoded row of ", count, " fields has ",
                     bytes.size() - pos, " bytes after its last field"));
  }
  return absl::OkStatus();
}

absl::Status RowCodec::Encode(absl::Span<const Field> fields, std::string* key,
                              std::string* value) const {
  if (fields.size() != columns()) {
    return absl::InvalidArgumentError(absl::StrCat("a row of ", fields.size(),
                                                   " fields; the table has ",
                                                   columns(), " columns"));
  }
  key->clear();
  value->clear();
  AppendFields(fields.subspan(0, key_columns_), key);
  AppendFields(fields.subspan(key_columns_), value);
  return absl::OkStatus();
}

absl::Status RowCodec::EncodeKey(absl::Span<const Field> key_fields,
                                 std::string* key) const {
  if (key_fields.size() != key_columns_) {
    return absl::InvalidArgumentError(
        absl::StrCat("a key of ", key_fields.size(), " fields; the table has ",
                     key_columns_, " primary-key columns"));
  }
  key->clear();
  AppendFields(key_fields, key);
  return absl::OkStatus();
}

absl::Status RowCodec::Decode(absl::string_view key, absl::string_view value,
                              std::vector<Field>* fields) const {
  fields->clear();
  absl::Status s = DecodeFields(key, key_columns_, fields);
  if (!s.ok())
    return absl::InvalidArgumentError(absl::StrCat("key: ", s.message()));
  s = DecodeFields(value, value_columns_, fields);
  if (!s.ok()) {
    fields->clear();
    return absl::InvalidArgumentError(absl::StrCat("value: ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status RowCodec::DecodeKey(absl::string_view key,
                                 std::vector<Field>* fields) const {
  fields->clear();
  absl::Status s = DecodeFields(key, key_columns_, fields);
  if (!s.ok())
    return absl::InvalidArgumentError(absl::StrCat("key: ", s.message()));
  return absl::OkStatus();
}

}  // namespace pg
}  // namespace tally
