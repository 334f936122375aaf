// StoreImpl: the LevelDB implementation of Store (storage/store.h), private
// to storage/. Its methods are implemented in storage/store.cc.
//
// One object owns the LevelDB database, the in-memory state derived from it
// (keyspaces and their Merkle trees, the origin table and per-origin row
// counts, the dirty-leaf set, the change-log bounds, the damaged-row set)
// and the writer queue. Writes follow LevelDB's model: each writer joins
// the queue (queue_mu_); the writer at the front is the leader, stages one
// group commit for everyone behind it into one WriteBatch, writes it, and
// publishes the in-memory changes once it is durable.
//
// Locks, in the order they are taken:
//   trim_mu_     one change-log trim at a time.
//   commit_mu_   the commit token: held by the leader from staging to the
//                tree update, so that Verify sees rows, leaves and tree at
//                one commit boundary. It is the one lock held across the
//                commit's own LevelDB write; it is never held across waits.
//   mu_          the in-memory catalogue (keyspaces, trees, origins, counts,
//                dirty leaves, sequences, damaged rows). Never held across
//                LevelDB I/O.
//   listeners_mu_  change listeners, called under it, so that once
//                RemoveChangeListener returns a listener is never called.
// queue_mu_ guards only the writer queue, and write_failure_mu_ only the
// first failed write; neither is held while taking another.
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
#include "storage/internal/coding.h"
#include "storage/internal/commit_rules.h"
#include "storage/internal/leveldb_status.h"
#include "storage/internal/records.h"
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

// A keyspace and its in-memory tree.
struct Keyspace {
  std::string name;
  uint32_t id = 0;
  int depth = 0;
  tree::MerkleTree tree;
  // Commits that changed the root since the store opened.
  uint64_t root_changes = 0;
};

// One request waiting in the writer queue.
struct Writer {
  WriteRequest* request = nullptr;
  // Set instead of `request` for CreateKeyspace.
  std::optional<std::pair<std::string, int>> create_keyspace;
  size_t bytes = 0;
  absl::StatusOr<WriteResult> result;
  bool done = false;
  absl::CondVar cv;
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

class StoreTreeView;

class StoreImpl : public Store {
 public:
  StoreImpl(StoreOptions options, std::unique_ptr<leveldb::DB> db,
            std::unique_ptr<LevelDbConfig> config)
      : options_(std::move(options)),
        config_(std::move(config)),
        db_(std::move(db)),
        backend_(options_.backend),
        clock_(tree::HybridClock::Options{options_.max_clock_skew,
                                          options_.physical_clock}) {}

  ~StoreImpl() override {
    // A clean close checkpoints the leaves, so that the next open replays
    // nothing. No writer can be running: the owner is destroying us.
    if (db_ != nullptr) {
      absl::MutexLock lock(&commit_mu_);
      (void)CheckpointLeaves();
    }
    db_.reset();
  }

  absl::Status Load();

  const std::string& node_name() const override { return node_name_; }
  Epoch epoch() const override { return epoch_; }
  tree::HybridClock& clock() override { return clock_; }

  absl::Status CreateKeyspace(absl::string_view name, int depth) override;
  absl::StatusOr<WriteResult> Write(WriteRequest request) override;
  absl::StatusOr<Row> Get(absl::string_view keyspace,
                          absl::string_view key) override;
  absl::Status ScanRows(
      absl::string_view keyspace, const tree::NodeRef& range,
      const std::function<absl::Status(const Row&)>& sink) override;
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
    absl::MutexLock lock(&mu_);
    return last_sequence_;
  }
  Sequence first_sequence() const override {
    absl::MutexLock lock(&mu_);
    return trimmed_through_ + 1;
  }
  absl::StatusOr<uint64_t> TrimChangeLog(Sequence through) override
      ABSL_LOCKS_EXCLUDED(trim_mu_, commit_mu_, mu_);
  absl::StatusOr<uint64_t> PurgeTombstones(tree::HlcTimestamp before,
                                           size_t limit) override;
  int AddChangeListener(ChangeListener listener) override;
  void RemoveChangeListener(int id) override;
  absl::StatusOr<VerifyReport> Verify() override;
  absl::Status write_status() const override
      ABSL_LOCKS_EXCLUDED(write_failure_mu_);
  absl::StatusOr<ScrubReport> ScrubLeaves(absl::string_view keyspace,
                                          uint64_t first_leaf,
                                          uint64_t count) override
      ABSL_LOCKS_EXCLUDED(commit_mu_, mu_);
  uint64_t damaged_rows() const override { return damaged_count_.load(); }
  uint64_t ties_resolved() const override { return ties_resolved_.load(); }
  absl::StatusOr<std::optional<BackendPosition>> backend_position() override;

