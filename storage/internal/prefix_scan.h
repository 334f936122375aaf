// ScanPrefix: the one loop over the records of one kind (one key prefix) in
// key order, that every reader of the store uses instead of writing its own
// `Seek(prefix); Valid() && starts_with(prefix); Next()`.
//
//   TALLY_RETURN_IF_ERROR(internal::ScanPrefix(
//       db, read, std::string(1, kOriginByIdTag), "reading origins",
//       [&](absl::string_view key, absl::string_view value) -> absl::Status {
//         ...parse with internal/records.h...
//       }));
//
// The visitor returns absl::Status (an error ends the scan and is returned)
// or absl::StatusOr<bool> (false also ends it, without an error). Keys and
// values it sees point into the iterator: valid until it returns.
//
// Thread-safe as LevelDB's iterators are: `read.snapshot` (if set) fixes
// the state read; without it, one iterator still sees one implicit snapshot.
#ifndef TALLY_STORAGE_INTERNAL_PREFIX_SCAN_H_
#define TALLY_STORAGE_INTERNAL_PREFIX_SCAN_H_

#include <leveldb/db.h>
#include <leveldb/iterator.h>

#include <memory>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "storage/internal/leveldb_status.h"
#include "storage/internal/slice.h"

namespace tally {
namespace storage {
namespace internal {

// Calls `visit(key, value)` for every record from `start` on whose key
// starts with `prefix`, in key order. Returns the visitor's first error,
// else the iterator's status, converted with `what` as its context.
// REQUIRES: `start` starts with `prefix` (or is it).
template <typename Visitor>
absl::Status ScanPrefix(leveldb::DB& db, const leveldb::ReadOptions& read,
                        absl::string_view prefix, absl::string_view start,
                        absl::string_view what, Visitor&& visit) {
  using Result =
      std::invoke_result_t<Visitor&, absl::string_view, absl::string_view>;
  static_assert(std::is_same_v<Result, absl::Status> ||
                    std::is_same_v<Result, absl::StatusOr<bool>>,
                "the visitor returns absl::Status or absl::StatusOr<bool>");
  std::unique_ptr<leveldb::Iterator> it(db.NewIterator(read));
  const leveldb::Slice p(prefix.data(), prefix.size());
  for (it->Seek(leveldb::Slice(start.data(), start.size()));
       it->Valid() && it->key().starts_with(p); it->Next()) {
    Result r = visit(ToStringView(it->key()), ToStringView(it->value()));
    if constexpr (std::is_same_v<Result, absl::Status>) {
      if (!r.ok()) return r;
    } else {
      if (!r.ok()) return r.status();
      if (!*r) return absl::OkStatus();
    }
  }
  return FromLevelDb(it->status(), what);
}

// The whole prefix.
template <typename Visitor>
absl::Status ScanPrefix(leveldb::DB& db, const leveldb::ReadOptions& read,
                        absl::string_view prefix, absl::string_view what,
                        Visitor&& visit) {
  return ScanPrefix(db, read, prefix, prefix, what,
                    std::forward<Visitor>(visit));
}

}  // namespace internal
}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_INTERNAL_PREFIX_SCAN_H_
