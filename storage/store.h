// Store: one node's rows, Merkle trees, change log, origins and progress in
// one LevelDB.
//
// A store holds keyspaces (named sets of rows), each with a Merkle tree of a
// depth fixed when the keyspace is created. Every commit is ONE LevelDB
// WriteBatch holding the rows, the leaves they change, their change-log
// entries and, for replicated changes, the upstream's progress — so after a
// crash the tree matches the rows and progress matches what was applied.
// Concurrent writers are grouped by a leader into one batch, as LevelDB's own
// writer queue does. Inner tree levels live in memory and are rebuilt from
// the persisted leaves when the store opens, in O(leaves).
//
//   StoreOptions options;
//   options.node_name = "eu-west/db-3";
//   absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(dir, options);
//   WriteRequest w;
//   w.mutations.push_back(Mutation::Put("users", "alice", "{...}"));
//   absl::StatusOr<WriteResult> r = (*store)->Write(std::move(w));
//
// Last writer wins per row: a mutation is applied only when its version is
// higher than the stored one, or equal with other content and a higher row
// digest (the tie rule, CompareRows). Local mutations get a fresh HLC timestamp
// and this node's origin; replicated ones keep their version and origin.
//
// Thread-safe: all methods may be called concurrently.
#ifndef TALLY_STORAGE_STORE_H_
#define TALLY_STORAGE_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "storage/names.h"
#include "storage/row_backend.h"
#include "storage/store_options.h"
#include "storage/store_types.h"
#include "storage/write_request.h"
#include "tree/hlc.h"
#include "tree/merkle_tree.h"
#include "tree/token.h"
#include "tree/tree_view.h"
#include "tree/version.h"

namespace tally {
namespace storage {

class Store {
 public:
  // Opens the store in directory `dir`, or creates one when `dir` is new or
  // empty (LevelDB's own LOCK and LOG files aside). Returns
  // kFailedPrecondition for a store of an unknown format version or of
  // another node name, and for a directory that holds files but no store
  // (LevelDB's CURRENT file is missing: creating a store there would delete
  // the tables of the one that was); kInvalidArgument for bad options;
  // kDataLoss for a corrupted record, a damaged LevelDB log or table, or a
  // missing log (LevelDB would drop what it cannot read; see RepairStore);
  // kUnavailable when the directory cannot be opened or is locked by
  // another process. Messages name the directory and the recovery.
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& dir,
                                                     StoreOptions options);

  virtual ~Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  virtual const std::string& node_name() const = 0;
  virtual Epoch epoch() const = 0;

  // Creates a keyspace with the given depth. Returns kAlreadyExists if it
  // exists with another depth (OK if with the same), kInvalidArgument for a
  // bad name or depth.
  virtual absl::Status CreateKeyspace(absl::string_view name, int depth) = 0;

  // Drops keyspace `name`: removes its rows (tombstones, damaged rows and
  // their marks included), its leaves and its record, and records the name
  // as dropped, so that writes to it are refused from then on, by this
  // store's own writers and a peer's alike (WriteResult::rejected, with
  // RejectedMutation::dropped), and CreateKeyspace refuses it, until
  // UndropKeyspace. The rows are erased in batches, each committed, before
  // the name is recorded as dropped: if the drop fails or the process dies
  // half way, the keyspace stays, with fewer rows; run it again. Returns
  // the rows removed. kNotFound when the store has no such keyspace (and
  // never dropped one of that name); kAlreadyExists when it was dropped.
  virtual absl::StatusOr<uint64_t> DropKeyspace(absl::string_view name) = 0;
  // Forgets that `name` was dropped: it may be written (and so created)
  // again. kNotFound when it was not dropped.
  virtual absl::Status UndropKeyspace(absl::string_view name) = 0;
  // The dropped keyspaces, by name.
  virtual std::vector<DroppedKeyspaceInfo> ListDroppedKeyspaces() const = 0;

  // Applies mutations atomically (all or none) under last writer wins.
  // Unknown keyspaces are created with default_depth. Mutations the backend
  // does not take (RowBackend::TakesRows for their keyspace, or a row its
  // database refused) are left out and listed in WriteResult::rejected with
  // the reason; the rest and the request's progress are committed (use
  // RejectionError to answer them as one error). Returns
  // kInvalidArgument for a limit or a malformed mutation (nothing written),
  // kOutOfRange for a remote version too far in the future, kUnavailable or
  // kDataLoss when LevelDB fails.
  virtual absl::StatusOr<WriteResult> Write(WriteRequest request) = 0;

