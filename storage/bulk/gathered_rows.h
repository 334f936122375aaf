// GatheredRows: the rows a sidecar's build reads that the index does not
// hold, kept until the whole table is read, then handed out in the index's
// (token, key) order, in which Store::LoadAbsent appends them without a
// read per row (pg/sidecar/bootstrap.h, mariadb/sidecar/sidecar.h).
//
// A first build gathers every row of its largest table, so the layout is
// what its speed comes down to: one std::vector of storage::Mutation (a
// few hundred bytes each, three heap strings) cost a malloc per string
// while reading and, walked in token order (a random order in memory), a
// cache miss at each of its parts. Here each row is one record — its key,
// value, token payload and version, contiguous — in large chunks, and the
// sort moves 16-byte entries (token, where); the walk prefetches the
// records a few rows ahead.
//
//   GatheredRows rows(expected);
//   rows.Add(key, value, payload, version);  // while scanning
//   rows.Sort();
//   TALLY_RETURN_IF_ERROR(rows.ForEach("public.t", [&](storage::Mutation m) {
//     ...;  // a Put with its version and captured payload
//   }));
//
// Thread-compatible.
#ifndef TALLY_STORAGE_BULK_GATHERED_ROWS_H_
#define TALLY_STORAGE_BULK_GATHERED_ROWS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "storage/write_request.h"
#include "tree/token.h"
#include "tree/version.h"

namespace tally {
namespace storage {

class GatheredRows {
 public:
  // `expected_rows`: reserves the entries (0: grows as needed).
  explicit GatheredRows(size_t expected_rows = 0);
  GatheredRows(const GatheredRows&) = delete;
  GatheredRows& operator=(const GatheredRows&) = delete;

  // Keeps a copy of the row. REQUIRES: fewer than 256 distinct version
  // origins over all rows (a build has two: the bootstrap's and the
  // node's); key and value below 4 GiB; payload below 256 bytes.
  void Add(absl::string_view key, absl::string_view value,
           absl::string_view payload, const tree::Version& version);

  size_t size() const { return entries_.size(); }

  // Orders the rows by (token, key), the index's order.
  void Sort();

  // Calls `visit` for every row, in the order they are in (Sort's, after
  // it), with a Put of `keyspace` carrying the row's version and captured
  // payload; stops at the first error it returns.
  absl::Status ForEach(
      absl::string_view keyspace,
      absl::FunctionRef<absl::Status(storage::Mutation)> visit) const;

 private:
  struct Entry {
    tree::Token token;
    const char* record;
  };
  // A record: u32 key size, u32 value size, u8 payload size, u8 origin
  // index, u64 timestamp, then the key, value and payload bytes.
  static constexpr size_t kHeaderSize = 4 + 4 + 1 + 1 + 8;
  static constexpr size_t kChunkSize = size_t{4} << 20;

  char* Allocate(size_t bytes);
  static absl::string_view KeyOf(const char* record);

  std::vector<Entry> entries_;
  std::vector<std::unique_ptr<char[]>> chunks_;
  size_t chunk_used_ = kChunkSize;  // of chunks_.back(); full: none yet
  std::vector<std::string> origins_;
};

}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_BULK_GATHERED_ROWS_H_
