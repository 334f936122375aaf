// StoreImpl: the LevelDB implementation of Store (storage/store.h), private
// to storage/. Its methods are spread over storage/store*.cc by operation
// (open, write, read, change log, purge, scrub, verify).
//
// StoreImpl orchestrates; the state with invariants of its own lives in
// components, each with its own lock:
//   WriteQueue       (internal/write_queue.h) the writer queue;
//   Catalogue        (internal/catalogue.h) keyspaces, trees, origins and
//                    per-origin counts, changed only by installing a
//                    commit's CatalogueEdit;
//   LeafCheckpoints  (internal/leaf_checkpoints.h) the dirty leaves;
//   ChangeLog        (internal/change_log.h) the log's bounds and listeners.
// Writes follow LevelDB's model: each writer joins the queue; the writer at
// the front is the leader, stages one group commit for everyone behind it
// (a StagedCommit: one WriteBatch plus the in-memory changes), writes it,
// and installs the in-memory changes once the batch is durable.
//
// Locks. commit_mu_ is the commit token: the leader holds it from staging
// to Install, and Verify, ScrubLeaves and a trim's checkpoint take it, so
// that each sees rows, leaves and trees at one commit boundary. It is the
// one lock held across LevelDB I/O (the commit's reads of the rows it
// changes and its own, fsync'd, write; a scrub's reads and its write),
// because releasing it there would let a reader of the trees see a commit
// half installed; no data lock (the components', damaged_mu_,
// write_failure_mu_) is ever held across LevelDB I/O or a wait. Order:
// ChangeLog's trim lock, then commit_mu_, then any one data lock; the data
// locks are leaves (none is held while taking another), except that change
// listeners are called under ChangeLog's listener lock. The leader-only
// helpers below are annotated ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_) and
// assert it.
//
// Thread-safe: every public method may be called from any thread.
#ifndef TALLY_STORAGE_INTERNAL_STORE_IMPL_H_
#define TALLY_STORAGE_INTERNAL_STORE_IMPL_H_

#include <leveldb/db.h>
#include <leveldb/iterator.h>
#include <leveldb/write_batch.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "storage/internal/catalogue.h"
#include "storage/internal/change_log.h"
#include "storage/internal/coding.h"
#include "storage/internal/commit_rules.h"
#include "storage/internal/ids.h"
#include "storage/internal/leaf_checkpoints.h"
#include "storage/internal/leveldb_status.h"
#include "storage/internal/records.h"
#include "storage/internal/row_presence.h"
#include "storage/internal/slice.h"
#include "storage/internal/snapshot_row_reader.h"
#include "storage/internal/write_queue.h"
#include "storage/leveldb_config.h"
#include "storage/row_backend.h"
#include "storage/store.h"

namespace tally {
namespace storage {
namespace internal {

// The origin id of this node's own writes.
constexpr uint32_t kLocalOriginId = 1;

// The kDataLoss error for a record that does not parse.
inline absl::Status Corrupt(absl::string_view what,
                            absl::string_view record_key) {
  return absl::DataLossError(absl::StrFormat(
      "corrupted %s record (key %s)", what, absl::CHexEscape(record_key)));
}

// One request in the writer queue: a write, or a keyspace to create.
struct PendingWrite : WriteQueue::Writer {
  using Writer::Writer;
  WriteRequest* request = nullptr;
  // LoadAbsent's request: staged by StageAbsent, in a group of its own.
  bool load_absent = false;
  // Set instead of `request` for CreateKeyspace.
  std::optional<std::pair<std::string, int>> create_keyspace;
  // DropKeyspace's erases: taken although their keyspace is being dropped.
  bool drop_erase = false;
  // Set by the leader once the group is committed.
  WriteResult result;
  // Set by the leader instead when it refused this bulk load alone
  // (RowBackend::TakesRows): the request wrote nothing. (A Write's
  // mutations of a keyspace not taken are rejected one by one instead:
  // WriteResult::rejected.)
  absl::Status refusal;
};

// The latest known state of a row while a group is staged: what is in
// LevelDB, overlaid with what earlier mutations of the same group did.
struct StagedRow {
  bool exists = false;
  // Marked damaged ('D'): left out of its leaf, replaced by any write.
  bool damaged = false;
  RowHeader header;