 private:
  // True if `row_key` is marked damaged. Cheap while nothing is.
  bool IsDamaged(absl::string_view row_key) const ABSL_LOCKS_EXCLUDED(mu_);
  // The value of a row, checked against its digest; kDataLoss when the
  // stored bytes do not match it.
  absl::StatusOr<std::string> CheckedValue(absl::string_view keyspace,
                                           tree::Token token,
                                           absl::string_view key,
                                           const RowHeader& header,
                                           absl::string_view payload) const;
  // Recomputes the leaf of `token` (damage found by a read) and returns
  // the read's kDataLoss error.
  absl::Status MarkDamaged(const Keyspace* ks, tree::Token token,
                           absl::Status found);
  // This store's physical clock, for tombstone arrival times.
  tree::HlcTimestamp PhysicalNow() const;
  // Compares the rows per origin counted from the rows at `snapshot` with
  // the persisted counts and `in_memory`; mismatches go in `report`.
  absl::Status VerifyOriginRows(
      const leveldb::Snapshot* snapshot,
      const absl::flat_hash_map<uint32_t, uint64_t>& in_memory,
      VerifyReport* report);
  friend class StoreTreeView;

  // Visits the row records of `range` in `keyspace_id` at `snapshot`.
  // `fn(token, key, header, payload)` returns false to stop early.
  template <typename Fn>
  absl::Status ForEachRow(const leveldb::Snapshot* snapshot,
                          uint32_t keyspace_id, const tree::NodeRef& range,
                          Fn fn);

  absl::Status ValidateRequest(const WriteRequest& request) const;
  // Every runtime write to LevelDB goes through here: writes `batch` unless
  // an earlier write failed, and keeps the first failure (write_status()).
  absl::Status WriteToLevelDb(leveldb::WriteBatch* batch, bool sync,
                              absl::string_view what)
      ABSL_LOCKS_EXCLUDED(write_failure_mu_);
  // Runs `writer` through the queue; returns when its group has committed.
  absl::StatusOr<WriteResult> Enqueue(Writer* writer)
      ABSL_LOCKS_EXCLUDED(queue_mu_);
  // Stages and commits one group; called by the leader only.
  absl::Status CommitGroup(const std::vector<Writer*>& group)
      ABSL_LOCKS_EXCLUDED(mu_);

