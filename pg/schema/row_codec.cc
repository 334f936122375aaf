#include "pg/schema/row_codec.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "pg/wire/internal/big_endian.h"
#include "tree/status_macros.h"

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

RowCodec::RowCodec(size_t key_columns, size_t value_columns,
                   std::shared_ptr<const ColumnShapes> shapes)
    : key_columns_(key_columns),
      value_columns_(value_columns),
      shapes_(std::move(shapes)) {}

absl::Status RowCodec::AppendCanonical(absl::Span<const Field> fields,
                                       size_t first_column,
                                       std::string* out) const {
  const size_t at = out->size();
  AppendFields(fields, out);
  if (shapes_ == nullptr) return absl::OkStatus();
  size_t pos = at;
  for (size_t i = 0; i < fields.size(); ++i) {
    pos += 4;
    const Field& f = fields[i];
    if (f.is_null()) continue;
    const TypeShape* shape = (*shapes_)[first_column + i].get();
    if (shape != nullptr) {
      absl::Status s = RewriteOids(*shape, OidMode::kCanonical, &(*out)[pos],
                                   f.bytes().size());
      if (!s.ok()) {
        out->resize(at);
        return absl::Status(s.code(), absl::StrCat("column ", first_column + i,
                                                   ": ", s.message()));
      }
    }
    pos += f.bytes().size();
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
  TALLY_RETURN_IF_ERROR(
      AppendCanonical(fields.subspan(0, key_columns_), 0, key));
  return AppendCanonical(fields.subspan(key_columns_), key_columns_, value);
}

absl::Status RowCodec::EncodeKey(absl::Span<const Field> key_fields,
                                 std::string* key) const {
  if (key_fields.size() != key_columns_) {
    return absl::InvalidArgumentError(
        absl::StrCat("a key of ", key_fields.size(), " fields; the table has ",
                     key_columns_, " primary-key columns"));
  }
  key->clear();
  return AppendCanonical(key_fields, 0, key);
}

absl::Status RowCodec::ToLocal(size_t first_column,
                               std::vector<Field>* fields) const {
  // The fields point into the caller's storage, which the caller owns
  // mutably: rewriting through them is rewriting the storage.
  for (size_t i = first_column; i < fields->size(); ++i) {
    const Field& f = (*fields)[i];
    const TypeShape* shape = (*shapes_)[i].get();
    if (f.is_null() || shape == nullptr) continue;
    absl::Status s =
        RewriteOids(*shape, OidMode::kLocal,
                    const_cast<char*>(f.bytes().data()), f.bytes().size());
    if (!s.ok()) {
      fields->clear();
      return absl::InvalidArgumentError(
          absl::StrCat("column ", i, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status RowCodec::Decode(absl::string_view key, absl::string_view value,
                              std::string* storage,
                              std::vector<Field>* fields) const {
  fields->clear();
  if (shapes_ != nullptr) {
    storage->assign(key.data(), key.size());
    storage->append(value.data(), value.size());
    key = absl::string_view(*storage).substr(0, key.size());
    value = absl::string_view(*storage).substr(key.size());
  }
  absl::Status s = DecodeFields(key, key_columns_, fields);
  if (!s.ok())
    return absl::InvalidArgumentError(absl::StrCat("key: ", s.message()));
  s = DecodeFields(value, value_columns_, fields);
  if (!s.ok()) {
    fields->clear();
    return absl::InvalidArgumentError(absl::StrCat("value: ", s.message()));
  }
  if (shapes_ != nullptr) return ToLocal(0, fields);
  return absl::OkStatus();
}

absl::Status RowCodec::DecodeKey(absl::string_view key, std::string* storage,
                                 std::vector<Field>* fields) const {
  fields->clear();
  if (shapes_ != nullptr) {
    storage->assign(key.data(), key.size());
    key = *storage;
  }
  absl::Status s = DecodeFields(key, key_columns_, fields);
  if (!s.ok())
    return absl::InvalidArgumentError(absl::StrCat("key: ", s.message()));
  if (shapes_ != nullptr) return ToLocal(0, fields);
  return absl::OkStatus();
}

}  // namespace pg
}  // namespace tally
