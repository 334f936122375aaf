// Bootstrap: building a node's index from its PostgreSQL tables, at the
// first start and whenever the capture cannot resume (no slot, a lost
// slot, another system, or a stored position the slot is already past).
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
// build holds the new keys' rows of its largest table in memory
// (storage/bulk/gathered_rows.h: ~45 bytes and the key and value per row). The
// loaded rows that get the bootstrap version are unlogged
// (storage::Mutation::unlogged): they enter no change-log entry, so the feed
// does not re-send a first build's rows to every peer (each built the same
// rows, or settles differences by session); rows given any other version are
// logged. The position (the slot's consistent point) goes only with the LAST
// batch: a crash mid-build leaves no position, and the next start builds again.
// The caller then starts replication from the consistent point on the returned
// stream: every change is either in the snapshot or streamed, never both, never
// neither.
//
// Versions. Against what the index already holds (empty at a first build):
//  - a key the index does not hold gets the bootstrap version (the smallest
//    non-zero HLC timestamp, origin kBootstrapOrigin, pg/schema/names.h) when
//    the index was never built (no position stored), the same on every replica
//    so that identical tables give identical trees; after a completed build
//    (a rebuild) it gets its written version (below);
//  - a key whose value the index describes (its digest, recomputed with the
//    index's version, matches) keeps its version: nothing is written;
//  - a key with another value gets its written version: the row's commit
//    time (pg/sidecar/commit_stamp.h) and this
//    node, as the capture would have stamped the write — or a fresh local
//    version when the server has no commit time for it or that does not
//    order after the index's version. (A fresh version for every changed
//    row would let the database rebuilt last win every row after the same
//    ADD COLUMN on two databases, newer writes elsewhere included.)
//  - a live index key the scan did not see gets a tombstone (fresh version).
// A fresh local version is one store clock stamp (Now(), node name) for the
// whole build.
//
// Index lost (`index_lost`: no position stored, but the database marks the
// index as built, pg/sidecar/build_marker.h). The index, and with it every
// version, is gone, while the peers still hold what this node sent them. A row
// the application changed here that the peers have not received yet (tallyd was
// down, or the feed behind) must not get the bootstrap version: the peers'
// older version of it would win the next session and overwrite the local write
// everywhere. So a key the index does not hold whose row was last written by a
// transaction that is not tally's own apply — its token has a commit time and
// an origin other than the node's replication origin: an application's (origin
// 0) or another replication tool's, as capture counts them — committed at or
// after `lost_since_unix_us` (the node's first build, from the marker), gets a
// fresh version: the store clock's Now() after observing the commit time,
// and this node — later than the commit time capture stamps, which the
// lost index would have raised past a newer row it held. The others keep the
// bootstrap version, as at a first start: rows tally applied here (the
// node's origin: they came from a peer, which holds them), rows without a
// commit time (written before track_commit_timestamp was on, or older
// than the commit-timestamp horizon), and rows committed before the first
// build (they were in its snapshot, and got the bootstrap version then).
//
// The rule is deliberately the safe side of "what the peers have not
// seen", which only the lost index knew ("newer than the last completed
// session" would be tighter, but that time was lost with the index): every row
// last written locally since the first build is treated as possibly
// unseen. Its cost: such a row the peers do hold moves once (same value,
// new version); and a row last written here that a peer changed while
// this node was down or without its index, the change not yet arrived
// here, keeps this node's older value (the fresh version is the newer).
// A row the application DELETED here is not in the table; the old slot,
// still decodable from the lost index's last confirmation, is read for
// them before it is replaced (pg/sidecar/lost_deletes.h), and each such key the
// snapshot does not hold gets a tombstone with a fresh version, as the
// rows written here get (above). Limits (README "A lost index"): deletes the
// old slot cannot show (a TRUNCATE's rows, deletes before its confirmed
// position, a missing or lost slot) come back from the peers. A row written
// before the first build whose index version a later rebuild had raised (a
// schema change's: its commit time) goes back to the bootstrap version.
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
#ifndef TALLY_PG_SIDECAR_BOOTSTRAP_H_
#define TALLY_PG_SIDECAR_BOOTSTRAP_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pg/schema/names.h"
#include "pg/schema/table_schema.h"
#include "pg/sidecar/apply/row_token.h"
#include "pg/sidecar/capture_position.h"
#include "pg/wire/connection.h"
#include "pg/wire/replication_stream.h"
#include "storage/store.h"
#include "storage/store_options.h"
#include "tree/digest.h"
#include "tree/version.h"

