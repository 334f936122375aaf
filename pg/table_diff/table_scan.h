// TableScan: one full read of a PostgreSQL table into what a diff needs —
// per row its token, key and digest, and the XOR of the digests per leaf —
// without keeping any value. `tally diff URL URL` scans both tables at once
// (one thread and one connection per side) and compares two scans
// (pg/table_diff/table_diff.h); the reads by key below fetch the few rows a
// diff found.
//
//   TALLY_ASSIGN_OR_RETURN(TableSchema schema, TableSchema::Read(conn, name));
//   TALLY_ASSIGN_OR_RETURN(TableScan scan,
//                          TableScan::Run(conn, schema, schema.name()));
//   scan.root();  // what a freshly built sidecar's tree has as its root
//
// The scan is one `COPY t (<canonical select list>) TO STDOUT (FORMAT
// binary)` (a COPY of the table itself skips the executor's projection; a
// table with inheritance children, whose rows it would leave out, is read
// by `COPY (SELECT <the list> FROM t) ...`): binary values do not depend on the
// session's TimeZone, DateStyle or float settings (text COPY does), and the
// canonical column order (pg/schema/row_codec.h) does not depend on the table's
// physical order. Each row's digest is tree::RowDigest(keyspace, key,
// BootstrapVersion(), false, value) over the canonical key and value bytes: the
// digest a sidecar gives the row when it first builds its index, so the root of
// a scan equals the root of that keyspace in a sidecar whose rows all still
// carry the bootstrap version. (Rows a sidecar has since captured carry their
// own versions, and its root differs from a scan's while their values do not.)
//
// Memory: 17 bytes per row plus its key bytes (12 for a bigint key), in
// one flat array (no per-row allocation): a 5M-row bigint table takes
// ~145 MB, reserved up front from the table's row estimate (reltuples) so
// that the arrays are not copied as they grow, on transparent huge pages
// (one page fault per 2 MiB: with 4 KiB pages the faults were 18% of the
// client's time). The leaves are an array of 2^kLeafBits digests and
// counts.
//
// Thread-compatible: a scan is a value; Run uses only the connection given.
#ifndef TALLY_PG_TABLE_DIFF_TABLE_SCAN_H_
#define TALLY_PG_TABLE_DIFF_TABLE_SCAN_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "pg/schema/names.h"
#include "pg/schema/row_codec.h"
#include "pg/schema/table_schema.h"
#include "pg/table_diff/internal/huge_page_allocator.h"
#include "pg/wire/connection.h"
#include "pg/wire/field.h"
#include "tree/digest.h"
#include "tree/token.h"
#include "tree/version.h"

namespace tally {
namespace pg {

// Digests rows given as canonical fields (a row of a COPY of the canonical
// select list) exactly as tree::RowDigest(keyspace, key, BootstrapVersion(),
// false, value) does over RowCodec's key and value bytes, but in one reused
// buffer: a scan digests millions of rows, and the allocation and copies of
// encoding the key, the value and the digest's input separately were a
// third of its client time.
class BootstrapRowDigester {
 public:
  BootstrapRowDigester(absl::string_view keyspace, RowCodec codec);

  // Digests one row. Returns kInvalidArgument when `fields` is not
  // codec.columns() long.
  absl::Status Digest(absl::Span<const Field> fields);

  // The last row's canonical key bytes (valid until the next Digest), token
  // and digest.
  absl::string_view key() const {
    return absl::string_view(buffer_).substr(key_begin_, key_size_);
  }
  tree::Token token() const { return token_; }
  const tree::Digest128& digest() const { return digest_; }