  // What one group commit stages before it writes: the batch, and the
  // in-memory changes to publish once the batch is durable. Only the leader
  // builds one, under commit_mu_.
  struct Group {
    struct NewKeyspace {
      uint32_t id;
      int depth;
    };
    // A change to apply to an in-memory tree after the commit.
    struct LeafDelta {
      uint32_t keyspace_id;
      uint32_t leaf;
      tree::Digest128 digest;
      int64_t count;
    };
    leveldb::WriteBatch batch;
    uint32_t next_keyspace_id = 0;
    uint32_t next_origin_id = 0;
    uint32_t first_new_origin_id = 0;
    Sequence first_sequence = 0;
    Sequence sequence = 0;  // the last sequence staged
    std::map<std::string, NewKeyspace, std::less<>> new_keyspaces;
    std::map<std::string, uint32_t, std::less<>> new_origins;
    std::vector<LeafDelta> leaf_deltas;
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
    // Rows gained (+) or lost (-) per origin id, and the counts they make,
    // as FinishGroup writes them.
    // A group touches few origins (usually one): small inline vectors,
    // searched linearly, cost no allocation per commit.
    absl::InlinedVector<std::pair<uint32_t, int64_t>, 4> origin_row_deltas;
    absl::InlinedVector<std::pair<uint32_t, uint64_t>, 4> origin_rows;
  };
  Group StartGroup() ABSL_LOCKS_EXCLUDED(mu_);
  // kResourceExhausted when `names` (a write's keyspaces) would take the
  // store past max_keyspaces. Writers racing to create keyspaces may pass
  // together: the limit can be passed by at most the writers in flight.
  absl::Status CheckKeyspaceLimit(
      const std::vector<absl::string_view>& names) const;
  // Keyspace id and depth, creating the keyspace in this group if new.
  std::pair<uint32_t, int> ResolveKeyspace(Group& g, const std::string& name,
                                           int depth) ABSL_LOCKS_EXCLUDED(mu_);
  // Short id of an origin, adding it to the origin table if new.
  uint32_t ResolveOrigin(Group& g, const std::string& name)
      ABSL_LOCKS_EXCLUDED(mu_);
  std::string OriginNameIn(const Group& g, uint32_t id) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The row as the group sees it: staged, or read from LevelDB.
  absl::StatusOr<StagedRow*> CurrentRow(Group& g, const std::string& row_key);
  tree::HlcTimestamp StampLocalWrite(const StagedRow& current);
  // Counts a row that changes hands: `before` (if it exists) loses it, the
  // origin `after` (if set) gains it. Every change to a row's existence or
  // origin must pass here, so that the per-origin counts stay exact.
  static void CountRowChange(Group& g, const StagedRow& before,
                             std::optional<uint32_t> after);
  // Adds a change record and its leaf delta.
  void StageChange(Group& g, const internal::ChangeRecord& change,
                   tree::Token token, int depth);
  // The row as the commit rules see it (storage/internal/commit_rules.h).
  internal::StoredState StoredStateOf(const Group& g,
                                      const StagedRow& row) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Decides one mutation under `mode` (the commit rules) and, when it is
  // to apply, queues it in g.accepted for ApplyAccepted. `m` must outlive
  // the group.
  absl::Status StageMutation(Group& g, const Mutation& m, ApplyMode mode,
                             WriteResult* result);
  // Once every mutation of the group is decided: asks the backend to apply
  // the accepted rows (one ApplyRows call), then stages the index records,
  // leaves, change log and counts of the rows it applied, and marks the
  // others refused in their results.
  absl::Status ApplyAccepted(Group& g);
  // The compare-and-swap token's payload for the first row of a run.
  absl::string_view ExpectedPayload(const Group& g,
                                    const Group::Accepted& first) const;
  // Stages one applied row; `outcome` is the backend's (nullptr when the
  // backend was not asked).
  void StageAccepted(Group& g, const Group::Accepted& a,
                     const RowOutcome* outcome);
  // Adds the group's metadata records.
  absl::Status FinishGroup(Group& g);
  // After the batch committed: trees, tables, listeners, checkpoint.
  void Publish(const Group& g) ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Persists every leaf changed since the last checkpoint and the sequence
  // they now include, in one batch.
  absl::Status CheckpointLeaves() ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Counts rows per origin id by scanning every row at `snapshot`.
  absl::StatusOr<absl::flat_hash_map<uint32_t, uint64_t>> CountOriginRows(
      const leveldb::Snapshot* snapshot);
  // Reads the persisted per-origin counts at `snapshot`.
  absl::StatusOr<absl::flat_hash_map<uint32_t, uint64_t>> ReadOriginRows(
      const leveldb::Snapshot* snapshot);
  // Reads a keyspace's leaves as of `snapshot`: the persisted checkpoint
  // plus the deltas of every change after it.
  absl::StatusOr<std::vector<tree::NodeState>> RecoverLeaves(
      const leveldb::Snapshot* snapshot, uint32_t keyspace_id, int depth,
      Sequence leaves_sequence, std::vector<uint32_t>* replayed_leaves);

  const Keyspace* FindKeyspace(absl::string_view name) const
      ABSL_LOCKS_EXCLUDED(mu_);
  std::string OriginName(uint32_t id) const ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<tree::RowEntry> ToEntry(tree::Token token,
                                         absl::string_view key,
                                         const RowHeader& header) const;

  // Constant after construction.
  const StoreOptions options_;
  // The database's cache and filter; outlives db_.
  const std::unique_ptr<LevelDbConfig> config_;
  std::unique_ptr<leveldb::DB> db_;
  const std::shared_ptr<RowBackend> backend_;
  tree::HybridClock clock_;
  // Constant after Load().
  std::string node_name_;
  Epoch epoch_ = 0;