  // The rest is the group's bookkeeping for the backend (ApplyAccepted).
  // The record as LevelDB held it before the group (empty if none): its
  // payload is the backend's compare-and-swap token.
  std::string stored_record;
  // The group's last accepted mutation of the row, if any (its payload is
  // the token for a later one when it was captured).
  const Mutation* written_by = nullptr;
  // Indexes in Group::accepted of the first and the last accepted mutation
  // of the row's current run of rows for the backend (kNoRun: none).
  size_t run_first = kNoRun;
  size_t run_last = kNoRun;
  static constexpr size_t kNoRun = ~size_t{0};
};

// What ScrubRead found (store_scrub.cc).
struct ScrubFindings;

// The SnapshotRowReader it implements is what its tree views use.
class StoreImpl : public Store, private SnapshotRowReader {
 public:
  StoreImpl(std::string dir, StoreOptions options,
            std::unique_ptr<leveldb::DB> db,
            std::unique_ptr<LevelDbConfig> config)
      : dir_(std::move(dir)),
        options_(std::move(options)),
        config_(std::move(config)),
        db_(std::move(db)),
        backend_(options_.backend),
        clock_(tree::HybridClock::Options{options_.max_clock_skew,
                                          options_.physical_clock}) {}

  ~StoreImpl() override {
    StopRowPresenceBuild();
    // A clean close checkpoints the leaves, so that the next open replays
    // nothing. No writer can be running: the owner is destroying us.
    if (db_ != nullptr) {
      absl::MutexLock lock(&commit_mu_);
      (void)CheckpointLeaves();
    }
    db_.reset();
  }

  absl::Status Load();
  // Starts building the row filters of the keyspaces Load() found
  // (internal/row_presence.h) on a thread of their own; the destructor
  // stops it. Called once, after Load().
  void StartRowPresenceBuild();

  const std::string& node_name() const override { return node_name_; }
  Epoch epoch() const override { return epoch_; }
  tree::HybridClock& clock() override { return clock_; }

