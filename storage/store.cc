#include "storage/store.h"

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
#include "storage/internal/prefix_scan.h"
#include "storage/internal/records.h"
#include "storage/internal/repair.h"
#include "storage/internal/slice.h"
#include "storage/internal/store_impl.h"
#include "storage/leveldb_config.h"
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

absl::Status StoreImpl::ForEachStoredRow(
    const leveldb::Snapshot* snapshot, absl::string_view what,
    const std::function<void(absl::string_view row_key,
                             const RowHeader& header)>& fn) {
  leveldb::ReadOptions read;
  read.snapshot = snapshot;
  read.fill_cache = false;  // one pass over everything: keep the cache
  return ScanPrefix(
      *db_, read, TagPrefix(kRowTag), what,
      [&](absl::string_view row_key, absl::string_view value) -> absl::Status {
        RowHeader header;
        absl::string_view payload;
        if (!DecodeRowRecord(value, &header, &payload)) {
          // A damaged row that cannot be decoded is counted nowhere.
          if (IsDamaged(row_key)) return absl::OkStatus();
          return Corrupt("row", row_key);
        }
        fn(row_key, header);
        return absl::OkStatus();
      });
}

absl::StatusOr<absl::flat_hash_map<uint32_t, uint64_t>>
StoreImpl::CountOriginRows(const leveldb::Snapshot* snapshot) {
  absl::flat_hash_map<uint32_t, uint64_t> counts;
  TALLY_RETURN_IF_ERROR(
      ForEachStoredRow(snapshot, "counting rows per origin",
                       [&](absl::string_view, const RowHeader& header) {
                         ++counts[header.origin_id];
                       }));
  return counts;
}

absl::StatusOr<absl::flat_hash_map<uint32_t, uint64_t>>
StoreImpl::ReadOriginRows(const leveldb::Snapshot* snapshot) {
  leveldb::ReadOptions read;
  read.snapshot = snapshot;
  absl::flat_hash_map<uint32_t, uint64_t> counts;
  TALLY_RETURN_IF_ERROR(ScanPrefix(
      *db_, read, TagPrefix(kOriginRowsTag), "reading rows per origin",
      [&](absl::string_view key, absl::string_view value) -> absl::Status {
        uint32_t origin_id;
        uint64_t rows;
        if (!ParseOriginRowsKey(key, &origin_id) ||
            !ParseFixed64Value(value, &rows)) {
          return Corrupt("rows per origin", key);
        }
        counts[origin_id] = rows;
        return absl::OkStatus();
      }));
  return counts;
}

HlcTimestamp StoreImpl::PhysicalNow() const {
  return HlcTimestamp::FromParts(clock_.PhysicalMillis(), 0);
}

absl::StatusOr<std::vector<tree::NodeState>> StoreImpl::RecoverLeaves(
    const leveldb::Snapshot* snapshot, uint32_t keyspace_id, int depth,
    Sequence leaves_sequence, std::vector<uint32_t>* replayed_leaves) {
  leveldb::ReadOptions read;
  read.snapshot = snapshot;
  std::vector<tree::NodeState> leaves(uint64_t{1} << depth);
  TALLY_RETURN_IF_ERROR(ScanPrefix(
      *db_, read, LeafKeyPrefix(keyspace_id), "reading leaves",
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
        if (change.keyspace_id != keyspace_id) return absl::OkStatus();
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

const Keyspace* StoreImpl::FindKeyspace(absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  auto it = keyspaces_.find(name);
  return it == keyspaces_.end() ? nullptr : it->second.get();
}

std::string StoreImpl::OriginName(uint32_t id) const {
  absl::MutexLock lock(&mu_);
  auto it = origin_names_.find(id);
  return it == origin_names_.end() ? std::string() : it->second;
}

}  // namespace internal

}  // namespace storage
}  // namespace tally