  // The writer queue (LevelDB's model): the writer at the front is the
  // leader and commits a group for everyone behind it.
  absl::Mutex queue_mu_;
  std::deque<Writer*> writers_ ABSL_GUARDED_BY(queue_mu_);

  // Held by the leader from staging to the tree update, so that Verify sees
  // rows, leaves and tree at one commit boundary. Never held across waits.
  absl::Mutex commit_mu_ ABSL_ACQUIRED_BEFORE(mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Keyspace>, std::less<>> keyspaces_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint32_t, Keyspace*> keyspaces_by_id_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint32_t> origin_ids_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint32_t, std::string> origin_names_ ABSL_GUARDED_BY(mu_);
  uint32_t next_keyspace_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint32_t next_origin_id_ ABSL_GUARDED_BY(mu_) = kLocalOriginId + 1;
  Sequence last_sequence_ ABSL_GUARDED_BY(mu_) = 0;
  // Listeners are called under their own mutex, so that once
  // RemoveChangeListener returns the listener is never called again.
  absl::Mutex listeners_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::map<int, ChangeListener> listeners_ ABSL_GUARDED_BY(listeners_mu_);
  int next_listener_id_ ABSL_GUARDED_BY(listeners_mu_) = 1;
  // Leaf checkpointing (see internal/records.h). Leaves changed since the
  // last checkpoint, as (keyspace id << 32 | leaf), and the last change the
  // persisted leaves include.
  absl::flat_hash_set<uint64_t> dirty_leaves_ ABSL_GUARDED_BY(mu_);
  Sequence leaves_sequence_ ABSL_GUARDED_BY(mu_) = 0;
  // Rows per origin id, as the 'Q' records hold them (zero counts absent).
  absl::flat_hash_map<uint32_t, uint64_t> origin_rows_ ABSL_GUARDED_BY(mu_);
  // Retention: entries up to here are gone (or being removed: it is set
  // before the batch that removes them, so readers never miss one).
  Sequence trimmed_through_ ABSL_GUARDED_BY(mu_) = 0;
  // One trim at a time.
  absl::Mutex trim_mu_ ABSL_ACQUIRED_BEFORE(commit_mu_);
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
  absl::flat_hash_set<std::string> damaged_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> damaged_count_{0};
  // Rows the tie rule replaced since the store opened (published after
  // their commit).
  std::atomic<uint64_t> ties_resolved_{0};

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

template <typename Fn>
absl::Status StoreImpl::ForEachRow(const leveldb::Snapshot* snapshot,
                                   uint32_t keyspace_id,
                                   const tree::NodeRef& range, Fn fn) {
  leveldb::ReadOptions read;
  read.snapshot = snapshot;
  read.fill_cache = false;
  std::unique_ptr<leveldb::Iterator> it(db_->NewIterator(read));
  const std::string prefix = RowKeyPrefix(keyspace_id);
  const tree::Token last = range.last_token();
  for (it->Seek(RowKey(keyspace_id, range.first_token(), "")); it->Valid();
       it->Next()) {
    const leveldb::Slice k = it->key();
    if (!k.starts_with(prefix)) break;
    if (k.size() < kRowKeyHeader) {
      return Corrupt("row key", k.ToString());
    }
    const tree::Token token = DecodeFixed64(k.data() + 5);
    if (token > last) break;
    // Damaged rows are out of the tree until replaced: out of every answer.
    if (damaged_count_.load() > 0 &&
        IsDamaged(absl::string_view(k.data(), k.size()))) {
      continue;
    }
    RowHeader header;
    absl::string_view payload;
    if (!DecodeRowRecord(
            absl::string_view(it->value().data(), it->value().size()), &header,
            &payload)) {
      return Corrupt("row", k.ToString());
    }
    const absl::string_view key(k.data() + kRowKeyHeader,
                                k.size() - kRowKeyHeader);
    absl::StatusOr<bool> more = fn(token, key, header, payload);
    if (!more.ok()) return more.status();
    if (!*more) return absl::OkStatus();
  }
  return FromLevelDb(it->status(), "scanning rows");
}

}  // namespace internal
}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_INTERNAL_STORE_IMPL_H_