  absl::Status CreateKeyspace(absl::string_view name, int depth) override;
  absl::StatusOr<uint64_t> DropKeyspace(absl::string_view name) override;
  absl::Status UndropKeyspace(absl::string_view name) override;
  std::vector<DroppedKeyspaceInfo> ListDroppedKeyspaces() const override {
    return catalogue_.ListDropped();
  }
  absl::StatusOr<WriteResult> Write(WriteRequest request) override;
  absl::StatusOr<WriteResult> LoadAbsent(WriteRequest request) override;
  absl::StatusOr<Row> Get(absl::string_view keyspace,
                          absl::string_view key) override;
  absl::StatusOr<std::vector<absl::StatusOr<Row>>> MultiGet(
      absl::string_view keyspace,
      absl::Span<const absl::string_view> keys) override;
  absl::StatusOr<std::string> SchemaFingerprint(
      absl::string_view keyspace) const override {
    return backend_->SchemaFingerprint(keyspace);
  }
  std::string SchemaDescription(absl::string_view keyspace) const override {
    return backend_->SchemaDescription(keyspace);
  }
  absl::StatusOr<std::unique_ptr<tree::TreeView>> NewTreeView(
      absl::string_view keyspace) override;
  absl::StatusOr<KeyspaceInfo> GetKeyspace(
      absl::string_view name) const override;
  std::vector<KeyspaceInfo> ListKeyspaces() const override;
  std::vector<OriginRowCount> OriginRowCounts() const override;
  absl::StatusOr<std::vector<uint64_t>> LeafCounts(
      absl::string_view keyspace) const override;
  absl::StatusOr<tree::MerkleTree> CopyTree(
      absl::string_view keyspace) const override;
  absl::StatusOr<UpstreamProgress> GetProgress(
      absl::string_view upstream) override;
  absl::StatusOr<std::vector<ChangeEntry>> ReadChanges(Sequence after,
                                                       size_t limit) override;
  Sequence last_sequence() const override {
    return change_log_.last_sequence();
  }
  Sequence first_sequence() const override {
    return change_log_.first_sequence();
  }
  absl::StatusOr<uint64_t> TrimChangeLog(Sequence through) override
      ABSL_LOCKS_EXCLUDED(commit_mu_);
  absl::StatusOr<uint64_t> RecountOriginRows() override
      ABSL_LOCKS_EXCLUDED(commit_mu_);
  absl::StatusOr<uint64_t> PurgeTombstones(tree::HlcTimestamp before,
                                           size_t limit) override;
  int AddChangeListener(ChangeListener listener) override;
  void RemoveChangeListener(int id) override;
  absl::StatusOr<VerifyReport> Verify() override;
  absl::Status ScanIndex(
      absl::string_view keyspace,
      absl::FunctionRef<absl::Status(const IndexRecord&)> visit) override;
  absl::Status write_status() const override
      ABSL_LOCKS_EXCLUDED(write_failure_mu_);
  absl::StatusOr<ScrubReport> ScrubLeaves(absl::string_view keyspace,
                                          uint64_t first_leaf,
                                          uint64_t count) override
      ABSL_LOCKS_EXCLUDED(commit_mu_, damaged_mu_);
  uint64_t damaged_rows() const override { return damaged_count_.load(); }
  uint64_t ties_resolved() const override { return ties_resolved_.load(); }
  RowFilterStats row_filter_stats() const override;
  absl::StatusOr<std::optional<BackendPosition>> backend_position() override;

  // When `status` is LevelDB's report of a table block it cannot decode
  // (kDataLoss from LevelDB), writes the damaged-tables file and calls
  // options_.on_table_damage, both once; returns `status`.
  absl::Status NoteTableDamage(absl::Status status);

 private:
  // True if `row_key` is marked damaged. Cheap while nothing is.
  bool IsDamaged(absl::string_view row_key) const
      ABSL_LOCKS_EXCLUDED(damaged_mu_);
  // The value of a row, checked against its digest; kDataLoss when the
  // stored bytes do not match it.
  absl::StatusOr<std::string> CheckedValue(absl::string_view keyspace,
                                           tree::Token token,
                                           absl::string_view key,
                                           const RowHeader& header,
                                           absl::string_view payload) const;
  // SnapshotRowReader (store_row_reader.cc).
  const leveldb::Snapshot* GetSnapshot() override;
  void ReleaseSnapshot(const leveldb::Snapshot* snapshot) override;
  absl::Status ForEachRow(const leveldb::Snapshot* snapshot,
                          uint32_t keyspace_id, const tree::NodeRef& range,
                          CacheFill fill, RowVisitor visit) override;
  // ForEachRow, and with `kInclude` the rows marked damaged too
  // (StoredRow::damaged): ScanIndex's records must be every row LevelDB
  // holds, as LoadAbsent's order check reads them.
  enum class DamagedRows { kSkip, kInclude };
  absl::Status ScanRows(const leveldb::Snapshot* snapshot, uint32_t keyspace_id,
                        const tree::NodeRef& range, CacheFill fill,
                        DamagedRows damaged, RowVisitor visit);
  absl::StatusOr<std::vector<absl::StatusOr<tree::RowEntry>>> CheckedEntries(
      const Keyspace& keyspace, absl::Span<const StoredRow> rows,
      Values values) const override;
  absl::Status MarkDamaged(const Keyspace& keyspace,
                           tree::Token token) override;
  void ReadTree(
      const Keyspace& keyspace,
      absl::FunctionRef<void(const tree::MerkleTree&)> read) const override;
  // Checks a row's value (as the backend returned it) and origin against
  // the row's digest; kDataLoss when they do not match it.
  absl::Status CheckValue(absl::string_view keyspace, tree::Token token,
                          absl::string_view key, const RowHeader& header,
                          absl::string_view value) const;
  // This store's physical clock, for tombstone arrival times.
  tree::HlcTimestamp PhysicalNow() const;
  // Compares the rows per origin counted from the rows at `snapshot` with
  // the persisted counts and `in_memory`; mismatches go in `report`.
  absl::Status VerifyOriginRows(
      const leveldb::Snapshot* snapshot,
      const absl::flat_hash_map<uint32_t, uint64_t>& in_memory,
      VerifyReport* report);
  // Verify of one keyspace's rows at `snapshot`: each row's digest, with
  // the leaves they give in `leaves`; problems go in `report`.
  absl::Status VerifyRows(const leveldb::Snapshot* snapshot, const Keyspace& ks,
                          std::vector<tree::NodeState>* leaves,
                          VerifyReport* report);
  // ScrubLeaves' reading half: the rows of leaves [first_leaf, end),
  // checked. REQUIRES: commit_mu_ held (the caller's).
  absl::Status ScrubRead(const Keyspace& ks, uint64_t first_leaf, uint64_t end,
                         ScrubReport* report, ScrubFindings* found);

