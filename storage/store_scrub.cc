// StoreImpl::ScrubLeaves: re-reads a range of leaves, checks every row
// against its digest and marks the damaged ones (storage/store.h).
#include <leveldb/db.h>
#include <leveldb/write_batch.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "storage/internal/coding.h"
#include "storage/internal/leveldb_status.h"
#include "storage/internal/prefix_scan.h"
#include "storage/internal/records.h"
#include "storage/internal/slice.h"
#include "storage/internal/store_impl.h"
#include "storage/leveldb_config.h"
#include "storage/store.h"
#include "tree/status_macros.h"

namespace tally {
namespace storage {
namespace {

using internal::Corrupt;
using internal::RowHeader;
using tree::NodeRef;

}  // namespace

namespace internal {

// What reading a range of leaves found: the leaves to correct, and the
// rows to mark damaged.
struct ScrubFindings {
  struct Fix {
    uint64_t leaf;
    tree::NodeState computed;
  };
  std::vector<Fix> fixes;
  std::vector<std::string> damaged;
};

absl::Status StoreImpl::ScrubRead(const Keyspace& ks, uint64_t first_leaf,
                                  uint64_t end, ScrubReport* report,
                                  ScrubFindings* found) {
  // Checksums off: a block whose checksum fails is still read, row by
  // row, and each row's digest says whether it is sound.
  leveldb::ReadOptions read;
  read.fill_cache = false;
  const std::string prefix = RowKeyPrefix(ks.id.value());
  // The leaf being read, and what its rows give so far.
  uint64_t leaf = first_leaf;
  tree::NodeState computed;
  bool leaf_damaged = false;
  size_t damaged_before = found->damaged.size();
  auto next_leaf = [&] {
    ++leaf;
    computed = tree::NodeState();
    leaf_damaged = false;
    damaged_before = found->damaged.size();
  };
  auto finish_leaf = [&] {
    ++report->leaves;
    const tree::NodeState stored = catalogue_.ReadTree(
        ks, [&](const tree::MerkleTree& tree) { return tree.leaf(leaf); });
    if (leaf_damaged || stored != computed) {
      found->fixes.push_back({leaf, computed});
    }
    next_leaf();
  };
  while (leaf < end) {
    // One seek per step, not per leaf: rows come in token order, leaf
    // after leaf. A seek again only after a block that cannot be read.
    absl::Status check_failed;
    const absl::Status scanned = ScanPrefix(
        *db_, read, prefix,
        RowKey(ks.id.value(), NodeRef{ks.depth, leaf}.first_token(), ""),
        "scrubbing rows",
        [&](absl::string_view row_key,
            absl::string_view value) -> absl::StatusOr<bool> {
          ParsedRowKey parsed;
          if (!ParseRowKey(row_key, &parsed)) return false;
          while (parsed.token > NodeRef{ks.depth, leaf}.last_token()) {
            finish_leaf();
            if (leaf >= end) return false;
          }
          if (IsDamaged(row_key)) return true;
          ++report->rows_checked;
          RowHeader header;
          absl::string_view payload;
          absl::Status check = Corrupt("row", row_key);
          if (DecodeRowRecord(value, &header, &payload)) {
            check =
                CheckedValue(ks.name, parsed.token, parsed.key, header, payload)
                    .status();
          }
          // Only damage marks a row; a backend that cannot answer now
          // fails the step, to be retried.
          if (!check.ok() && !absl::IsDataLoss(check)) {
            check_failed = check;
            return false;
          }
          if (!check.ok()) {
            found->damaged.emplace_back(row_key);
            leaf_damaged = true;
            return true;
          }
          computed.digest ^= header.digest;
          computed.count += 1;
          return true;
        });
    TALLY_RETURN_IF_ERROR(check_failed);
    if (!scanned.ok()) {
      // A block LevelDB cannot decode at all: which rows it holds is
      // unknown, so the leaf is left as it is (a repair could not replace
      // rows the commit path cannot read either). Reads of them keep
      // answering DATA_LOSS until the table is salvaged, which the
      // damaged-tables file asks of the next open.
      (void)NoteTableDamage(scanned);
      ++report->leaves;
      ++report->unreadable;
      // Marked only with their leaf fixed.
      found->damaged.resize(damaged_before);
      next_leaf();
      continue;
    }
    // No rows left in the keyspace, or past `end`: the rest hold none.
    while (leaf < end) finish_leaf();
  }
  return absl::OkStatus();
}

absl::StatusOr<ScrubReport> StoreImpl::ScrubLeaves(absl::string_view keyspace,
                                                   uint64_t first_leaf,
                                                   uint64_t count) {
  const Keyspace* ks = FindKeyspace(keyspace);
  if (ks == nullptr) {
    return KeyspaceNotFound(keyspace);
  }
  const uint64_t leaves = uint64_t{1} << ks->depth;
  ScrubReport report;
  if (first_leaf >= leaves) return report;
  const uint64_t end = first_leaf + std::min(count, leaves - first_leaf);
  // At a commit boundary, so that the rows read and the leaves corrected
  // are the same state; the leader holds this lock across its I/O too.
  absl::MutexLock commit_lock(&commit_mu_);
  ScrubFindings found;
  TALLY_RETURN_IF_ERROR(ScrubRead(*ks, first_leaf, end, &report, &found));
  std::vector<ScrubFindings::Fix>& fixes = found.fixes;
  std::vector<std::string>& damaged = found.damaged;
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
  for (const ScrubFindings::Fix& fix : fixes) {
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
  for (const ScrubFindings::Fix& fix : fixes) {
    corrected.emplace_back(fix.leaf, fix.computed);
  }
  report.leaves_repaired += catalogue_.SetLeaves(*ks, corrected);
  absl::MutexLock lock(&damaged_mu_);
  for (std::string& row_key : damaged) damaged_.insert(std::move(row_key));
  damaged_count_.store(damaged_.size());
  return report;
}

}  // namespace internal
}  // namespace storage
}  // namespace tally
