// Bootstrap: building a node's index from its PostgreSQL tables, at the
// first start and whenever the capture cannot resume (PG-DESIGN §2.7).
//
// A build creates (or aligns) the node's publication with the kept tables,
// drops a leftover slot of an unfinished build and creates the node's slot
// with an exported snapshot, on a replication connection it then keeps idle;
// a reader connection imports that snapshot (REPEATABLE READ, SET
// TRANSACTION SNAPSHOT) and COPYs every table in binary with each row's CAS
// token (`pg_xact_commit_timestamp_origin(xmin)`); the rows go into the
// store as captured writes of at most `batch_rows` rows. Rows of keys the
// index does not hold are gathered over the whole table, sorted into the
// index's (token, key) order and loaded with Store::LoadAbsent (no read of
// each row before its write; LevelDB appends) when they order after the
// index's last row — all of them at a first build; the others, and the
// changed rows of keys the index holds, go through Store::Write. So a
// build holds the new keys' rows of its largest table in memory (~200 bytes
// and the key and value per row). The position (the
// slot's consistent point) goes only with the LAST batch: a crash mid-build
// leaves no position, and the next start builds again. The caller then
// starts replication from the consistent point on the returned stream:
// every change is either in the snapshot or streamed, never both, never
// neither.
//
// Versions. Against what the index already holds (empty at a first build):
//  - a key the index does not hold gets the bootstrap version (the smallest
//    non-zero HLC timestamp, origin kBootstrapOrigin, pg/names.h) when the
//    index was never built (no position stored), the same on every replica
//    so that identical tables give identical trees; after a completed build
//    (a rebuild) it gets its written version (below);
//  - a key whose value the index describes (its digest, recomputed with the
//    index's version, matches) keeps its version: nothing is written;
//  - a key with another value gets its written version: the row's commit
//    time (to the µs: milliseconds, then µs as the HLC counter) and this
//    node, as the capture would have stamped the write — or a fresh local
//    version when the server has no commit time for it or that does not
//    order after the index's version. (A fresh version for every changed
//    row would let the database rebuilt last win every row after the same
//    ADD COLUMN on two databases, newer writes elsewhere included.)
//  - a live index key the scan did not see gets a tombstone (fresh version).
// A fresh local version is one store clock stamp (Now(), node name) for the
// whole build.
//
//   BuildOptions o{conninfo, names, tables, node_name};
//   TALLY_ASSIGN_OR_RETURN(BuildResult built, BuildIndex(o, store));
//   TALLY_RETURN_IF_ERROR(built.stream->StartReplication(
//       names.slot, built.position.resume_lsn, {names.publication}));
//
// Thread-compatible: a build uses its own connections, and one thread of
// its own that writes a batch to the store while the scan reads the next
// (or, for the gathered rows, while the next batch of them is made; each
// batch sorted by token, so that LevelDB finds its keys near each other);
// the store is thread-safe.
#ifndef TALLY_PG_BOOTSTRAP_H_
#define TALLY_PG_BOOTSTRAP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pg/capture_position.h"
#include "pg/connection.h"
#include "pg/names.h"
#include "pg/replication_stream.h"
#include "pg/row_token.h"
#include "pg/table_schema.h"
#include "storage/store.h"
#include "tree/digest.h"
#include "tree/version.h"

namespace tally {
namespace pg {

// Progress of a build, reported every few seconds and at the end.
struct BuildProgress {
  std::string keyspace;         // the table being read
  uint64_t rows_done = 0;       // over all tables so far
  uint64_t rows_estimated = 0;  // sum of the tables' pg_class.reltuples
  uint64_t rows_written = 0;    // rows whose index record changed
};

struct BuildOptions {
  std::string conninfo;
  ReplicationNames names;
  std::vector<TableSchema> tables;
  std::string node_name;
  // True when the index was built before (a position is stored): new keys
  // then get fresh local versions instead of the bootstrap version.
  bool rebuild = false;
  size_t batch_rows = 10000;
  absl::Duration progress_interval = absl::Seconds(5);
  std::function<void(const BuildProgress&)> on_progress;
  ConnectOptions connect;
};

struct BuildResult {
  CapturePosition position;  // resume_lsn = the slot's consistent point
  // The replication connection that created the slot, idle: start
  // replication on it from position.resume_lsn.
  std::unique_ptr<ReplicationStream> stream;
  BuildProgress progress;
};

// Builds (or rebuilds) the index of `options.tables` in `store`, as
// described above. Returns the connection's errors (kUnavailable: retry),
// kResourceExhausted when the server has no free slot, the store's errors,
// kDataLoss for a malformed COPY stream.
// REQUIRES: `store` was opened with this database's backend.
absl::StatusOr<BuildResult> BuildIndex(const BuildOptions& options,
                                       storage::Store* store);

// CREATE PUBLICATION `name` FOR TABLE the tables, or ALTER it to that list
// when it lists others.
absl::Status EnsurePublication(Connection& conn, absl::string_view name,
                               const std::vector<TableSchema>& tables);

// One table row as a scan reads it.
struct ScannedRow {
  absl::string_view key;  // canonical bytes (pg/row_codec.h)
  absl::string_view value;
  RowToken token;
};

// COPYs `schema`'s table (binary, canonical columns and each row's token)
// on `conn`, in whatever transaction it has open, calling `on_row` per row.
// `where` (SQL, may be empty) restricts the rows, with the table aliased
// as `tally_t`.
absl::Status ScanTable(
    Connection& conn, const TableSchema& schema, absl::string_view where,
    absl::FunctionRef<absl::Status(const ScannedRow&)> on_row);

// What the index holds for one key.
struct IndexEntry {
  tree::Version version;
  bool deleted = false;
  tree::Digest128 digest;
};

// Every row the index holds for `keyspace`, tombstones included; empty when
// the keyspace does not exist.
absl::StatusOr<absl::flat_hash_map<std::string, IndexEntry>> ReadIndex(
    storage::Store* store, absl::string_view keyspace);

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_BOOTSTRAP_H_