 private:
  const RowCodec codec_;
  // Everything RowDigest hashes before the key: the keyspace field.
  std::string prefix_;
  // ... between the key and the value: version and deleted flag.
  std::string middle_;
  std::string buffer_;
  size_t key_begin_ = 0;
  size_t key_size_ = 0;
  tree::Token token_ = 0;
  tree::Digest128 digest_;
};

// One scanned row; `key` points into the scan that returned it.
struct ScannedRow {
  tree::Token token = 0;
  absl::string_view key;
  tree::Digest128 digest;
};

// What a running scan has read so far, published for other threads.
struct ScanCounters {
  std::atomic<uint64_t> rows{0};
  std::atomic<uint64_t> bytes{0};
};

// The planner's row estimate of `schema`'s table (pg_class.reltuples, the
// leaves' sum for a partitioned table) plus 5% for rows written since; 0
// when it has none (never vacuumed or analyzed) or the catalog read fails.
uint64_t EstimatedRows(Connection& conn, const TableSchema& schema);

class TableScan {
 public:
  // The scan's leaves: token >> (64 - kLeafBits). Every row updates a
  // random leaf, so the leaf arrays must stay in the core's cache: with
  // 2^16 leaves (1.3 MB) that update was 28% of a scan's client time; 2^12
  // (80 KB) keeps it small, and a few differences still drag few rows into
  // the row-by-row comparison (~1,200 per differing leaf at 5M rows).
  static constexpr int kLeafBits = 12;
  static constexpr size_t kLeaves = size_t{1} << kLeafBits;

  // Reads every row of `schema`'s table through `conn` (those for which
  // the SQL condition `where` holds, when it is not empty), in the
  // connection's current transaction if one is open (the caller's
  // snapshot), and digests it under `keyspace`. Returns the connection's
  // error (a missing table, a bad `where`, a lost connection,
  // kDeadlineExceeded past the connection's query timeout), or kDataLoss
  // for a malformed COPY stream.
  // REQUIRES: `schema` was read from this connection's database.
  // `counters`, when given, follow the rows and bytes read so far, for
  // another thread to show (a progress line).
  static absl::StatusOr<TableScan> Run(Connection& conn,
                                       const TableSchema& schema,
                                       absl::string_view keyspace,
                                       absl::string_view where = "",
                                       ScanCounters* counters = nullptr);

  // Makes a scan of rows read elsewhere (below).
  class Builder;

  TableScan(TableScan&&) = default;
  TableScan& operator=(TableScan&&) = default;

  const std::string& keyspace() const { return keyspace_; }
  uint64_t rows() const { return rows_; }
  // The bytes of the COPY stream read from the database.
  uint64_t bytes() const { return bytes_; }
  // The XOR of every row's digest: the root of a tree over these rows.
  const tree::Digest128& root() const { return root_; }
  absl::Span<const tree::Digest128> leaf_digests() const { return leaves_; }
  absl::Span<const uint32_t> leaf_counts() const { return leaf_counts_; }
  static size_t LeafOf(tree::Token token) {
    return static_cast<size_t>(token >> (tree::kTokenBits - kLeafBits));
  }

  // The rows whose leaf `in_leaf` flags (kLeaves entries), sorted by
  // (token, key). Valid while the scan lives.
  std::vector<ScannedRow> RowsIn(const std::vector<bool>& in_leaf) const;

 private:
  TableScan() : leaves_(kLeaves), leaf_counts_(kLeaves, 0) {}
  // Reserves room for `rows` rows of `key_bytes` key bytes each.
  void Reserve(uint64_t rows, size_t key_bytes);
  void Add(absl::string_view key, const tree::Digest128& digest,
           tree::Token token);

  // The per-row arrays: tens to hundreds of MB each, written once front to
  // back, on transparent huge pages (internal/huge_page_allocator.h).
  template <typename T>
  using RowArray = std::vector<T, internal::HugePageAllocator<T>>;

