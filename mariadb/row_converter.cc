#include "mariadb/row_converter.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tally {
namespace mariadb {

RowConverter::RowConverter(std::string table,
                           std::vector<ColumnMapping> mappings,
                           std::vector<std::string> names,
                           std::vector<size_t> positions)
    : table_(std::move(table)),
      mappings_(std::move(mappings)),
      names_(std::move(names)),
      positions_(std::move(positions)),
      ends_(mappings_.size()),
      nulls_(mappings_.size()),
      fields_(mappings_.size()) {}

absl::StatusOr<absl::Span<const pg::Field>> RowConverter::Convert(
    absl::Span<const Value> row) {
  buffer_.clear();
  const size_t n = mappings_.size();
  for (size_t i = 0; i < n; ++i) {
    if (positions_[i] >= row.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("table ", table_, ": a row of ", row.size(),
                       " columns has no column ", names_[i]));
    }
    const Value& v = row[positions_[i]];
    nulls_[i] = v.kind == Value::Kind::kNull;
    if (!nulls_[i]) {
      absl::Status s = AppendCanonical(mappings_[i], v, &buffer_);
      if (!s.ok()) {
        return absl::Status(
            s.code(), absl::StrCat("table ", table_, " column ", names_[i],
                                   ": ", s.message()));
      }
    }
    ends_[i] = buffer_.size();
  }
  // The fields are made once the buffer no longer grows.
  size_t begin = 0;
  for (size_t i = 0; i < n; ++i) {
    fields_[i] = nulls_[i] ? pg::Field::Null()
                           : pg::Field::Of(absl::string_view(buffer_).substr(
                                 begin, ends_[i] - begin));
    begin = ends_[i];
  }
  return absl::MakeConstSpan(fields_);
}

}  // namespace mariadb
}  // namespace tally
