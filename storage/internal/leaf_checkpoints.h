// LeafCheckpoints: which tree leaves have changed since they were last
// persisted, the batch that persists them, and their recovery at open.
//
// A commit does not write the leaves it changes: each change-log entry
// carries its leaf delta (internal/records.h), and the leaves are written
// as a checkpoint every so many changes, with 'M' leaves_sequence, the last
// change the checkpoint includes. Recovery reads the checkpoint and
// replays the deltas of the entries after it.
//
//   LeafCheckpoints checkpoints(db);
//   checkpoints.Recover(leaves_sequence);               // at open
//   ... after each commit: checkpoints.MarkDirty(leaves) ...
//   if (checkpoints.CheckpointDue(last, interval)) {
//     std::vector<LeafRef> dirty = checkpoints.DirtyLeaves();
//     leveldb::WriteBatch batch;
//     LeafCheckpoints::BuildCheckpoint(last, dirty, StatesOf(dirty), &batch);
//     Write(&batch);
//     checkpoints.Checkpointed(last);
//   }
//
// Thread-safe. The dirty set must not change between DirtyLeaves() and
// Checkpointed(): the store marks leaves and checkpoints only under its
// commit lock.
#ifndef TALLY_STORAGE_INTERNAL_LEAF_CHECKPOINTS_H_
#define TALLY_STORAGE_INTERNAL_LEAF_CHECKPOINTS_H_

#include <leveldb/db.h>
#include <leveldb/write_batch.h>

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "storage/internal/ids.h"
#include "storage/store_types.h"
#include "tree/merkle_tree.h"

namespace tally {
namespace storage {
namespace internal {

class LeafCheckpoints {
 public:
  // `db` holds the leaves and must outlive this object.
  explicit LeafCheckpoints(leveldb::DB* db) : db_(db) {}
  LeafCheckpoints(const LeafCheckpoints&) = delete;
  LeafCheckpoints& operator=(const LeafCheckpoints&) = delete;

  // Sets the sequence of the persisted checkpoint, read from the metadata.
  // Called once, at open, before any other method.
  void Recover(Sequence leaves_sequence) ABSL_LOCKS_EXCLUDED(mu_);

  // The last change-log entry the persisted leaves include.
  Sequence sequence() const ABSL_LOCKS_EXCLUDED(mu_);

  // Records that `leaf` differs from its checkpoint.
  void MarkDirty(LeafRef leaf) ABSL_LOCKS_EXCLUDED(mu_);
  void MarkDirty(absl::Span<const LeafRef> leaves) ABSL_LOCKS_EXCLUDED(mu_);

  // True when `last_sequence` is `interval` or more changes past the
  // checkpoint.
  bool CheckpointDue(Sequence last_sequence, uint64_t interval) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // The leaves changed since the checkpoint, in no particular order.
  std::vector<LeafRef> DirtyLeaves() const ABSL_LOCKS_EXCLUDED(mu_);

  // Adds to `batch` a checkpoint of `leaves`, whose states are `states`
  // (same order), including every change through `through`: a record per
  // leaf (removed when the leaf is empty) and 'M' leaves_sequence.
  // REQUIRES: leaves.size() == states.size().
  static void BuildCheckpoint(Sequence through,
                              absl::Span<const LeafRef> leaves,
                              absl::Span<const tree::NodeState> states,
                              leveldb::WriteBatch* batch);

  // After a checkpoint batch through `through` is durable: no leaf is
  // dirty any more.
  // REQUIRES: the leaves checkpointed are DirtyLeaves(), unchanged since.
  void Checkpointed(Sequence through) ABSL_LOCKS_EXCLUDED(mu_);

  // Reads the leaves of a keyspace of depth `depth` as of `snapshot`
  // (nullptr: now): the checkpoint, plus the deltas of every change-log
  // entry after `leaves_sequence`. Adds the leaves the replay changed to
  // `replayed_leaves` if it is not null, once per entry. kDataLoss for a
  // record that does not parse.
  absl::StatusOr<std::vector<tree::NodeState>> RecoverLeaves(
      const leveldb::Snapshot* snapshot, KeyspaceId keyspace, int depth,
      Sequence leaves_sequence, std::vector<uint32_t>* replayed_leaves) const;

 private:
  // Constant after construction.
  leveldb::DB* const db_;

  mutable absl::Mutex mu_;
  absl::flat_hash_set<LeafRef> dirty_ ABSL_GUARDED_BY(mu_);
  Sequence sequence_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace internal
}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_INTERNAL_LEAF_CHECKPOINTS_H_
