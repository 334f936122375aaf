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
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "storage/internal/leveldb_status.h"
#include "storage/internal/slice.h"
#include "tree/status_macros.h"

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

// The last key that starts with `prefix` (nullopt when there is none): one
// seek, however many records the prefix holds. Returns the iterator's
// error, converted with `what` as its context.
inline absl::StatusOr<std::optional<std::string>> LastKeyWithPrefix(
    leveldb::DB& db, const leveldb::ReadOptions& read, absl::string_view prefix,
    absl::string_view what) {
  // The first key after every key that starts with `prefix`: its last byte
  // below 0xff incremented, what follows it dropped (none: nothing follows).
  std::string after(prefix);
  while (!after.empty() && static_cast<unsigned char>(after.back()) == 0xff) {
    after.pop_back();
  }
  std::unique_ptr<leveldb::Iterator> it(db.NewIterator(read));
  if (after.empty()) {
    it->SeekToLast();
  } else {
    after.back() =
        static_cast<char>(static_cast<unsigned char>(after.back()) + 1);
    it->Seek(after);
    if (it->Valid()) {
      it->Prev();
    } else {
      it->SeekToLast();
    }
  }
  const leveldb::Slice p(prefix.data(), prefix.size());
  std::optional<std::string> last;
  if (it->Valid() && it->key().starts_with(p)) last = it->key().ToString();
  TALLY_RETURN_IF_ERROR(FromLevelDb(it->status(), what));
  return last;
}

}  // namespace internal
}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_INTERNAL_PREFIX_SCAN_H_
