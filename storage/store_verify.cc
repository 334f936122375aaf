// StoreImpl::Verify: the offline check that recomputes every row digest,
// leaf and per-origin row count from the rows and compares them with the
// persisted and the in-memory state, at one commit boundary.
#include <algorithm>
#include <initializer_list>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "storage/internal/coding.h"
#include "storage/internal/records.h"
#include "storage/internal/slice.h"
#include "storage/internal/store_impl.h"
#include "tree/status_macros.h"

namespace tally {
namespace storage {
namespace internal {

using tree::Digest128;
using tree::NodeRef;
using tree::Token;
using tree::Version;

absl::Status StoreImpl::VerifyOriginRows(
    const leveldb::Snapshot* snapshot,
    const absl::flat_hash_map<uint32_t, uint64_t>& in_memory,
    VerifyReport* report) {
  TALLY_ASSIGN_OR_RETURN(auto from_rows, CountOriginRows(snapshot));
  TALLY_ASSIGN_OR_RETURN(auto stored, ReadOriginRows(snapshot));
  std::set<uint32_t> ids;
  using Counts = absl::flat_hash_map<uint32_t, uint64_t>;
  for (const Counts* counts :
       std::initializer_list<const Counts*>{&from_rows, &stored, &in_memory}) {
    for (const auto& [id, rows] : *counts) ids.insert(id);
  }
  auto count = [](const absl::flat_hash_map<uint32_t, uint64_t>& counts,
                  uint32_t id) {
    auto it = counts.find(id);
    return it == counts.end() ? uint64_t{0} : it->second;
  };
  for (uint32_t id : ids) {
    const uint64_t rows = count(from_rows, id);
    if (count(stored, id) != rows || count(in_memory, id) != rows) {
      std::string name = OriginName(id);
      report->problems.push_back(absl::StrFormat(
          "origin '%s' (id %d): the rows give %d rows, the stored count %d, "
          "the in-memory count %d",
          name.empty() ? "?" : name, id, rows, count(stored, id),
          count(in_memory, id)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> StoreImpl::RecountOriginRows() {
  if (!origin_recount_needed_.exchange(false)) return 0;
  const leveldb::Snapshot* snapshot;
  {
    // At a commit boundary: the stored counts and the rows agree but for
    // the error being corrected.
    absl::MutexLock commit_lock(&commit_mu_);
    snapshot = db_->GetSnapshot();
  }
  absl::StatusOr<absl::flat_hash_map<uint32_t, uint64_t>> from_rows =
      CountOriginRows(snapshot);
  absl::StatusOr<absl::flat_hash_map<uint32_t, uint64_t>> stored =
      ReadOriginRows(snapshot);
  db_->ReleaseSnapshot(snapshot);
  if (!from_rows.ok() || !stored.ok()) {
    origin_recount_needed_.store(true);  // the next pass tries again
    return !from_rows.ok() ? from_rows.status() : stored.status();
  }
  // What each count was off at the snapshot; commits since moved the
  // counts by their own rows, rightly, so the error is the same now.
  absl::flat_hash_map<uint32_t, int64_t> off;
  for (const auto& [id, rows] : *from_rows)
    off[id] += static_cast<int64_t>(rows);
  for (const auto& [id, rows] : *stored) off[id] -= static_cast<int64_t>(rows);
  absl::MutexLock commit_lock(&commit_mu_);
  StagedCommit g = StartGroup();
  for (const auto& [id, delta] : off) {
    if (delta != 0) g.origin_row_deltas.emplace_back(OriginId(id), delta);
  }
  if (g.origin_row_deltas.empty()) return 0;
  TALLY_RETURN_IF_ERROR(FinishGroup(g));
  g.batch.Put(MetaKey(kMetaOriginRows), Fixed32String(1));
  TALLY_RETURN_IF_ERROR(
      WriteToLevelDb(&g.batch, options_.sync, "correcting rows per origin"));
  Install(g);
  return g.origin_row_deltas.size();
}

namespace {

// Reports the leaves whose rows give another digest or count than the
// persisted leaves or the in-memory tree.
void CompareLeaves(const std::string& keyspace,
                   const std::vector<tree::NodeState>& from_rows,
                   const std::vector<tree::NodeState>& persisted,
                   const tree::MerkleTree& memory_tree, VerifyReport* report) {
  for (uint64_t leaf = 0; leaf < from_rows.size(); ++leaf) {
    const tree::NodeState& rows = from_rows[leaf];
    const tree::NodeState& stored = persisted[leaf];
    if (rows != stored) {
      report->problems.push_back(absl::StrFormat(
          "keyspace '%s' leaf %d: rows give %s/%d rows, the stored leaf "
          "%s/%d",
          keyspace, leaf, rows.digest.ToHex(), rows.count,
          stored.digest.ToHex(), stored.count));
    }
    const tree::NodeState& memory = memory_tree.leaf(leaf);
    if (rows != memory) {
      report->problems.push_back(absl::StrFormat(
          "keyspace '%s' leaf %d: rows give %s/%d rows, the in-memory "
          "tree %s/%d",
          keyspace, leaf, rows.digest.ToHex(), rows.count,
          memory.digest.ToHex(), memory.count));
    }
  }
}

// Reports the damage marks: their rows are left out of the leaves.
void ReportDamaged(std::vector<std::string> damaged, VerifyReport* report) {
  std::sort(damaged.begin(), damaged.end());
  for (const std::string& row_key : damaged) {
    // Sound again once a peer's copy or a new write replaces it.
    ParsedRowKey row;
    if (!ParseRowKey(row_key, &row)) {
      report->problems.push_back(
          absl::StrFormat("a damage mark names '%s', which is not a row key",
                          absl::CHexEscape(row_key)));
      continue;
    }
    report->problems.push_back(absl::StrFormat(
        "row '%s' (keyspace id %d) is damaged and awaits a peer's copy",
        absl::CHexEscape(row.key), row.keyspace_id));
  }
}

}  // namespace

absl::Status StoreImpl::VerifyRows(const leveldb::Snapshot* snapshot,
                                   const Keyspace& ks,
                                   std::vector<tree::NodeState>* leaves,
                                   VerifyReport* report) {
  leaves->assign(uint64_t{1} << ks.depth, tree::NodeState());
  return ForEachRow(
      snapshot, ks.id.value(), NodeRef{0, 0}, CacheFill::kNo,
      [&](const StoredRow& row) -> absl::StatusOr<bool> {
        ++report->rows;
        // Escaped only for a problem: most rows have none.
        auto key = [&row] { return absl::CHexEscape(row.key); };
        if (row.token != tree::TokenOf(row.key)) {
          report->problems.push_back(absl::StrFormat(
              "keyspace '%s': row '%s' is stored under the wrong token",
              ks.name, key()));
        }
        const std::string origin = OriginName(row.header.origin_id);
        absl::StatusOr<std::string> value = backend_->ReadValue(
            RowLocation{ks.name, row.token, row.key}, row.payload);
        if (origin.empty() || !value.ok()) {
          report->problems.push_back(absl::StrFormat(
              "keyspace '%s': row '%s' cannot be read back (%s)", ks.name,
              key(),
              origin.empty() ? "unknown origin" : value.status().ToString()));
        } else {
          const Digest128 digest = tree::RowDigest(
              ks.name, row.key, Version{row.header.timestamp, origin},
              row.header.deleted, *value);
          if (digest != row.header.digest) {
            report->problems.push_back(absl::StrFormat(
                "keyspace '%s': row '%s' has digest %s but its content "
                "digests to %s",
                ks.name, key(), row.header.digest.ToHex(), digest.ToHex()));
          }
        }
        tree::NodeState& leaf =
            (*leaves)[tree::NodeIndexOf(row.token, ks.depth)];
        leaf.digest ^= row.header.digest;
        leaf.count += 1;
        return true;
      });
}

absl::StatusOr<VerifyReport> StoreImpl::Verify() {
  // One commit boundary for rows, persisted leaves and the in-memory trees.
  const leveldb::Snapshot* snapshot;
  Sequence leaves_sequence;
  std::vector<std::pair<const Keyspace*, tree::MerkleTree>> trees;
  absl::flat_hash_map<uint32_t, uint64_t> memory_origin_rows;
  std::vector<std::string> damaged;
  {
    absl::MutexLock commit_lock(&commit_mu_);
    snapshot = db_->GetSnapshot();
    leaves_sequence = leaf_checkpoints_.sequence();
    for (const auto& [id, rows] : catalogue_.AllOriginRows()) {
      memory_origin_rows[id.value()] = rows;
    }
    trees = catalogue_.CopyTrees();
    absl::MutexLock lock(&damaged_mu_);
    for (const std::string& row_key : damaged_) {
      damaged.push_back(row_key);
    }
  }
  VerifyReport report;
  ReportDamaged(std::move(damaged), &report);
  absl::Status status;
  // No structured binding: Clang (before 16) does not let a lambda in the
  // loop capture one.
  for (const auto& keyspace_and_tree : trees) {
    const Keyspace& ks = *keyspace_and_tree.first;
    ++report.keyspaces;
    std::vector<tree::NodeState> leaves;
    status = VerifyRows(snapshot, ks, &leaves, &report);
    if (!status.ok()) break;
    absl::StatusOr<std::vector<tree::NodeState>> persisted =
        leaf_checkpoints_.RecoverLeaves(snapshot, ks.id, ks.depth,
                                        leaves_sequence, nullptr);
    if (!persisted.ok()) {
      report.problems.push_back(absl::StrFormat(
          "keyspace '%s': the persisted leaves cannot be read: %s", ks.name,
          persisted.status().ToString()));
      continue;
    }
    CompareLeaves(ks.name, leaves, *persisted, keyspace_and_tree.second,
                  &report);
  }
  if (status.ok()) {
    status = VerifyOriginRows(snapshot, memory_origin_rows, &report);
  }
  db_->ReleaseSnapshot(snapshot);
  if (!status.ok()) return status;
  return report;
}

}  // namespace internal
}  // namespace storage
}  // namespace tally