  // Bulk load: writes captured rows the keyspace does not hold, such as a
  // PostgreSQL sidecar's first build of a table, without the LevelDB read
  // of the stored row that Write's last writer wins does before each
  // write. Each key's absence is proved by order instead: the request must
  // be ApplyMode::kCaptured and hold puts only, each with its version,
  // all of one keyspace, in strictly increasing (token, key) order (the
  // index's own order), and its first key must order after every row the
  // keyspace holds, which one LevelDB seek checks. The rows are then
  // written as Write would write rows it finds absent (row records,
  // leaves, change-log entries, per-origin counts; the request's progress
  // and backend position), in one WriteBatch, in a commit of its own.
  // Loading a table batch after batch in (token, key) order meets the
  // rule; rows that order before the keyspace's last row go through
  // Write. Returns kFailedPrecondition when the request breaks the rule
  // (nothing is written) and Write's errors otherwise. Cheaper than Write
  // for the same rows mostly because LevelDB then appends: in key order
  // each insert into its memtable lands next to the previous one, and the
  // tables it flushes do not overlap.
  //
  // Rows marked `unlogged` (Mutation::unlogged) get no change-log entry:
  // last_sequence() does not move for them, the feed never sends them and
  // listeners are not told. Since the log's entries also carry the leaves'
  // changes until a checkpoint, such a commit first checkpoints the leaves
  // and then writes, in its own batch, the leaves it changes and the
  // sequence they include (a crash keeps rows, leaves and counts together).
  virtual absl::StatusOr<WriteResult> LoadAbsent(WriteRequest request) = 0;

  // Returns the row (tombstones included); kNotFound if the keyspace or the
  // key does not exist. The value is checked against the row's digest:
  // kDataLoss when it is damaged (or was found damaged before), and the row
  // is then marked and left out of its leaf, so that anti-entropy replaces
  // it with a peer's copy. LevelDB checksums are verified on this read.
  virtual absl::StatusOr<Row> Get(absl::string_view keyspace,
                                  absl::string_view key) = 0;

  // Returns the rows of many keys of one keyspace, read from one LevelDB
  // snapshot in key order, with the backend's values read in one batch
  // (RowBackend::ReadValues): one result per key, in the order of `keys`
  // (a key given twice is answered twice). Each result is what Get() would
  // answer at that snapshot: the row (tombstones included); kNotFound for a
  // key that is not in the keyspace; kDataLoss for a damaged row, marked and
  // left out of its leaf as Get() does; the backend's kAborted or
  // kUnavailable for a row whose value in the backend is not the indexed
  // version any more (RowBackend::ReadValues: an application changed it,
  // or its write is not visible yet). The call itself returns kNotFound
  // when the keyspace does not exist and kInvalidArgument for a bad
  // keyspace name or key (nothing is read then), and the backend's error
  // when it cannot be read at all. An empty `keys` answers an empty list.
  virtual absl::StatusOr<std::vector<absl::StatusOr<Row>>> MultiGet(
      absl::string_view keyspace, absl::Span<const absl::string_view> keys) = 0;

  // The backend's schema fingerprint of `keyspace`
  // (RowBackend::SchemaFingerprint), which nodes compare in the handshake;
  // any keyspace name, held here or not.
  virtual absl::StatusOr<std::string> SchemaFingerprint(
      absl::string_view keyspace) const = 0;
  // The text that fingerprint hashes (RowBackend::SchemaDescription), for
  // refusals that name the differing columns; "" when there is none.
  virtual std::string SchemaDescription(absl::string_view keyspace) const {
    (void)keyspace;
    return "";
  }

  // Visits every row record of `keyspace` as the index holds it (tombstones
  // included), in (token, key) order at one LevelDB snapshot, WITHOUT
  // reading values from the backend or checking them: for a backend that
  // compares its own rows with the index (a PostgreSQL capture's TRUNCATE,
  // a rebuild, a verify against the table), where reading each value back
  // would be one database round trip per row. Rows marked damaged are
  // visited too (IndexRecord::damaged): the index holds them, and a bulk
  // load (LoadAbsent) must order after them. kNotFound for an unknown
  // keyspace; the visitor's error stops the scan and is returned.
  virtual absl::Status ScanIndex(
      absl::string_view keyspace,
      absl::FunctionRef<absl::Status(const IndexRecord&)> visit) = 0;