namespace tally {
namespace pg {

// What the position records for a kept table that is missing from the
// database (dropped): CapturePosition::fingerprints[table].
inline constexpr absl::string_view kMissingTable = "missing";

// What the position records for a kept table with rows over the store's
// value limit, not indexed (the keyspace is refused): a later start sees
// a schema it does not match and builds the table again, looking again.
inline constexpr absl::string_view kRefusedTable =
    "refused: rows over the value limit";

// Per keyspace, the keys of rows over the value limit, not indexed.
using OversizeKeys = std::map<std::string, std::set<std::string>>;

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
  // True when the index was lost (see above). REQUIRES: !rebuild.
  bool index_lost = false;
  // Index lost: rows committed before this time (µs since 1970, the
  // server's clock) keep the bootstrap version; nullopt: none do.
  std::optional<int64_t> lost_since_unix_us;
  // Kept tables missing from the database (dropped), not in `tables`: the
  // index forgets their rows (erases them: no tombstone, no change the
  // feed sends, so the peers keep theirs; PostgreSQL's own replication
  // does not replicate a DROP either), and the position records them as
  // kMissingTable.
  std::vector<std::string> missing;
  // Tables of `tables` whose index describes another table of that name
  // (dropped and created again, or missing until now): the index forgets
  // their rows as above, then builds them as at a first start (the
  // bootstrap version, whatever `rebuild` says), so that the peers' rows
  // win over the reloaded ones and none of theirs is deleted.
  std::vector<std::string> afresh;
  size_t batch_rows = 10000;
  // The store's value limit (StoreOptions::max_value_bytes): a longer row
  // is not indexed but listed in BuildResult::oversize (an index row of
  // its key stays as it was), and its table recorded as kRefusedTable.
  size_t max_value_bytes = storage::StoreOptions().max_value_bytes;
  absl::Duration progress_interval = absl::Seconds(5);
  std::function<void(const BuildProgress&)> on_progress;
  ConnectOptions connect;
};

// What a build did with one table.
struct TableBuildCounts {
  std::string keyspace;
  uint64_t rows = 0;  // rows scanned
  // Index lost: rows last written locally, given a fresh local version.
  uint64_t fresh_rows = 0;
  // Index lost: rows deleted locally since the lost index's last
  // confirmation (found in the old slot), given a fresh tombstone.
  uint64_t deleted_rows = 0;
};

struct BuildResult {
  // resume_lsn = the slot's consistent point; fingerprints = the tables'.
  CapturePosition position;
  // The server's clock just before the slot was created (µs since 1970):
  // every transaction committed before it is in the build's snapshot.
  int64_t started_unix_us = 0;
  std::vector<TableBuildCounts> tables;  // in the order of options.tables
  // Index lost: whether the old slot could be read for local deletes
  // (pg/sidecar/lost_deletes.h), and the tables a local TRUNCATE emptied there
  // (their rows are not known, so they got no tombstones).
  bool old_slot_read = false;
  // Why the old slot could not be read, when it was there (the build then
  // goes on without its deletes).
  std::string old_slot_error;
  std::vector<std::string> truncated_while_lost;
  // Rows over the value limit, not indexed.
  OversizeKeys oversize;
  // The replication connection that created the slot, idle: start
  // replication on it from position.resume_lsn.
  std::unique_ptr<ReplicationStream> stream;
  BuildProgress progress;
};

// Builds (or rebuilds) the index of `options.tables` in `store`, as
// described above. The caller then marks the index built in the database
// (pg/sidecar/build_marker.h). Returns the connection's errors (kUnavailable:
// retry), kResourceExhausted when the server has no free slot, the store's
// errors, kDataLoss for a malformed COPY stream. REQUIRES: `store` was opened
// with this database's backend.
absl::StatusOr<BuildResult> BuildIndex(const BuildOptions& options,
                                       storage::Store* store);

// CREATE PUBLICATION `name` FOR TABLE the tables WITH
// (publish_via_partition_root = true), or ALTER it to that setting and to
// that list when it differs. Changes already in WAL decode with the
// publication as it was when they were made: call it before creating the
// slot that is to follow it.
absl::Status EnsurePublication(Connection& conn, absl::string_view name,
                               const std::vector<TableSchema>& tables);

// One table row as a scan reads it.
struct ScannedRow {
  absl::string_view key;  // canonical bytes (pg/schema/row_codec.h)
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
  // The CAS token (pg/sidecar/apply/row_token.h) of the row version it
  // describes.
  std::string payload;
  // The store marked it damaged (storage::IndexRecord::damaged): out of
  // its leaf until a write replaces it.
  bool damaged = false;
};

// Every row the index holds for `keyspace`, tombstones included; empty when
// the keyspace does not exist.
absl::StatusOr<absl::flat_hash_map<std::string, IndexEntry>> ReadIndex(
    storage::Store* store, absl::string_view keyspace);

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_SIDECAR_BOOTSTRAP_H_
