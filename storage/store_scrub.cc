// StoreImpl::ScrubLeaves: re-reads a range of leaves, checks every row
// against its digest and marks the damaged ones (storage/store.h).
#include <leveldb/db.h>
#include <leveldb/env.h>
#include <leveldb/write_batch.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "storage/internal/coding.h"
#include "storage/internal/leveldb_status.h"
#include "storage/internal/records.h"
#include "storage/internal/repair.h"
#include "storage/internal/slice.h"
#include "storage/internal/store_impl.h"
#include "storage/leveldb_config.h"
#include "storage/store.h"
#include "storage/store_tree_view.h"
#include "tree/status_macros.h"

namespace tally {
namespace storage {
namespace {

using internal::Corrupt;
using internal::DirectoryState;
using internal::Fixed32String;
using internal::Fixed64String;
using internal::FromLevelDb;
using internal::InspectDirectory;
using internal::kLocalOriginId;
using internal::RecoveryAdvice;
using internal::RowHeader;
using tree::Digest128;
using tree::HlcTimestamp;
using tree::NodeRef;
using tree::Token;
using tree::Version;

}  // namespace

namespace internal {

absl::StatusOr<ScrubReport> StoreImpl::ScrubLeaves(absl::string_view keyspace,
                                                   uint64_t first_leaf,
                                                   uint64_t count) {
  const Keyspace* ks = FindKeyspace(keyspace);
  if (ks == nullptr) {
    return absl::NotFoundError(
        absl::StrFormat("keyspace '%s' does not exist", keyspace));
  }
  const uint64_t leaves = uint64_t{1} << ks->depth;
  ScrubReport report;
  if (first_leaf >= leaves) return report;
  const uint64_t end = first_leaf + std::min(count, leaves - first_leaf);
  // At a commit boundary, so that the rows read and the leaves corrected
  // are the same state; the leader holds this lock across its I/O too.
  absl::MutexLock commit_lock(&commit_mu_);
  // Checksums off: a block whose checksum fails is still read, row by
  // row, and each row's digest says whether it is sound.
  leveldb::ReadOptions read;
  read.fill_cache = false;
  std::unique_ptr<leveldb::Iterator> it(db_->NewIterator(read));
  const std::string prefix = internal::RowKeyPrefix(ks->id.value());
  struct Fix {
    uint64_t leaf;
    tree::NodeState computed;
  };
  std::vector<Fix> fixes;
  std::vector<std::string> damaged;
  // One seek per step: rows come in token order, leaf after leaf.
  it->Seek(internal::RowKey(ks->id.value(),
                            NodeRef{ks->depth, first_leaf}.first_token(), ""));
  for (uint64_t leaf = first_leaf; leaf < end; ++leaf) {
    const NodeRef range{ks->depth, leaf};
    tree::NodeState computed;
    bool leaf_damaged = false;
    const size_t damaged_before = damaged.size();
    for (; it->Valid() && it->key().starts_with(prefix); it->Next()) {
      const absl::string_view row_key = ToStringView(it->key());
      internal::ParsedRowKey parsed;
      if (!internal::ParseRowKey(row_key, &parsed)) break;
      const Token token = parsed.token;
      if (token > range.last_token()) break;
      if (IsDamaged(row_key)) continue;
      ++report.rows_checked;
      const absl::string_view user_key = parsed.key;
      RowHeader header;
      absl::string_view payload;
      absl::Status check = Corrupt("row", row_key);
      if (internal::DecodeRowRecord(ToStringView(it->value()), &header,
                                    &payload)) {
        check =
            CheckedValue(ks->name, token, user_key, header, payload).status();
      }
      // Only damage marks a row; a backend that cannot answer now fails
      // the step, to be retried.
      if (!check.ok() && !absl::IsDataLoss(check)) return check;
      if (!check.ok()) {
        damaged.emplace_back(row_key);
        leaf_damaged = true;
        continue;
      }
      computed.digest ^= header.digest;
      computed.count += 1;
    }
    ++report.leaves;
    if (!it->status().ok()) {
      // A block LevelDB cannot decode at all: which rows it holds is
      // unknown, so the leaf is left as it is (a repair could not replace
      // rows the commit path cannot read either). Reads of them keep
      // answering DATA_LOSS; LevelDB's repair is the way out.
      ++report.unreadable;
      damaged.resize(damaged_before);  // marked only with their leaf fixed
      it.reset(db_->NewIterator(read));
      if (leaf + 1 < end) {
        it->Seek(internal::RowKey(
            ks->id.value(), NodeRef{ks->depth, leaf + 1}.first_token(), ""));
      }
      continue;
    }
    const tree::NodeState stored = catalogue_.ReadTree(
        *ks, [leaf](const tree::MerkleTree& t) { return t.leaf(leaf); });
    if (leaf_damaged || stored != computed) fixes.push_back({leaf, computed});
  }
  report.damaged_rows = damaged.size();
  if (fixes.empty()) return report;

  // The corrected leaves are written as a checkpoint: every leaf the
  // change log still carries deltas for is persisted first, so that an
  // open replays nothing into the corrected ones twice.
  TALLY_RETURN_IF_ERROR(CheckpointLeaves());
  leveldb::WriteBatch batch;
  for (const std::string& row_key : damaged) {
    batch.Put(internal::DamagedKey(row_key), "");
  }
  for (const Fix& fix : fixes) {
    if (fix.computed.count == 0 && fix.computed.digest.IsZero()) {
      batch.Delete(
          internal::LeafKey(ks->id.value(), static_cast<uint32_t>(fix.leaf)));
    } else {
      batch.Put(
          internal::LeafKey(ks->id.value(), static_cast<uint32_t>(fix.leaf)),
          internal::EncodeLeaf(fix.computed.digest, fix.computed.count));
    }
  }
  TALLY_RETURN_IF_ERROR(
      WriteToLevelDb(&batch, /*sync=*/true, "marking damaged rows"));
  std::vector<std::pair<uint64_t, tree::NodeState>> corrected;
  corrected.reserve(fixes.size());
  for (const Fix& fix : fixes) corrected.emplace_back(fix.leaf, fix.computed);
  report.leaves_repaired += catalogue_.SetLeaves(*ks, corrected);
  absl::MutexLock lock(&damaged_mu_);
  for (std::string& row_key : damaged) damaged_.insert(std::move(row_key));
  damaged_count_.store(damaged_.size());
  return report;
}

}  // namespace internal
}  // namespace storage
}  // namespace tally
