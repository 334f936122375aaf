#include "storage/internal/leaf_checkpoints.h"

#include <memory>
#include <string>

#include "storage/internal/coding.h"
#include "storage/internal/leveldb_status.h"
#include "storage/internal/prefix_scan.h"
#include "storage/internal/records.h"
#include "storage/internal/slice.h"
#include "storage/internal/store_impl.h"
#include "tree/status_macros.h"

namespace tally {
namespace storage {
namespace internal {

void LeafCheckpoints::Recover(Sequence leaves_sequence) {
  absl::MutexLock lock(&mu_);
  sequence_ = leaves_sequence;
}

Sequence LeafCheckpoints::sequence() const {
  absl::MutexLock lock(&mu_);
  return sequence_;
}

void LeafCheckpoints::MarkDirty(LeafRef leaf) {
  absl::MutexLock lock(&mu_);
  dirty_.insert(leaf);
}

void LeafCheckpoints::MarkDirty(absl::Span<const LeafRef> leaves) {
  absl::MutexLock lock(&mu_);
  dirty_.insert(leaves.begin(), leaves.end());
}

bool LeafCheckpoints::CheckpointDue(Sequence last_sequence,
                                    uint64_t interval) const {
  absl::MutexLock lock(&mu_);
  return last_sequence - sequence_ >= interval;
}

std::vector<LeafRef> LeafCheckpoints::DirtyLeaves() const {
  absl::MutexLock lock(&mu_);
  return std::vector<LeafRef>(dirty_.begin(), dirty_.end());
}

void LeafCheckpoints::BuildCheckpoint(Sequence through,
                                      absl::Span<const LeafRef> leaves,
                                      absl::Span<const tree::NodeState> states,
                                      leveldb::WriteBatch* batch) {
  for (size_t i = 0; i < leaves.size(); ++i) {
    const std::string key = LeafKey(leaves[i].keyspace.value(), leaves[i].leaf);
    const tree::NodeState& state = states[i];
    if (state.count == 0 && state.digest.IsZero()) {
      batch->Delete(key);
    } else {
      batch->Put(key, EncodeLeaf(state.digest, state.count));
    }
  }
  batch->Put(TaggedKey(kMetaTag, kMetaLeavesSequence), Fixed64String(through));
}

void LeafCheckpoints::Checkpointed(Sequence through) {
  absl::MutexLock lock(&mu_);
  dirty_.clear();
  sequence_ = through;
}

absl::StatusOr<std::vector<tree::NodeState>> LeafCheckpoints::RecoverLeaves(
    const leveldb::Snapshot* snapshot, KeyspaceId keyspace, int depth,
    Sequence leaves_sequence, std::vector<uint32_t>* replayed_leaves) const {
  leveldb::ReadOptions read;
  read.snapshot = snapshot;
  std::vector<tree::NodeState> leaves(uint64_t{1} << depth);
  TALLY_RETURN_IF_ERROR(ScanPrefix(
      *db_, read, LeafKeyPrefix(keyspace.value()), "reading leaves",
      [&](absl::string_view key, absl::string_view value) -> absl::Status {
        ParsedLeafKey leaf;
        tree::NodeState state;
        if (!ParseLeafKey(key, &leaf) || !DecodeLeaf(value, &state) ||
            leaf.leaf >= leaves.size()) {
          return Corrupt("leaf", key);
        }
        leaves[leaf.leaf] = state;
        return absl::OkStatus();
      }));
  // Changes committed after the checkpoint carry their leaf deltas.
  TALLY_RETURN_IF_ERROR(ScanPrefix(
      *db_, read, TagPrefix(kChangeTag), ChangeKey(leaves_sequence + 1),
      "replaying changes",
      [&](absl::string_view key, absl::string_view value) -> absl::Status {
        ChangeRecord change;
        Sequence sequence;
        if (!ParseChangeKey(key, &sequence) ||
            !DecodeChangeRecord(value, &change)) {
          return Corrupt("change", key);
        }
        if (change.keyspace_id != keyspace.value()) return absl::OkStatus();
        const uint64_t index =
            tree::NodeIndexOf(tree::TokenOf(change.key), depth);
        if (replayed_leaves != nullptr) {
          replayed_leaves->push_back(static_cast<uint32_t>(index));
        }
        tree::NodeState& leaf = leaves[index];
        leaf.digest ^= change.digest_delta;
        leaf.count += change.count_delta;
        return absl::OkStatus();
      }));
  return leaves;
}

}  // namespace internal
}  // namespace storage
}  // namespace tally