  std::string keyspace_;
  // The rows' records back to back, in scan order: the key's length
  // (varint32), the key, the digest (16 bytes, as in memory). The token is
  // not kept: RowsIn hashes the keys again (3 ms per 1M rows), where 8
  // bytes a row would be 8 MB more memory touched for the first time —
  // in a virtual machine the dearest part of a scan's client side.
  RowArray<char> records_;
  uint64_t rows_ = 0;
  uint64_t bytes_ = 0;
  std::vector<tree::Digest128> leaves_;
  std::vector<uint32_t> leaf_counts_;
  tree::Digest128 root_;
};

// Makes a scan of rows read elsewhere (another engine's table, converted
// to canonical fields: mariadb/table.h), digested as Run digests a
// row, so that the two scans compare with CompareScans.
//
//   TableScan::Builder b(keyspace, schema.codec(), estimated_rows);
//   for (each row) TALLY_RETURN_IF_ERROR(b.Add(fields));
//   TableScan scan = std::move(b).Finish();
class TableScan::Builder {
 public:
  Builder(absl::string_view keyspace, RowCodec codec, uint64_t estimated_rows);
  // Digests one row. Returns kInvalidArgument when `fields` is not
  // codec.columns() long.
  absl::Status Add(absl::Span<const Field> fields);
  // Counts `n` more bytes read from the database.
  void AddBytes(uint64_t n) { scan_.bytes_ += n; }
  uint64_t rows() const { return scan_.rows_; }
  uint64_t bytes() const { return scan_.bytes_; }
  TableScan Finish() && { return std::move(scan_); }

 private:
  TableScan scan_;
  BootstrapRowDigester digester_;
  uint64_t estimated_rows_;
  bool reserved_ = false;
};

// The canonical key and value of one row of a table.
struct CanonicalRow {
  std::string key;
  std::string value;
};

// Reads the rows of `schema`'s table whose canonical keys are `keys`
// (RowCodec key bytes; absent keys are simply not returned), in no
// particular order, in one transaction of its own: the keys go into a
// temporary table by binary COPY and one COPY joins it to the table.
// Returns the connection's error, or kInvalidArgument for a key that is not
// an encoding of the table's key columns.
// REQUIRES: no transaction open on `conn`; the role may create temporary
// tables (PostgreSQL grants TEMP on every database to PUBLIC by default).
absl::StatusOr<std::vector<CanonicalRow>> ReadRowsByKey(
    Connection& conn, const TableSchema& schema,
    absl::Span<const std::string> keys);

// Appends to `texts` (one per key, in the order of `keys`) the key
// columns' text as PostgreSQL prints them: the column's text for a
// one-column key ("42"), the row's text for a longer one ("(42,eu)").
// The server converts, so every type prints as psql would show it.
// REQUIRES and errors as ReadRowsByKey.
absl::StatusOr<std::vector<std::string>> KeyTexts(
    Connection& conn, const TableSchema& schema,
    absl::Span<const std::string> keys);

// A row as PostgreSQL prints each of its columns (`column::text`), in the
// schema's canonical order; nullopt for NULL.
using RowText = std::vector<std::optional<std::string>>;

// The rows at `keys` (canonical key bytes) as text, by canonical key, for
// the keys found. Read with TimeZone UTC, DateStyle ISO, IntervalStyle
// iso_8601, extra_float_digits 3 and bytea_output hex, so that two
// databases print one value alike (and a float exactly), whatever their
// own settings. REQUIRES and errors as ReadRowsByKey.
absl::StatusOr<absl::flat_hash_map<std::string, RowText>> RowTextsByKey(
    Connection& conn, const TableSchema& schema,
    absl::Span<const std::string> keys);

// Runs `fn` with a temporary table "tally_keys" holding `keys` (the key
// columns of `schema`), in one transaction that `fn` shares and that ends
// (commits, dropping the table) when it returns OK, or rolls back.
// REQUIRES: no transaction open on `conn`.
absl::Status WithKeysTable(Connection& conn, const TableSchema& schema,
                           absl::Span<const std::string> keys,
                           const std::function<absl::Status()>& fn);

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_TABLE_DIFF_TABLE_SCAN_H_