  absl::Status ValidateRequest(const WriteRequest& request) const;
  // LoadAbsent's own rules, beyond ValidateRequest's (storage/store.h).
  static absl::Status ValidateAbsent(const WriteRequest& request);
  // Every runtime write to LevelDB goes through here: writes `batch` unless
  // an earlier write failed, and keeps the first failure (write_status()).
  absl::Status WriteToLevelDb(leveldb::WriteBatch* batch, bool sync,
                              absl::string_view what)
      ABSL_LOCKS_EXCLUDED(write_failure_mu_);
  // Runs `writer` through the queue; returns when its group has committed.
  absl::StatusOr<WriteResult> Enqueue(PendingWrite* writer);
  // Stages and commits one group of PendingWrites; called by the leader
  // only, from the queue.
  absl::Status CommitGroup(absl::Span<WriteQueue::Writer* const> group)
      ABSL_LOCKS_EXCLUDED(commit_mu_);
  // The keyspaces `request` writes whose rows the backend does not take now
  // (RowBackend::TakesRows), with its refusal; empty when it takes them
  // all. Captured requests are always taken. The map's keys view
  // `request`'s mutations.
  // A keyspace being dropped or dropped is not taken either, except by a
  // drop's own erases (`drop_erase`).
  absl::flat_hash_map<absl::string_view, absl::Status> NotTaken(
      const WriteRequest& request, bool drop_erase) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // True when the backend takes none of `request`'s keyspaces now (from
  // NotTaken; a dropped keyspace does not count as the backend's refusal).
  bool NoneTaken(const WriteRequest& request,
                 const absl::flat_hash_map<absl::string_view, absl::Status>&
                     not_taken) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // DropKeyspace's steps (storage/store_drop.cc): erases every row of
  // `ks` in committed batches, adding to `*erased` the rows erased; then
  // removes its leaves and record and writes its drop record.
  absl::Status EraseKeyspaceRows(const Keyspace& ks, uint64_t* erased)
      ABSL_LOCKS_EXCLUDED(commit_mu_);
  absl::Status RecordDrop(const Keyspace& ks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // True for a keyspace dropped or being dropped (no message built: asked
  // per mutation).
  bool RefusedAsDropped(absl::string_view keyspace) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // The refusal of a write to a keyspace dropped or being dropped; OK for
  // any other.
  absl::Status DroppedRefusal(absl::string_view keyspace) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);

  // The leader-only helpers of a commit: each REQUIRES commit_mu_.