  // A TreeView over one keyspace for the diff algorithm; each call reads one
  // LevelDB snapshot. kNotFound for an unknown keyspace. The view must not
  // outlive the store. Damaged rows are left out of its answers (listed
  // rows are checked against their digests), so a peer sees them missing
  // here and sends its copy.
  virtual absl::StatusOr<std::unique_ptr<tree::TreeView>> NewTreeView(
      absl::string_view keyspace) = 0;

  virtual absl::StatusOr<KeyspaceInfo> GetKeyspace(
      absl::string_view name) const = 0;
  virtual std::vector<KeyspaceInfo> ListKeyspaces() const = 0;

  // Rows per origin, over all keyspaces, tombstones included; origins
  // with no rows are left out; sorted by origin name. The counts are
  // persisted with every commit that changes them (crash-consistent with
  // the rows) and checked by Verify().
  virtual std::vector<OriginRowCount> OriginRowCounts() const = 0;

  // Row counts per leaf of a keyspace (2^depth entries).
  virtual absl::StatusOr<std::vector<uint64_t>> LeafCounts(
      absl::string_view keyspace) const = 0;

  // A copy of a keyspace's current tree.
  virtual absl::StatusOr<tree::MerkleTree> CopyTree(
      absl::string_view keyspace) const = 0;

  // Stored progress of an upstream; kNotFound if none.
  virtual absl::StatusOr<UpstreamProgress> GetProgress(
      absl::string_view upstream) = 0;

  // Reads up to `limit` change-log entries after `after`. Returns
  // kFailedPrecondition when entries after `after` were trimmed (the
  // reader must resynchronise some other way).
  virtual absl::StatusOr<std::vector<ChangeEntry>> ReadChanges(
      Sequence after, size_t limit) = 0;
  virtual Sequence last_sequence() const = 0;
  // The oldest entry the change log still holds (last_sequence() + 1 when
  // it is empty): retention removed the ones before it.
  virtual Sequence first_sequence() const = 0;

  // Retention: removes the change-log entries up to `through` (clamped to
  // last_sequence()), in batches, each recording the new start in the same
  // WriteBatch. The leaves are checkpointed first when the entries still
  // carry leaf changes an open would replay. Returns how many were removed.
  virtual absl::StatusOr<uint64_t> TrimChangeLog(Sequence through) = 0;

  // Removes up to `limit` tombstones that arrived at this store before
  // `before` — by this store's physical clock when it committed them, not
  // by the tombstone's own timestamp, which a node whose clock runs behind
  // makes look old (oldest first; found through an index, not a scan)
  // through the commit
  // path: each is erased only if it is still that tombstone, and the tree
  // changes with it. Afterwards replicated tombstones older than `before`
  // for keys this store does not hold are not applied, so that a peer that
  // has not purged yet cannot bring them back. The caller decides when a
  // tombstone is safe to purge (every peer has seen it). Returns how many
  // were removed.
  virtual absl::StatusOr<uint64_t> PurgeTombstones(tree::HlcTimestamp before,
                                                   size_t limit) = 0;

  // Corrects the rows per origin after a commit replaced a damaged row
  // whose record did not even decode: its origin was unknown, so that
  // origin kept counting it. Reads every row at one snapshot, without
  // holding up commits, then moves each count by what it was off at the
  // snapshot. Returns how many origins' counts changed; 0 at once when no
  // such commit happened since the last recount (the maintenance loop
  // calls it every pass). Such a commit also makes the next open recount.
  virtual absl::StatusOr<uint64_t> RecountOriginRows() = 0;

  // Recomputes `count` leaves of a keyspace from `first_leaf` (clamped to
  // the keyspace's leaves) from their rows, checking every row against its
  // digest: damaged rows are marked and left out, and a leaf that
  // disagrees with its sound rows is corrected, durably. Anti-entropy then
  // sees the difference and brings the peers' copies. kNotFound for an
  // unknown keyspace. The background scrubber calls this a few leaves at a
  // time.
  virtual absl::StatusOr<ScrubReport> ScrubLeaves(absl::string_view keyspace,
                                                  uint64_t first_leaf,
                                                  uint64_t count) = 0;
  // Rows currently marked damaged (awaiting a peer's copy or a new write).
  virtual uint64_t damaged_rows() const = 0;

  // Rows replaced by the tie rule since the store opened: a row of the same
  // version as the stored one but other content, whose digest is the higher
  // (CompareRows in storage/write_request.h), so that both replicas of a
  // tie keep the same row.
  virtual uint64_t ties_resolved() const = 0;

