// leveldb::Slice as absl::string_view, the type the record parsers
// (internal/records.h) and the rest of tally take. Both are a pointer and a
// length: the view points into the slice's bytes and lives as long as they.
#ifndef TALLY_STORAGE_INTERNAL_SLICE_H_
#define TALLY_STORAGE_INTERNAL_SLICE_H_

#include <leveldb/slice.h>

#include "absl/strings/string_view.h"

namespace tally {
namespace storage {
namespace internal {

inline absl::string_view ToStringView(const leveldb::Slice& s) {
  return absl::string_view(s.data(), s.size());
}

}  // namespace internal
}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_INTERNAL_SLICE_H_