  // What one group commit stages before it writes: the batch, and the
  // in-memory changes to install once the batch is durable. Only the
  // leader builds one, under commit_mu_.
  struct StagedCommit {
    leveldb::WriteBatch batch;
    // New keyspaces and origins, leaf deltas and per-origin counts, for
    // the catalogue (CatalogueEdit::origin_rows as FinishGroup writes them).
    CatalogueEdit edit;
    Sequence first_sequence = 0;
    Sequence sequence = 0;  // the last sequence staged
    // Rows as this group leaves them, by row key: a key written twice in
    // one group sees its first write.
    absl::flat_hash_map<std::string, StagedRow> staged;
    // Remote timestamps to observe once committed.
    std::vector<tree::HlcTimestamp> observed;
    // A mutation the commit rules accepted, waiting for the backend
    // (StageMutation queues it, ApplyAccepted stages it if applied).
    struct Accepted {
      WriteResult* result = nullptr;
      size_t index = 0;  // its mutation's slot in `result`
      const Mutation* mutation = nullptr;
      std::string row_key;
      tree::Token token = 0;
      int depth = 0;
      uint32_t keyspace_id = 0;
      uint32_t origin_id = 0;
      tree::Version version;
      tree::Digest128 digest;
      internal::Decision decision = internal::Decision::kWrite;
      // The row it was decided against (its stored_record left empty).
      StagedRow before;
      // For the first of a run: before's version, for the backend's token.
      tree::Version before_version;
      // For the first of a run: the captured mutation `before` came from,
      // or nullptr when it is the row LevelDB holds.
      const Mutation* expected_from = nullptr;
      // ApplyMode::kCaptured: the backend has it; it is not sent.
      bool captured = false;
      // The first accepted mutation of its run of rows for the backend: the
      // key's accepted mutations since its last captured one, sent to the
      // backend as one change (the last) against the first one's `before`.
      size_t run_first = 0;
      // A later accepted mutation of its run follows.
      bool superseded = false;
    };
    std::vector<Accepted> accepted;
    // Rows written by the tie rule (commit_rules.h), for ties_resolved().
    uint64_t ties_resolved = 0;
    // Damaged rows this group replaced or erased (their marks go).
    std::vector<std::string> repaired;
    // Arrival time of the tombstones this group writes.
    tree::HlcTimestamp arrival;
    // Rows gained (+) or lost (-) per origin id.
    // A group touches few origins (usually one): small inline vectors,
    // searched linearly, cost no allocation per commit.
    absl::InlinedVector<std::pair<OriginId, int64_t>, 4> origin_row_deltas;
    // The batch is a leaf checkpoint through `sequence` (a LoadAbsent of
    // unlogged rows): no leaf differs from its persisted state after it.
    bool leaves_checkpointed = false;
    // A damaged row whose record did not decode was staged: its origin's
    // count cannot be moved (RecountOriginRows corrects it).
    bool origin_unknown = false;
  };
  StagedCommit StartGroup() ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // kResourceExhausted when `names` (a write's keyspaces) would take the
  // store past max_keyspaces. Writers racing to create keyspaces may pass
  // together: the limit can be passed by at most the writers in flight.
  absl::Status CheckKeyspaceLimit(
      const std::vector<absl::string_view>& names) const;
  // Keyspace id and depth, creating the keyspace in this group if new.
  std::pair<KeyspaceId, int> ResolveKeyspace(StagedCommit& g,
                                             const std::string& name, int depth)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // Short id of an origin, adding it to the origin table if new.
  OriginId ResolveOrigin(StagedCommit& g, const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // The name of origin `id`, known or new in this group; empty if neither.
  std::string OriginNameIn(const StagedCommit& g, OriginId id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // The row as the group sees it: staged, or read from LevelDB (unless
  // row_presence_ says no row of `keyspace` has `token`).
  absl::StatusOr<StagedRow*> CurrentRow(StagedCommit& g,
                                        const std::string& row_key,
                                        KeyspaceId keyspace, tree::Token token)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  tree::HlcTimestamp StampLocalWrite(const StagedRow& current)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // Counts a row that changes hands: `before` (if it exists) loses it, the
  // origin `after` (if set) gains it. Every change to a row's existence or
  // origin must pass here, so that the per-origin counts stay exact.
  static void CountRowChange(StagedCommit& g, const StagedRow& before,
                             std::optional<OriginId> after);
  // Adds a change record and its leaf delta.
  void StageChange(StagedCommit& g, const internal::ChangeRecord& change,
                   tree::Token token, int depth)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // The row as the commit rules see it (storage/internal/commit_rules.h).
  internal::StoredState StoredStateOf(const StagedCommit& g,
                                      const StagedRow& row) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // Decides one mutation under `mode` (the commit rules) and, when it is
  // to apply, queues it in g.accepted for ApplyAccepted. `m` must outlive
  // the group.
  absl::Status StageMutation(StagedCommit& g, const Mutation& m, ApplyMode mode,
                             WriteResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // Stages a LoadAbsent request (checked by ValidateAbsent): every row
  // written as absent, after checking that its first key orders after
  // every row its keyspace holds (kFailedPrecondition if not). With
  // unlogged rows, checkpoints the leaves first and stages the leaves the
  // request changes as a checkpoint in the group's batch.
  absl::Status StageAbsent(StagedCommit& g, const WriteRequest& request,
                           WriteResult* result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // Adds to the group's batch a checkpoint of the leaves its edit changes
  // (their catalogue state plus its deltas; empty for a keyspace the group
  // creates) through g.sequence. REQUIRES: no other leaf is dirty (the
  // leaves were checkpointed under this hold of commit_mu_).
  void StageLeafCheckpoint(StagedCommit& g, bool keyspace_existed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // Once every mutation of the group is decided: asks the backend to apply
  // the accepted rows (one ApplyRows call), then stages the index records,
  // leaves, change log and counts of the rows it applied, and marks the
  // others refused in their results.
  absl::Status ApplyAccepted(StagedCommit& g)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // The compare-and-swap token's payload for the first row of a run.
  absl::string_view ExpectedPayload(const StagedCommit& g,
                                    const StagedCommit::Accepted& first) const;
  // Stages one applied row; `outcome` is the backend's (nullptr when the
  // backend was not asked).
  void StageAccepted(StagedCommit& g, const StagedCommit::Accepted& a,
                     const RowOutcome* outcome)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // Adds the group's metadata records.
  absl::Status FinishGroup(StagedCommit& g)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // After the batch is durable: installs the catalogue edit, clears the
  // repaired damage marks, marks the leaves dirty, tells the change log
  // (and so its listeners), and checkpoints the leaves when due.
  void Install(const StagedCommit& g) ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_)
      ABSL_LOCKS_EXCLUDED(damaged_mu_);
  // Persists every leaf changed since the last checkpoint and the sequence
  // they now include, in one batch. Under commit_mu_, so that the leaves
  // and the sequence are of one commit boundary.
  absl::Status CheckpointLeaves() ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);
  // Counts rows per origin id by scanning every row at `snapshot`.
  absl::StatusOr<absl::flat_hash_map<uint32_t, uint64_t>> CountOriginRows(
      const leveldb::Snapshot* snapshot);
  // Reads the persisted per-origin counts at `snapshot`.
  absl::StatusOr<absl::flat_hash_map<uint32_t, uint64_t>> ReadOriginRows(
      const leveldb::Snapshot* snapshot);

  // The catalogue's, for the files that read by name and raw origin id.
  const Keyspace* FindKeyspace(absl::string_view name) const {
    return catalogue_.Find(name);
  }
  std::string OriginName(uint32_t id) const {
    return catalogue_.OriginName(OriginId(id));
  }
  absl::StatusOr<tree::RowEntry> ToEntry(tree::Token token,
                                         absl::string_view key,
                                         const RowHeader& header) const;

  // Constant after construction.
  const std::string dir_;
  const StoreOptions options_;
  // The database's cache and filter; outlives db_.
  const std::unique_ptr<LevelDbConfig> config_;
  std::unique_ptr<leveldb::DB> db_;
  const std::shared_ptr<RowBackend> backend_;
  tree::HybridClock clock_;
  // The change log's bounds, reads, trims and listeners.
  ChangeLog change_log_{db_.get()};
  // The dirty leaves, their checkpoints and their recovery.
  LeafCheckpoints leaf_checkpoints_{db_.get()};
  // Constant after Load(), which runs before the store is shared.
  std::string node_name_;
  Epoch epoch_ = 0;

  // The writer queue (LevelDB's model): the writer at the front is the
  // leader and commits a group for everyone behind it.
  WriteQueue queue_{WriteQueue::Limits{options_.max_batch_mutations,
                                       options_.max_batch_bytes}};

  // The commit token (see the top of this file): held by the leader from
  // staging to Install, and across the commit's own LevelDB write.
  absl::Mutex commit_mu_;

  // Keyspaces, trees, origins, per-origin counts, next ids.
  Catalogue catalogue_;
  // Keyspaces whose drop is under way (DropKeyspace): their rows are being
  // erased, and no other writer may add one.
  absl::flat_hash_set<std::string> dropping_ ABSL_GUARDED_BY(commit_mu_);
  // The first failed LevelDB write, kept as the kUnavailable error every
  // later write returns. Once LevelDB's log writer has failed an append,
  // the file may end in part of a record while the writer's block offset
  // counts all of it: the records after it would sit at offsets the reader
  // does not expect and be dropped at the next open (seen after a full
  // disk: every write acknowledged after the episode was gone). LevelDB
  // itself stops writing only after a failed sync or compaction, not after
  // a failed append, so the store stops here, for every kind of failure.
  mutable absl::Mutex write_failure_mu_;
  absl::Status write_failure_ ABSL_GUARDED_BY(write_failure_mu_);
  // Replicated tombstones older than this (raw HLC) for absent keys are
  // not applied: this store purged its own.
  std::atomic<uint64_t> purged_before_{0};
  // Row keys marked damaged ('D' records), and how many (read without the
  // lock on every row a scan visits, to skip the lookup while it is 0).
  mutable absl::Mutex damaged_mu_;
  absl::flat_hash_set<std::string> damaged_ ABSL_GUARDED_BY(damaged_mu_);
  std::atomic<uint64_t> damaged_count_{0};
  // A commit staged a row of unknown origin (StagedCommit::origin_unknown)
  // since the last RecountOriginRows.
  std::atomic<bool> origin_recount_needed_{false};
  // Set by the first NoteTableDamage that reported.
  std::atomic<bool> table_damage_noted_{false};
  // Rows the tie rule replaced since the store opened (published after
  // their commit).
  std::atomic<uint64_t> ties_resolved_{0};
  // Which rows may exist (used when options_.row_filter), its builder and
  // the builder's stop flag (store_row_presence.cc).
  RowPresence row_presence_;
  std::thread row_presence_builder_;
  std::atomic<bool> stop_row_presence_build_{false};
  // Rows read before their write, and reads the filter saved.
  std::atomic<uint64_t> rows_read_{0};
  std::atomic<uint64_t> reads_skipped_{0};
  void BuildRowPresence(std::vector<KeyspaceId> keyspaces);
  void StopRowPresenceBuild();

  // The migrations at open (store_migrations.cc). Counts the rows per
  // origin of a store written before the counts were kept.
  absl::Status BuildOriginRows();
  // Rewrites a tombstone index keyed by timestamp into one keyed by
  // arrival (every tombstone arriving now).
  absl::Status MigrateTombstoneIndex();

  // Builds the tombstone index of a store written before it existed.
  absl::Status IndexTombstones();
  // Calls `fn` for every row of every keyspace (one pass, not cached).
  absl::Status ForEachStoredRow(
      const leveldb::Snapshot* snapshot, absl::string_view what,
      const std::function<void(absl::string_view row_key,
                               const RowHeader& header)>& fn);
};

}  // namespace internal
}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_INTERNAL_STORE_IMPL_H_