  // The row filters' state and what they saved (RowFilterStats).
  virtual RowFilterStats row_filter_stats() const = 0;

  // The backend position the last commit that carried one wrote
  // (WriteRequest::backend_position), as durable as that commit; nullopt
  // when none ever did. A backend reads it after Open to resume its stream
  // after what the store holds. kDataLoss for a corrupted record.
  virtual absl::StatusOr<std::optional<BackendPosition>> backend_position() = 0;

  // Registers a listener; returns an id for RemoveChangeListener. Once
  // RemoveChangeListener returns, the listener is not running and is never
  // called again, so what it refers to may be destroyed.
  virtual int AddChangeListener(ChangeListener listener) = 0;
  virtual void RemoveChangeListener(int id) = 0;

  // Recomputes every row digest and leaf from the rows and compares them
  // with the stored rows, the persisted leaves and the in-memory tree;
  // also the rows per origin with the stored and in-memory counts.
  // Returns an error only when it cannot read; mismatches go in the report.
  virtual absl::StatusOr<VerifyReport> Verify() = 0;

  // The clock that stamps local writes.
  virtual tree::HybridClock& clock() = 0;

  // OK while the store accepts writes. After a LevelDB write fails (a full
  // disk, an I/O error) the store refuses every later write with this
  // kUnavailable error, which names the first failure: LevelDB's log may
  // end in a partial record that a later record would follow at the wrong
  // offset, to be dropped at the next open although it was acknowledged.
  // Reads go on. Reopening the store (restarting the node) recovers every
  // acknowledged write and clears it.
  virtual absl::Status write_status() const = 0;

 protected:
  Store() = default;
};

// What RepairStore did.
struct RepairReport {
  // Table files with unreadable blocks: each was replaced by a table of its
  // readable entries (or, when its footer or index was damaged, dropped),
  // and the original moved into `dir`/lost. One line each, naming the file
  // and LevelDB's error.
  std::vector<std::string> damaged_tables;
  uint64_t rows_removed = 0;  // rows that did not match their own digest
  // Keyspaces whose record was lost, named again from the names given
  // (one line each).
  std::vector<std::string> renamed_keyspaces;
  // Rows of keyspaces whose record was lost and that no name given fits:
  // kept in the store, outside every keyspace, and never served.
  uint64_t rows_unattributed = 0;
  std::vector<uint32_t> unattributed_keyspaces;  // their keyspace ids
};

// Salvages the store in `dir` when it no longer opens (a damaged or missing
// log, a missing CURRENT or MANIFEST, a damaged table). Every table is read
// first with its checksums verified, and a damaged one is rewritten with the
// entries of its sound blocks; then LevelDB's RepairDB reads every table and
// log, keeps what is readable and moves the files it replaced or could not
// read to `dir`/lost. Nothing is deleted. Run it on a stopped node, then
// Open and Verify the store; the rows it lost come back from peers through
// anti-entropy. Then every record derived from the rows (leaves, rows per
// origin, tombstone index) is rewritten from them, and rows that do not
// match their own digest are removed. A keyspace whose record was lost is
// named again when its rows digest under one of `keyspaces` (a row's digest
// covers its keyspace's name); its rows are kept either way. The node's
// name, when every record of it was lost, comes from options.node_name.
// Uses options.env, options.backend, options.node_name,
// options.default_depth and the tuning options only. Returns kNotFound when
// `dir` holds no LevelDB files, kUnavailable when it is locked by a running
// process, and LevelDB's error otherwise.
absl::StatusOr<RepairReport> RepairStore(
    const std::string& dir, const StoreOptions& options,
    const std::vector<std::string>& keyspaces = {"default"});

// Whether the store in `dir` found a table block it could not decode since
// it was last salvaged: a running store writes the file
// kTablesDamagedFile into its directory when it does
// (StoreOptions::on_table_damage), and RepairStore removes it. A node
// salvages such a store before it opens it again.
inline constexpr char kTablesDamagedFile[] = "TABLES-DAMAGED";
bool TablesReportedDamaged(const std::string& dir);

// Reads every LevelDB table in `dir` with its checksums verified, without
// opening the store (which may abort on a damaged block: LevelDB reads
// tables unchecked). Returns one line per damaged table, naming the file and
// LevelDB's error; empty when all are sound.
absl::StatusOr<std::vector<std::string>> CheckTableFiles(
    const std::string& dir, const StoreOptions& options);

}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_STORE_H_
