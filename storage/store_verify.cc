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
    absl::MutexLock lock(&mu_);
    leaves_sequence = leaves_sequence_;
    memory_origin_rows = origin_rows_;
    for (const std::string& row_key : damaged_) {
      damaged.push_back(row_key);
    }
    for (const auto& [name, ks] : keyspaces_) {
      trees.emplace_back(ks.get(), ks->tree.Copy());
    }
  }
  VerifyReport report;
  std::sort(damaged.begin(), damaged.end());
  for (const std::string& row_key : damaged) {
    // Left out of the leaves below; sound again once a peer's copy or a
    // new write replaces it.
    report.problems.push_back(absl::StrFormat(
        "row '%s' (keyspace id %d) is damaged and awaits a peer's copy",
        absl::CHexEscape(row_key.substr(internal::kRowKeyHeader)),
        DecodeFixed32(row_key.data() + 1)));
  }
  absl::Status status;
  for (const auto& [ks, memory_tree] : trees) {
    ++report.keyspaces;
    std::vector<tree::NodeState> leaves(uint64_t{1} << ks->depth);
    // `ks = ks`: a C++17 lambda may not capture a structured binding (Clang
    // refuses it; C++20 allows it).
    status = ForEachRow(
        snapshot, ks->id, NodeRef{0, 0},
        [&, ks = ks](Token token, absl::string_view key,
                     const RowHeader& header,
                     absl::string_view payload) -> absl::StatusOr<bool> {
          ++report.rows;
          if (token != tree::TokenOf(key)) {
            report.problems.push_back(absl::StrFormat(
                "keyspace '%s': row '%s' is stored under the wrong token",
                ks->name, absl::CHexEscape(key)));
          }
          const std::string origin = OriginName(header.origin_id);
          absl::StatusOr<std::string> value =
              backend_->ReadValue(RowLocation{ks->name, token, key}, payload);
          if (origin.empty() || !value.ok()) {
            report.problems.push_back(absl::StrFormat(
                "keyspace '%s': row '%s' cannot be read back (%s)", ks->name,
                absl::CHexEscape(key),
                origin.empty() ? "unknown origin" : value.status().ToString()));
          } else {
            const Digest128 digest = tree::RowDigest(
                ks->name, key, Version{header.timestamp, origin},
                header.deleted, *value);
            if (digest != header.digest) {
              report.problems.push_back(absl::StrFormat(
                  "keyspace '%s': row '%s' has digest %s but its content "
                  "digests to %s",
                  ks->name, absl::CHexEscape(key), header.digest.ToHex(),
                  digest.ToHex()));
            }
          }
          tree::NodeState& leaf = leaves[tree::NodeIndexOf(token, ks->depth)];
          leaf.digest ^= header.digest;
          leaf.count += 1;
          return true;
        });
    if (!status.ok()) break;

    absl::StatusOr<std::vector<tree::NodeState>> persisted =
        RecoverLeaves(snapshot, ks->id, ks->depth, leaves_sequence, nullptr);
    if (!persisted.ok()) {
      report.problems.push_back(absl::StrFormat(
          "keyspace '%s': the persisted leaves cannot be read: %s", ks->name,
          persisted.status().ToString()));
      continue;
    }
    for (uint64_t leaf = 0; leaf < leaves.size(); ++leaf) {
      const tree::NodeState& stored = (*persisted)[leaf];
      if (leaves[leaf] != stored) {
        report.problems.push_back(absl::StrFormat(
            "keyspace '%s' leaf %d: rows give %s/%d rows, the stored leaf "
            "%s/%d",
            ks->name, leaf, leaves[leaf].digest.ToHex(), leaves[leaf].count,
            stored.digest.ToHex(), stored.count));
      }
      if (leaves[leaf] != memory_tree.leaf(leaf)) {
        report.problems.push_back(absl::StrFormat(
            "keyspace '%s' leaf %d: rows give %s/%d rows, the in-memory "
            "tree %s/%d",
            ks->name, leaf, leaves[leaf].digest.ToHex(), leaves[leaf].count,
            memory_tree.leaf(leaf).digest.ToHex(),
            memory_tree.leaf(leaf).count));
      }
    }
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
