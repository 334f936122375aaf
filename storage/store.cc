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
#include "storage/internal/records.h"
#include "storage/internal/repair.h"
#include "storage/internal/store_impl.h"
#include "storage/leveldb_config.h"
#include "storage/store_tree_view.h"
#include "tree/status_macros.h"

namespace tally {
namespace storage {
namespace {

using internal::Corrupt;
using internal::DecodeFixed32;
using internal::DecodeFixed64;
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
  std::unique_ptr<leveldb::Iterator> it(db_->NewIterator(read));
  for (it->Seek(std::string(1, internal::kRowTag));
       it->Valid() && it->key()[0] == internal::kRowTag; it->Next()) {
    RowHeader header;
    absl::string_view payload;
    const absl::string_view row_key(it->key().data(), it->key().size());
    if (!internal::DecodeRowRecord(
            absl::string_view(it->value().data(), it->value().size()), &header,
            &payload)) {
      // A damaged row that cannot be decoded is counted nowhere.
      if (IsDamaged(row_key)) continue;
      return Corrupt("row", it->key().ToString());
    }
    fn(row_key, header);
  }
  return FromLevelDb(it->status(), what);
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
  std::unique_ptr<leveldb::Iterator> it(db_->NewIterator(read));
  absl::flat_hash_map<uint32_t, uint64_t> counts;
  for (it->Seek(std::string(1, internal::kOriginRowsTag));
       it->Valid() && it->key()[0] == internal::kOriginRowsTag; it->Next()) {
    if (it->key().size() != 5 || it->value().size() != 8) {
      return Corrupt("rows per origin", it->key().ToString());
    }
    counts[DecodeFixed32(it->key().data() + 1)] =
        DecodeFixed64(it->value().data());
  }
  TALLY_RETURN_IF_ERROR(FromLevelDb(it->status(), "reading rows per origin"));
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
  std::unique_ptr<leveldb::Iterator> it(db_->NewIterator(read));
  std::vector<tree::NodeState> leaves(uint64_t{1} << depth);
  const std::string prefix = internal::LeafKey(keyspace_id, 0).substr(0, 5);
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    if (it->key().size() != 9 || it->value().size() != 24) {
      return Corrupt("leaf", it->key().ToString());
    }
    const uint32_t leaf = DecodeFixed32(it->key().data() + 5);
    if (leaf >= leaves.size()) return Corrupt("leaf", it->key().ToString());
    leaves[leaf].digest = Digest128::Load(it->value().data());
    leaves[leaf].count = DecodeFixed64(it->value().data() + 16);
  }
  TALLY_RETURN_IF_ERROR(FromLevelDb(it->status(), "reading leaves"));
  // Changes committed after the checkpoint carry their leaf deltas.
  for (it->Seek(internal::ChangeKey(leaves_sequence + 1));
       it->Valid() && it->key()[0] == internal::kChangeTag; it->Next()) {
    internal::ChangeRecord change;
    if (it->key().size() != 9 ||
        !internal::DecodeChangeRecord(
            absl::string_view(it->value().data(), it->value().size()),
            &change)) {
      return Corrupt("change", it->key().ToString());
    }
    if (change.keyspace_id != keyspace_id) continue;
    const uint64_t index = tree::NodeIndexOf(tree::TokenOf(change.key), depth);
    if (replayed_leaves != nullptr) {
      replayed_leaves->push_back(static_cast<uint32_t>(index));
    }
    tree::NodeState& leaf = leaves[index];
    leaf.digest ^= change.digest_delta;
    leaf.count += change.count_delta;
  }
  TALLY_RETURN_IF_ERROR(FromLevelDb(it->status(), "replaying changes"));
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

absl::StatusOr<tree::RowEntry> StoreImpl::ToEntry(
    Token token, absl::string_view key, const RowHeader& header) const {
  tree::RowEntry entry;
  entry.token = token;
  entry.key = std::string(key);
  entry.version.timestamp = header.timestamp;
  entry.version.origin = OriginName(header.origin_id);
  if (entry.version.origin.empty()) {
    return absl::DataLossError(absl::StrFormat(
        "row '%s' names origin id %d, which the origin table lacks",
        absl::CHexEscape(key), header.origin_id));
  }
  entry.deleted = header.deleted;
  entry.digest = header.digest;
  return entry;
}

bool StoreImpl::IsDamaged(absl::string_view row_key) const {
  if (damaged_count_.load() == 0) return false;
  absl::MutexLock lock(&mu_);
  return damaged_.contains(row_key);
}

absl::StatusOr<std::string> StoreImpl::CheckedValue(
    absl::string_view keyspace, Token token, absl::string_view key,
    const RowHeader& header, absl::string_view payload) const {
  const std::string origin = OriginName(header.origin_id);
  if (origin.empty()) {
    return absl::DataLossError(absl::StrFormat(
        "row '%s' of keyspace '%s' names origin id %d, which the origin "
        "table lacks",
        absl::CHexEscape(key), keyspace, header.origin_id));
  }
  TALLY_ASSIGN_OR_RETURN(
      std::string value,
      backend_->ReadValue(RowLocation{keyspace, token, key}, payload));
  // The digest covers keyspace, key, version, flag and value: a flipped
  // byte anywhere in the record shows here, whatever LevelDB's checksums
  // were told to verify.
  if (token != tree::TokenOf(key) ||
      tree::RowDigest(keyspace, key, Version{header.timestamp, origin},
                      header.deleted, value) != header.digest) {
    return absl::DataLossError(absl::StrFormat(
        "row '%s' of keyspace '%s' is damaged on this node (its stored bytes "
        "do not match its digest); it is not served, and anti-entropy "
        "replaces it with a peer's copy",
        absl::CHexEscape(key), keyspace));
  }
  return value;
}

absl::Status StoreImpl::MarkDamaged(const Keyspace* ks, Token token,
                                    absl::Status found) {
  const uint64_t leaf = tree::NodeIndexOf(token, ks->depth);
  absl::StatusOr<ScrubReport> scrub = ScrubLeaves(ks->name, leaf, 1);
  if (!scrub.ok() && found.ok()) return scrub.status();
  return found;
}

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
  const std::string prefix = internal::RowKeyPrefix(ks->id);
  struct Fix {
    uint64_t leaf;
    tree::NodeState computed;
  };
  std::vector<Fix> fixes;
  std::vector<std::string> damaged;
  // One seek per step: rows come in token order, leaf after leaf.
  it->Seek(internal::RowKey(ks->id,
                            NodeRef{ks->depth, first_leaf}.first_token(), ""));
  for (uint64_t leaf = first_leaf; leaf < end; ++leaf) {
    const NodeRef range{ks->depth, leaf};
    tree::NodeState computed;
    bool leaf_damaged = false;
    const size_t damaged_before = damaged.size();
    for (; it->Valid() && it->key().starts_with(prefix); it->Next()) {
      const leveldb::Slice k = it->key();
      if (k.size() < internal::kRowKeyHeader) break;
      const Token token = DecodeFixed64(k.data() + 5);
      if (token > range.last_token()) break;
      const absl::string_view row_key(k.data(), k.size());
      if (IsDamaged(row_key)) continue;
      ++report.rows_checked;
      const absl::string_view user_key =
          row_key.substr(internal::kRowKeyHeader);
      RowHeader header;
      absl::string_view payload;
      absl::Status check = Corrupt("row", row_key);
      if (internal::DecodeRowRecord(
              absl::string_view(it->value().data(), it->value().size()),
              &header, &payload)) {
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
            ks->id, NodeRef{ks->depth, leaf + 1}.first_token(), ""));
      }
      continue;
    }
    tree::NodeState stored;
    {
      absl::MutexLock lock(&mu_);
      stored = ks->tree.leaf(leaf);
    }
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
      batch.Delete(internal::LeafKey(ks->id, static_cast<uint32_t>(fix.leaf)));
    } else {
      batch.Put(internal::LeafKey(ks->id, static_cast<uint32_t>(fix.leaf)),
                internal::EncodeLeaf(fix.computed.digest, fix.computed.count));
    }
  }
  TALLY_RETURN_IF_ERROR(
      WriteToLevelDb(&batch, /*sync=*/true, "marking damaged rows"));
  absl::MutexLock lock(&mu_);
  Keyspace* mutable_ks = keyspaces_by_id_.at(ks->id);
  const Digest128 root = mutable_ks->tree.root().digest;
  for (const Fix& fix : fixes) {
    const tree::NodeState& now = mutable_ks->tree.leaf(fix.leaf);
    if (now != fix.computed) ++report.leaves_repaired;
    mutable_ks->tree.Update(fix.leaf, now.digest ^ fix.computed.digest,
                            static_cast<int64_t>(fix.computed.count) -
                                static_cast<int64_t>(now.count));
  }
  if (mutable_ks->tree.root().digest != root) ++mutable_ks->root_changes;
  for (std::string& row_key : damaged) damaged_.insert(std::move(row_key));
  damaged_count_.store(damaged_.size());
  return report;
}

// ---------------------------------------------------------------- writes

absl::Status StoreImpl::ValidateRequest(const WriteRequest& request) const {
  if (request.mutations.size() > options_.max_batch_mutations) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "batch has %d mutations; the limit is %d (max_batch_mutations)",
        request.mutations.size(), options_.max_batch_mutations));
  }
  size_t bytes = 0;
  for (const Mutation& m : request.mutations) {
    TALLY_RETURN_IF_ERROR(ValidateKeyspaceName(m.keyspace));
    if (m.key.empty()) {
      return absl::InvalidArgumentError("key is empty; keys need 1 byte");
    }
    if (m.key.size() > options_.max_key_bytes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("key is %d bytes; the limit is %d (max_key_bytes)",
                          m.key.size(), options_.max_key_bytes));
    }
    if (m.value.size() > options_.max_value_bytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "value of key '%s' is %d bytes; the limit is %d (max_value_bytes)",
          absl::CHexEscape(m.key.substr(0, 64)), m.value.size(),
          options_.max_value_bytes));
    }
    if (m.deleted && !m.value.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "delete of key '%s' carries a value", absl::CHexEscape(m.key)));
    }
    if (request.mode == ApplyMode::kPurgeTombstones &&
        (!m.erase || !m.version.has_value())) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "a tombstone purge holds only erases with the tombstone's version "
          "(key '%s')",
          absl::CHexEscape(m.key)));
    }
    if (m.erase && request.mode == ApplyMode::kLastWriterWins) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "erase of key '%s' outside a source override; use a delete",
          absl::CHexEscape(m.key)));
    }
    if (m.erase && (m.deleted || !m.value.empty())) {
      return absl::InvalidArgumentError(
          absl::StrFormat("erase of key '%s' carries a value or a delete flag",
                          absl::CHexEscape(m.key)));
    }
    if (request.mode == ApplyMode::kSourceOverride && !m.erase &&
        !m.version.has_value()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "row '%s' of a source override has no version; the source's "
          "version is required",
          absl::CHexEscape(m.key)));
    }
    if (m.version.has_value()) {
      TALLY_RETURN_IF_ERROR(ValidateNodeName(m.version->origin));
      if (m.version->timestamp.IsZero()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("replicated row '%s' has a zero timestamp",
                            absl::CHexEscape(m.key)));
      }
      TALLY_RETURN_IF_ERROR(clock_.Check(m.version->timestamp));
    }
    bytes += m.keyspace.size() + m.key.size() + m.value.size();
  }
  if (bytes > options_.max_batch_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("batch is %d bytes; the limit is %d (max_batch_bytes)",
                        bytes, options_.max_batch_bytes));
  }
  if (request.progress.has_value()) {
    TALLY_RETURN_IF_ERROR(ValidateNodeName(request.progress->upstream));
  }
  return absl::OkStatus();
}

absl::Status StoreImpl::CheckKeyspaceLimit(
    const std::vector<absl::string_view>& names) const {
  absl::flat_hash_set<absl::string_view> new_names;
  absl::string_view first_new;
  for (absl::string_view name : names) {
    if (new_names.contains(name) || FindKeyspace(name) != nullptr) continue;
    if (new_names.empty()) first_new = name;
    new_names.insert(name);
  }
  if (new_names.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (keyspaces_.size() + new_names.size() > options_.max_keyspaces) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "keyspace '%s' would be a new keyspace; this store holds %d and the "
        "limit is %d (max_keyspaces)",
        first_new, keyspaces_.size(), options_.max_keyspaces));
  }
  return absl::OkStatus();
}

absl::StatusOr<WriteResult> StoreImpl::Write(WriteRequest request) {
  TALLY_RETURN_IF_ERROR(ValidateRequest(request));
  {
    // Distinct keyspace names, in order; requests rarely carry more than one.
    std::vector<absl::string_view> names;
    for (const Mutation& m : request.mutations) {
      if (names.empty() || names.back() != m.keyspace) {
        names.push_back(m.keyspace);
      }
    }
    TALLY_RETURN_IF_ERROR(CheckKeyspaceLimit(names));
  }
  Writer writer;
  writer.request = &request;
  for (const Mutation& m : request.mutations) {
    writer.bytes += m.keyspace.size() + m.key.size() + m.value.size();
  }
  return Enqueue(&writer);
}

absl::Status StoreImpl::CreateKeyspace(absl::string_view name, int depth) {
  TALLY_RETURN_IF_ERROR(ValidateKeyspaceName(name));
  if (depth < tree::kMinDepth || depth > tree::kMaxDepth) {
    return absl::InvalidArgumentError(
        absl::StrFormat("keyspace depth %d is out of range; it must be %d..%d",
                        depth, tree::kMinDepth, tree::kMaxDepth));
  }
  if (const Keyspace* ks = FindKeyspace(name); ks != nullptr) {
    if (ks->depth == depth) return absl::OkStatus();
    return absl::AlreadyExistsError(absl::StrFormat(
        "keyspace '%s' exists with depth %d, not %d", name, ks->depth, depth));
  }
  TALLY_RETURN_IF_ERROR(CheckKeyspaceLimit({name}));
  Writer writer;
  writer.create_keyspace.emplace(std::string(name), depth);
  TALLY_RETURN_IF_ERROR(Enqueue(&writer).status());
  const Keyspace* ks = FindKeyspace(name);
  if (ks != nullptr && ks->depth != depth) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "keyspace '%s' exists with depth %d, not %d", name, ks->depth, depth));
  }
  return absl::OkStatus();
}

absl::StatusOr<WriteResult> StoreImpl::Enqueue(Writer* writer) {
  std::vector<Writer*> group;
  {
    absl::MutexLock lock(&queue_mu_);
    writers_.push_back(writer);
    while (!writer->done && writer != writers_.front()) {
      writer->cv.Wait(&queue_mu_);
    }
    if (writer->done) return std::move(writer->result);
    // Leader: take followers while the group stays within the limits.
    size_t mutations = 0;
    size_t bytes = 0;
    for (Writer* w : writers_) {
      const size_t n = w->request != nullptr ? w->request->mutations.size() : 0;
      if (!group.empty() && (mutations + n > options_.max_batch_mutations ||
                             bytes + w->bytes > options_.max_batch_bytes)) {
        break;
      }
      mutations += n;
      bytes += w->bytes;
      group.push_back(w);
    }
  }

  const absl::Status status = CommitGroup(group);

  absl::MutexLock lock(&queue_mu_);
  for (Writer* w : group) {
    writers_.pop_front();
    if (!status.ok()) w->result = status;
    w->done = true;
    if (w != writer) w->cv.Signal();
  }
  if (!writers_.empty()) writers_.front()->cv.Signal();
  return std::move(writer->result);
}

absl::Status StoreImpl::CommitGroup(const std::vector<Writer*>& group) {
  absl::MutexLock commit_lock(&commit_mu_);
  // Refused before staging: nothing can be committed.
  TALLY_RETURN_IF_ERROR(write_status());
  Group g = StartGroup();
  std::vector<WriteResult> results(group.size());
  for (size_t i = 0; i < group.size(); ++i) {
    Writer* w = group[i];
    if (w->create_keyspace.has_value()) {
      ResolveKeyspace(g, w->create_keyspace->first, w->create_keyspace->second);
      continue;
    }
    WriteRequest& request = *w->request;
    for (Mutation& m : request.mutations) {
      TALLY_RETURN_IF_ERROR(StageMutation(g, m, request.mode, &results[i]));
    }
    if (request.progress.has_value()) {
      std::string v = Fixed64String(request.progress->epoch);
      internal::PutFixed64(&v, request.progress->sequence);
      g.batch.Put(internal::TaggedKey(internal::kProgressTag,
                                      request.progress->upstream),
                  v);
    }
  }
  TALLY_RETURN_IF_ERROR(FinishGroup(g));
  TALLY_RETURN_IF_ERROR(WriteToLevelDb(&g.batch, options_.sync, "committing"));
  for (size_t i = 0; i < group.size(); ++i) {
    group[i]->result = std::move(results[i]);
  }
  Publish(g);
  return absl::OkStatus();
}

absl::Status StoreImpl::write_status() const {
  absl::MutexLock lock(&write_failure_mu_);
  return write_failure_;
}

absl::Status StoreImpl::WriteToLevelDb(leveldb::WriteBatch* batch, bool sync,
                                       absl::string_view what) {
  TALLY_RETURN_IF_ERROR(write_status());
  leveldb::WriteOptions write;
  write.sync = sync;
  const absl::Status status = FromLevelDb(db_->Write(write, batch), what);
  if (status.ok()) return status;
  absl::Status first;
  {
    absl::MutexLock lock(&write_failure_mu_);
    if (write_failure_.ok()) {
      write_failure_ = absl::UnavailableError(absl::StrCat(
          "the store refuses writes since a write failed (", status.message(),
          "); nothing acknowledged is lost: fix the cause (free disk space?) "
          "and restart the node, which reopens the store"));
      first = write_failure_;
    }
  }
  if (!first.ok() && options_.on_write_failure) {
    options_.on_write_failure(first);
  }
  return status;
}

StoreImpl::Group StoreImpl::StartGroup() {
  Group g;
  absl::MutexLock lock(&mu_);
  g.next_keyspace_id = next_keyspace_id_;
  g.next_origin_id = next_origin_id_;
  g.first_new_origin_id = next_origin_id_;
  g.first_sequence = last_sequence_;
  g.sequence = last_sequence_;
  g.arrival = PhysicalNow();
  return g;
}

std::pair<uint32_t, int> StoreImpl::ResolveKeyspace(Group& g,
                                                    const std::string& name,
                                                    int depth) {
  if (const Keyspace* ks = FindKeyspace(name); ks != nullptr) {
    return {ks->id, ks->depth};
  }
  auto it = g.new_keyspaces.find(name);
  if (it == g.new_keyspaces.end()) {
    it = g.new_keyspaces
             .emplace(name, Group::NewKeyspace{g.next_keyspace_id++, depth})
             .first;
    std::string v = Fixed32String(it->second.id);
    v.push_back(static_cast<char>(depth));
    g.batch.Put(internal::TaggedKey(internal::kKeyspaceTag, name), v);
  }
  return {it->second.id, it->second.depth};
}

uint32_t StoreImpl::ResolveOrigin(Group& g, const std::string& name) {
  {
    absl::MutexLock lock(&mu_);
    auto it = origin_ids_.find(name);
    if (it != origin_ids_.end()) return it->second;
  }
  auto it = g.new_origins.find(name);
  if (it == g.new_origins.end()) {
    it = g.new_origins.emplace(name, g.next_origin_id++).first;
    g.batch.Put(internal::OriginByIdKey(it->second), name);
    g.batch.Put(internal::TaggedKey(internal::kOriginByNameTag, name),
                Fixed32String(it->second));
  }
  return it->second;
}

std::string StoreImpl::OriginNameIn(const Group& g, uint32_t id) const {
  if (id < g.first_new_origin_id) return OriginName(id);
  for (const auto& [name, new_id] : g.new_origins) {
    if (new_id == id) return name;
  }
  return std::string();
}

absl::StatusOr<StagedRow*> StoreImpl::CurrentRow(Group& g,
                                                 const std::string& row_key) {
  auto it = g.staged.find(row_key);
  if (it != g.staged.end()) return &it->second;
  StagedRow current;
  current.damaged = IsDamaged(row_key);
  std::string record;
  const leveldb::Status s = db_->Get(leveldb::ReadOptions(), row_key, &record);
  if (s.ok()) {
    absl::string_view payload;
    if (internal::DecodeRowRecord(record, &current.header, &payload)) {
      current.exists = true;
    } else if (!current.damaged) {
      return Corrupt("row", row_key);
    }
    // A damaged record that cannot even be decoded: nothing of it is
    // counted anywhere, so the write treats the row as absent.
  } else if (current.damaged && s.IsCorruption()) {
    // Same: the mark says what the read cannot.
  } else if (!s.IsNotFound()) {
    return FromLevelDb(s, "reading a row before writing it");
  }
  return &g.staged.emplace(row_key, current).first->second;
}

HlcTimestamp StoreImpl::StampLocalWrite(const StagedRow& current) {
  // A local write must win over whatever is stored, even a row stamped by a
  // peer whose clock runs ahead of ours.
  HlcTimestamp t = clock_.Now();
  if (current.exists && !(current.header.timestamp < t)) {
    (void)clock_.Observe(current.header.timestamp);
    t = clock_.Now();
    if (!(current.header.timestamp < t)) {
      t = HlcTimestamp::FromRaw(current.header.timestamp.raw() + 1);
    }
  }
  return t;
}

void StoreImpl::CountRowChange(Group& g, const StagedRow& before,
                               std::optional<uint32_t> after) {
  if (before.exists && after == before.header.origin_id) return;
  auto add = [&g](uint32_t origin_id, int64_t delta) {
    for (auto& [id, sum] : g.origin_row_deltas) {
      if (id == origin_id) {
        sum += delta;
        return;
      }
    }
    g.origin_row_deltas.emplace_back(origin_id, delta);
  };
  if (before.exists) add(before.header.origin_id, -1);
  if (after.has_value()) add(*after, +1);
}

void StoreImpl::StageChange(Group& g, const internal::ChangeRecord& change,
                            Token token, int depth) {
  std::string record;
  internal::EncodeChangeRecord(change, &record);
  g.batch.Put(internal::ChangeKey(++g.sequence), record);
  g.leaf_deltas.push_back(
      Group::LeafDelta{change.keyspace_id,
                       static_cast<uint32_t>(tree::NodeIndexOf(token, depth)),
                       change.digest_delta, change.count_delta});
}

absl::Status StoreImpl::StageMutation(Group& g, Mutation& m, ApplyMode mode,
                                      WriteResult* result) {
  const auto [ks_id, depth] =
      ResolveKeyspace(g, m.keyspace, options_.default_depth);
  const Token token = tree::TokenOf(m.key);
  const std::string row_key = internal::RowKey(ks_id, token, m.key);
  TALLY_ASSIGN_OR_RETURN(StagedRow * current, CurrentRow(g, row_key));

  Version version;
  uint32_t origin_id;
  if (m.version.has_value()) {
    version = *m.version;
    origin_id = ResolveOrigin(g, version.origin);
  } else {
    version = Version{StampLocalWrite(*current), node_name_};
    origin_id = kLocalOriginId;
  }
  auto not_applied = [&](Version kept) {
    result->applied.push_back(false);
    result->versions.push_back(std::move(kept));
    return absl::OkStatus();
  };

  internal::ChangeRecord change;
  change.keyspace_id = ks_id;
  change.timestamp = version.timestamp;
  change.origin_id = origin_id;
  change.key = m.key;
  if (m.erase) {
    // Source override: the source lacks this row. Purge: the tombstone is
    // old enough and every peer has it.
    if (!current->exists && !current->damaged) return not_applied(version);
    if (mode == ApplyMode::kPurgeTombstones &&
        (current->damaged || !current->header.deleted ||
         current->header.timestamp != version.timestamp ||
         current->header.origin_id != origin_id)) {
      return not_applied(version);  // written again since, or damaged
    }
    g.batch.Delete(row_key);
    // The tombstone's 'T' record, if any, is removed by the purge that
    // finds it stale (internal/records.h).
    change.erased = true;
    if (current->damaged) {
      // A damaged row is already out of its leaf.
      g.batch.Delete(internal::DamagedKey(row_key));
      g.repaired.push_back(row_key);
    } else {
      change.digest_delta = current->header.digest;
      change.count_delta = -1;
    }
    StageChange(g, change, token, depth);
    if (current->exists) CountRowChange(g, *current, std::nullopt);
    *current = StagedRow{};
  } else {
    const Digest128 digest =
        tree::RowDigest(m.keyspace, m.key, version, m.deleted, m.value);
    if (current->damaged) {
      // Whatever its version, a sound row replaces a damaged one: the
      // damaged copy usually has the very version of the peer's good copy,
      // which last writer wins would refuse.
    } else if (current->exists && mode == ApplyMode::kSourceOverride) {
      // The source's row replaces ours whenever they differ.
      if (current->header.digest == digest) return not_applied(version);
    } else if (!current->exists && m.deleted && m.version.has_value() &&
               version.timestamp.raw() < purged_before_.load()) {
      // This store purged its tombstones this old: one arriving from a
      // peer that has not purged yet has nothing to delete here.
      return not_applied(version);
    } else if (current->exists) {
      // Last writer wins: compare with the stored version.
      const Version stored{current->header.timestamp,
                           OriginNameIn(g, current->header.origin_id)};
      if (tree::CompareVersions(version, stored) <= 0) {
        return not_applied(stored);
      }
    }
    if (m.version.has_value()) g.observed.push_back(version.timestamp);

    RowHeader header;
    header.timestamp = version.timestamp;
    header.origin_id = origin_id;
    header.deleted = m.deleted;
    header.digest = digest;
    TALLY_ASSIGN_OR_RETURN(
        std::string payload,
        backend_->StageValue(RowLocation{m.keyspace, token, m.key}, m.value));
    std::string record;
    record.reserve(internal::kRowHeaderSize + payload.size());
    internal::EncodeRowHeader(header, &record);
    record.append(payload);
    g.batch.Put(row_key, record);
    if (m.deleted) {
      // Indexed by arrival here; the value says which tombstone it is, so
      // that the purge can tell a stale record (internal/records.h).
      g.batch.Put(internal::TombstoneKey(g.arrival, row_key),
                  Fixed64String(version.timestamp.raw()));
    }

    change.deleted = m.deleted;
    change.digest_delta = header.digest;
    // A damaged row is already out of its leaf.
    const bool in_leaf = current->exists && !current->damaged;
    if (in_leaf) change.digest_delta ^= current->header.digest;
    change.count_delta = in_leaf ? 0 : 1;
    StageChange(g, change, token, depth);
    if (current->damaged) {
      g.batch.Delete(internal::DamagedKey(row_key));
      g.repaired.push_back(row_key);
    }
    CountRowChange(g, *current, origin_id);
    current->exists = true;
    current->damaged = false;
    current->header = header;
  }
  result->applied.push_back(true);
  result->versions.push_back(std::move(version));
  result->last_sequence = g.sequence;
  return absl::OkStatus();
}

absl::Status StoreImpl::FinishGroup(Group& g) {
  if (!g.new_keyspaces.empty()) {
    g.batch.Put(
        internal::TaggedKey(internal::kMetaTag, internal::kMetaNextKeyspaceId),
        Fixed32String(g.next_keyspace_id));
  }
  if (!g.new_origins.empty()) {
    g.batch.Put(
        internal::TaggedKey(internal::kMetaTag, internal::kMetaNextOriginId),
        Fixed32String(g.next_origin_id));
  }
  if (g.sequence != g.first_sequence) {
    g.batch.Put(
        internal::TaggedKey(internal::kMetaTag, internal::kMetaLastSequence),
        Fixed64String(g.sequence));
  }
  // The leader holds commit_mu_: nobody else changes origin_rows_ meanwhile.
  if (!g.origin_row_deltas.empty()) {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, delta] : g.origin_row_deltas) {
      if (delta == 0) continue;
      auto it = origin_rows_.find(id);
      const int64_t before = it == origin_rows_.end() ? 0 : it->second;
      // Never below zero: Verify() reports a count that disagrees with the
      // rows, and a wrapped counter would hide how far off it is.
      const uint64_t after =
          static_cast<uint64_t>(std::max<int64_t>(0, before + delta));
      if (after == 0) {
        g.batch.Delete(internal::OriginRowsKey(id));
      } else {
        g.batch.Put(internal::OriginRowsKey(id), Fixed64String(after));
      }
      g.origin_rows.emplace_back(id, after);
    }
  }
  return backend_->StageCommit(&g.batch);
}

void StoreImpl::Publish(const Group& g) {
  for (const HlcTimestamp& t : g.observed) (void)clock_.Observe(t);
  bool checkpoint_due;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, nk] : g.new_keyspaces) {
      auto ks = std::make_unique<Keyspace>(Keyspace{
          name, nk.id, nk.depth, tree::MerkleTree::Create(nk.depth).value()});
      keyspaces_by_id_[nk.id] = ks.get();
      keyspaces_.emplace(name, std::move(ks));
    }
    next_keyspace_id_ = g.next_keyspace_id;
    for (const auto& [name, id] : g.new_origins) {
      origin_ids_[name] = id;
      origin_names_[id] = name;
    }
    next_origin_id_ = g.next_origin_id;
    // Roots before the group, per keyspace it touches (usually one).
    std::vector<std::pair<Keyspace*, Digest128>> roots;
    for (const Group::LeafDelta& d : g.leaf_deltas) {
      Keyspace* ks = keyspaces_by_id_.at(d.keyspace_id);
      if (roots.empty() || roots.back().first != ks) {
        auto seen = std::find_if(roots.begin(), roots.end(),
                                 [ks](const auto& r) { return r.first == ks; });
        if (seen == roots.end()) roots.emplace_back(ks, ks->tree.root().digest);
      }
      ks->tree.Update(d.leaf, d.digest, d.count);
      dirty_leaves_.insert((uint64_t{d.keyspace_id} << 32) | d.leaf);
    }
    for (const auto& [ks, root] : roots) {
      if (ks->tree.root().digest != root) ++ks->root_changes;
    }
    for (const auto& [id, rows] : g.origin_rows) {
      if (rows == 0) {
        origin_rows_.erase(id);
      } else {
        origin_rows_[id] = rows;
      }
    }
    for (const std::string& row_key : g.repaired) damaged_.erase(row_key);
    damaged_count_.store(damaged_.size());
    last_sequence_ = g.sequence;
    checkpoint_due =
        g.sequence - leaves_sequence_ >= options_.leaf_checkpoint_interval;
  }
  if (g.sequence != g.first_sequence) {
    absl::MutexLock lock(&listeners_mu_);
    for (const auto& [id, listener] : listeners_) listener(g.sequence);
  }
  if (checkpoint_due) {
    // The batch is durable whatever this returns; a failed checkpoint only
    // means a longer replay at the next open.
    (void)CheckpointLeaves();
  }
}

absl::Status StoreImpl::CheckpointLeaves() {
  leveldb::WriteBatch batch;
  Sequence sequence;
  {
    absl::MutexLock lock(&mu_);
    sequence = last_sequence_;
    if (sequence == leaves_sequence_) return absl::OkStatus();
    for (uint64_t where : dirty_leaves_) {
      const uint32_t ks_id = static_cast<uint32_t>(where >> 32);
      const uint32_t leaf = static_cast<uint32_t>(where);
      const tree::NodeState& state =
          keyspaces_by_id_.at(ks_id)->tree.leaf(leaf);
      if (state.count == 0 && state.digest.IsZero()) {
        batch.Delete(internal::LeafKey(ks_id, leaf));
      } else {
        batch.Put(internal::LeafKey(ks_id, leaf),
                  internal::EncodeLeaf(state.digest, state.count));
      }
    }
  }
  batch.Put(
      internal::TaggedKey(internal::kMetaTag, internal::kMetaLeavesSequence),
      Fixed64String(sequence));
  TALLY_RETURN_IF_ERROR(
      WriteToLevelDb(&batch, options_.sync, "checkpointing leaves"));
  absl::MutexLock lock(&mu_);
  dirty_leaves_.clear();
  leaves_sequence_ = sequence;
  return absl::OkStatus();
}

// ----------------------------------------------------------------- reads

absl::StatusOr<Row> StoreImpl::Get(absl::string_view keyspace,
                                   absl::string_view key) {
  TALLY_RETURN_IF_ERROR(ValidateKeyspaceName(keyspace));
  if (key.empty() || key.size() > options_.max_key_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("key is %d bytes; keys are 1..%d bytes (max_key_bytes)",
                        key.size(), options_.max_key_bytes));
  }
  const Keyspace* ks = FindKeyspace(keyspace);
  if (ks == nullptr) {
    return absl::NotFoundError(
        absl::StrFormat("keyspace '%s' does not exist", keyspace));
  }
  const Token token = tree::TokenOf(key);
  const std::string row_key = internal::RowKey(ks->id, token, key);
  if (IsDamaged(row_key)) {
    return absl::DataLossError(absl::StrFormat(
        "row '%s' of keyspace '%s' is damaged on this node (its stored bytes "
        "do not match its digest); it is not served, and anti-entropy "
        "replaces it with a peer's copy",
        absl::CHexEscape(key), keyspace));
  }
  std::string record;
  leveldb::ReadOptions read;
  read.verify_checksums = true;
  leveldb::Status s = db_->Get(read, row_key, &record);
  bool block_damaged = false;
  if (s.IsCorruption()) {
    // The block holding the row fails its checksum. The damage may be in
    // another row of the block: read it unchecked and let the row's own
    // digest decide, then recompute the leaf to find the damaged rows.
    block_damaged = true;
    s = db_->Get(leveldb::ReadOptions(), row_key, &record);
  }
  if (s.IsNotFound()) {
    return absl::NotFoundError(absl::StrFormat(
        "key '%s' is not in keyspace '%s'", absl::CHexEscape(key), keyspace));
  }
  absl::Status found = FromLevelDb(s, "reading a row");
  RowHeader header;
  absl::string_view payload;
  absl::StatusOr<std::string> value;
  if (found.ok() && !internal::DecodeRowRecord(record, &header, &payload)) {
    found = Corrupt("row", row_key);
  }
  if (found.ok()) {
    value = CheckedValue(keyspace, token, key, header, payload);
    found = value.status();
  }
  if (!found.ok()) {
    if (!absl::IsDataLoss(found)) return found;
    return MarkDamaged(ks, token, found);
  }
  if (block_damaged) (void)MarkDamaged(ks, token, absl::OkStatus());
  TALLY_ASSIGN_OR_RETURN(tree::RowEntry entry, ToEntry(token, key, header));
  Row row;
  row.key = std::string(key);
  row.value = *std::move(value);
  row.version = std::move(entry.version);
  row.deleted = header.deleted;
  row.digest = header.digest;
  return row;
}

absl::Status StoreImpl::ScanRows(
    absl::string_view keyspace, const NodeRef& range,
    const std::function<absl::Status(const Row&)>& sink) {
  if (!range.IsValid()) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid token range: ", range.DebugString()));
  }
  const Keyspace* ks = FindKeyspace(keyspace);
  if (ks == nullptr) {
    return absl::NotFoundError(
        absl::StrFormat("keyspace '%s' does not exist", keyspace));
  }
  const leveldb::Snapshot* snapshot = db_->GetSnapshot();
  // A damaged row ends the scan with kDataLoss (after the snapshot is
  // released, since marking it commits).
  std::optional<std::pair<Token, absl::Status>> damaged;
  absl::Status status = ForEachRow(
      snapshot, ks->id, range,
      [&](Token token, absl::string_view key, const RowHeader& header,
          absl::string_view payload) -> absl::StatusOr<bool> {
        absl::StatusOr<std::string> value =
            CheckedValue(keyspace, token, key, header, payload);
        if (absl::IsDataLoss(value.status())) {
          damaged.emplace(token, value.status());
          return false;
        }
        TALLY_RETURN_IF_ERROR(value.status());
        TALLY_ASSIGN_OR_RETURN(tree::RowEntry entry,
                               ToEntry(token, key, header));
        Row row;
        row.key = std::move(entry.key);
        row.value = *std::move(value);
        row.version = std::move(entry.version);
        row.deleted = header.deleted;
        row.digest = header.digest;
        TALLY_RETURN_IF_ERROR(sink(row));
        return true;
      });
  db_->ReleaseSnapshot(snapshot);
  if (status.ok() && damaged.has_value()) {
    auto& [token, found] = *damaged;
    return MarkDamaged(ks, token, found);
  }
  if (status.ok() && damaged_count_.load() > 0) {
    // Rows marked before are skipped by the scan; say so rather than
    // answer without them.
    const std::string first = internal::RowKey(ks->id, range.first_token(), "");
    const std::string prefix = internal::RowKeyPrefix(ks->id);
    absl::MutexLock lock(&mu_);
    for (const std::string& row_key : damaged_) {
      if (row_key.size() < internal::kRowKeyHeader ||
          !absl::StartsWith(row_key, prefix) || row_key < first ||
          DecodeFixed64(row_key.data() + 5) > range.last_token()) {
        continue;
      }
      return absl::DataLossError(absl::StrFormat(
          "row '%s' of keyspace '%s' is damaged on this node; it is not "
          "served, and anti-entropy replaces it with a peer's copy",
          absl::CHexEscape(row_key.substr(internal::kRowKeyHeader)), keyspace));
    }
  }
  return status;
}

absl::StatusOr<std::unique_ptr<tree::TreeView>> StoreImpl::NewTreeView(
    absl::string_view keyspace) {
  const Keyspace* ks = FindKeyspace(keyspace);
  if (ks == nullptr) {
    return absl::NotFoundError(
        absl::StrFormat("keyspace '%s' does not exist", keyspace));
  }
  return std::unique_ptr<tree::TreeView>(new StoreTreeView(this, ks));
}

absl::StatusOr<KeyspaceInfo> StoreImpl::GetKeyspace(
    absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  auto it = keyspaces_.find(name);
  if (it == keyspaces_.end()) {
    return absl::NotFoundError(
        absl::StrFormat("keyspace '%s' does not exist", name));
  }
  const Keyspace& ks = *it->second;
  return KeyspaceInfo{ks.name, ks.depth, ks.tree.root().count,
                      ks.tree.root().digest, ks.root_changes};
}

std::vector<KeyspaceInfo> StoreImpl::ListKeyspaces() const {
  absl::MutexLock lock(&mu_);
  std::vector<KeyspaceInfo> out;
  for (const auto& [name, ks] : keyspaces_) {
    out.push_back(KeyspaceInfo{ks->name, ks->depth, ks->tree.root().count,
                               ks->tree.root().digest, ks->root_changes});
  }
  return out;
}

std::vector<OriginRowCount> StoreImpl::OriginRowCounts() const {
  std::vector<OriginRowCount> out;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, rows] : origin_rows_) {
      auto name = origin_names_.find(id);
      out.push_back(OriginRowCount{
          name == origin_names_.end() ? absl::StrCat("#", id) : name->second,
          rows});
    }
  }
  std::sort(out.begin(), out.end(),
            [](const OriginRowCount& a, const OriginRowCount& b) {
              return a.origin < b.origin;
            });
  return out;
}

absl::StatusOr<std::vector<uint64_t>> StoreImpl::LeafCounts(
    absl::string_view keyspace) const {
  absl::MutexLock lock(&mu_);
  auto it = keyspaces_.find(keyspace);
  if (it == keyspaces_.end()) {
    return absl::NotFoundError(
        absl::StrFormat("keyspace '%s' does not exist", keyspace));
  }
  const tree::MerkleTree& t = it->second->tree;
  std::vector<uint64_t> counts(t.leaf_count());
  for (uint64_t i = 0; i < counts.size(); ++i) counts[i] = t.leaf(i).count;
  return counts;
}

absl::StatusOr<tree::MerkleTree> StoreImpl::CopyTree(
    absl::string_view keyspace) const {
  absl::MutexLock lock(&mu_);
  auto it = keyspaces_.find(keyspace);
  if (it == keyspaces_.end()) {
    return absl::NotFoundError(
        absl::StrFormat("keyspace '%s' does not exist", keyspace));
  }
  return it->second->tree.Copy();
}

absl::StatusOr<UpstreamProgress> StoreImpl::GetProgress(
    absl::string_view upstream) {
  TALLY_RETURN_IF_ERROR(ValidateNodeName(upstream));
  const std::string key = internal::TaggedKey(internal::kProgressTag, upstream);
  std::string value;
  const leveldb::Status s = db_->Get(leveldb::ReadOptions(), key, &value);
  if (s.IsNotFound()) {
    return absl::NotFoundError(
        absl::StrFormat("no progress stored for upstream '%s'", upstream));
  }
  TALLY_RETURN_IF_ERROR(FromLevelDb(s, "reading progress"));
  if (value.size() != 16) return Corrupt("progress", key);
  return UpstreamProgress{std::string(upstream), DecodeFixed64(value.data()),
                          DecodeFixed64(value.data() + 8)};
}

absl::StatusOr<std::vector<ChangeEntry>> StoreImpl::ReadChanges(Sequence after,
                                                                size_t limit) {
  auto check_retained = [&]() -> absl::Status {
    absl::MutexLock lock(&mu_);
    if (after < trimmed_through_) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "position %d is older than the retained change log, which starts "
          "at %d",
          after, trimmed_through_ + 1));
    }
    return absl::OkStatus();
  };
  TALLY_RETURN_IF_ERROR(check_retained());
  std::vector<ChangeEntry> out;
  std::unique_ptr<leveldb::Iterator> it(
      db_->NewIterator(leveldb::ReadOptions()));
  for (it->Seek(internal::ChangeKey(after + 1));
       it->Valid() && it->key()[0] == internal::kChangeTag &&
       out.size() < limit;
       it->Next()) {
    internal::ChangeRecord change;
    if (it->key().size() != 9 ||
        !internal::DecodeChangeRecord(
            absl::string_view(it->value().data(), it->value().size()),
            &change)) {
      return Corrupt("change", it->key().ToString());
    }
    ChangeEntry entry;
    entry.sequence = DecodeFixed64(it->key().data() + 1);
    const uint32_t ks_id = change.keyspace_id;
    entry.version.timestamp = change.timestamp;
    entry.version.origin = OriginName(change.origin_id);
    entry.deleted = change.deleted;
    entry.erased = change.erased;
    entry.key = std::string(change.key);
    {
      absl::MutexLock lock(&mu_);
      auto ks = keyspaces_by_id_.find(ks_id);
      if (ks == keyspaces_by_id_.end()) {
        return Corrupt("change (unknown keyspace)", it->key().ToString());
      }
      entry.keyspace = ks->second->name;
    }
    if (entry.version.origin.empty()) {
      return Corrupt("change (unknown origin)", it->key().ToString());
    }
    out.push_back(std::move(entry));
  }
  TALLY_RETURN_IF_ERROR(FromLevelDb(it->status(), "reading the change log"));
  // A trim that started meanwhile may have removed entries under the
  // iterator.
  TALLY_RETURN_IF_ERROR(check_retained());
  return out;
}

absl::StatusOr<uint64_t> StoreImpl::TrimChangeLog(Sequence through) {
  absl::MutexLock trim_lock(&trim_mu_);
  Sequence start;
  bool checkpoint_needed;
  {
    absl::MutexLock lock(&mu_);
    through = std::min(through, last_sequence_);
    start = trimmed_through_;
    checkpoint_needed = through > leaves_sequence_;
  }
  if (through <= start) return 0;
  if (checkpoint_needed) {
    // An open replays the entries after the leaf checkpoint: they must
    // stay until a checkpoint covers them.
    absl::MutexLock commit_lock(&commit_mu_);
    TALLY_RETURN_IF_ERROR(CheckpointLeaves());
  }
  constexpr Sequence kEntriesPerBatch = 10'000;
  for (Sequence first = start + 1; first <= through;) {
    const Sequence last = std::min(through, first + kEntriesPerBatch - 1);
    leveldb::WriteBatch batch;
    for (Sequence s = first; s <= last; ++s) {
      batch.Delete(internal::ChangeKey(s));
    }
    batch.Put(
        internal::TaggedKey(internal::kMetaTag, internal::kMetaTrimmedThrough),
        Fixed64String(last));
    {
      absl::MutexLock lock(&mu_);
      trimmed_through_ = last;
    }
    TALLY_RETURN_IF_ERROR(
        WriteToLevelDb(&batch, options_.sync, "trimming the change log"));
    first = last + 1;
  }
  return through - start;
}

absl::StatusOr<uint64_t> StoreImpl::PurgeTombstones(tree::HlcTimestamp before,
                                                    size_t limit) {
  // From here on, tombstones this old that arrive for absent keys are
  // dropped; the ones stored are erased below.
  uint64_t horizon = purged_before_.load();
  while (horizon < before.raw() &&
         !purged_before_.compare_exchange_weak(horizon, before.raw())) {
  }
  const std::string end = internal::TombstoneKey(before, "");
  std::vector<Mutation> erases;
  // Index records visited: removed once the erases are committed (a
  // record whose row is no longer that tombstone is stale).
  leveldb::WriteBatch visited;
  {
    std::unique_ptr<leveldb::Iterator> it(
        db_->NewIterator(leveldb::ReadOptions()));
    for (it->Seek(std::string(1, internal::kTombstoneTag));
         it->Valid() && it->key().compare(end) < 0 && erases.size() < limit;
         it->Next()) {
      const absl::string_view index_key(it->key().data(), it->key().size());
      if (index_key.size() <= 9 + internal::kRowKeyHeader ||
          index_key[9] != internal::kRowTag) {
        return Corrupt("tombstone index", it->key().ToString());
      }
      if (it->value().size() != 8) {
        return Corrupt("tombstone index", it->key().ToString());
      }
      const absl::string_view row_key = index_key.substr(9);
      const HlcTimestamp tombstone =
          HlcTimestamp::FromRaw(DecodeFixed64(it->value().data()));
      // A damaged row waits for a peer's copy, which brings its own record.
      if (IsDamaged(row_key)) continue;
      visited.Delete(it->key());
      std::string record;
      const leveldb::Status s =
          db_->Get(leveldb::ReadOptions(), std::string(row_key), &record);
      if (s.IsNotFound()) continue;  // erased since
      TALLY_RETURN_IF_ERROR(FromLevelDb(s, "reading a tombstone"));
      RowHeader header;
      absl::string_view payload;
      if (!internal::DecodeRowRecord(record, &header, &payload)) {
        return Corrupt("row", row_key);
      }
      // Written again since (and maybe deleted again: that tombstone has
      // its own, later, record).
      if (!header.deleted || header.timestamp != tombstone) continue;
      const uint32_t ks_id = DecodeFixed32(row_key.data() + 1);
      Mutation m;
      {
        absl::MutexLock lock(&mu_);
        auto ks = keyspaces_by_id_.find(ks_id);
        if (ks == keyspaces_by_id_.end()) return Corrupt("row", row_key);
        m.keyspace = ks->second->name;
      }
      m.key = std::string(row_key.substr(internal::kRowKeyHeader));
      m.erase = true;
      m.version = Version{header.timestamp, OriginName(header.origin_id)};
      erases.push_back(std::move(m));
    }
    TALLY_RETURN_IF_ERROR(FromLevelDb(it->status(), "reading tombstones"));
  }
  uint64_t purged = 0;
  for (size_t i = 0; i < erases.size(); i += options_.max_batch_mutations) {
    WriteRequest request;
    request.mode = ApplyMode::kPurgeTombstones;
    const size_t n = std::min(options_.max_batch_mutations, erases.size() - i);
    request.mutations.assign(std::make_move_iterator(erases.begin() + i),
                             std::make_move_iterator(erases.begin() + i + n));
    TALLY_ASSIGN_OR_RETURN(WriteResult result, Write(std::move(request)));
    for (bool applied : result.applied) purged += applied ? 1 : 0;
  }
  // After the erases: a crash before this leaves records the next purge
  // finds stale, never a tombstone without one. Through WriteToLevelDb like
  // every write while the store is open: after a failed append LevelDB's
  // log writer is out of step with its file, and anything it appends then
  // (this runs every maintenance interval, even with nothing to remove)
  // makes the next open refuse the log as damaged.
  TALLY_RETURN_IF_ERROR(WriteToLevelDb(&visited, options_.sync,
                                       "removing purged tombstones' index"));
  return purged;
}

int StoreImpl::AddChangeListener(ChangeListener listener) {
  absl::MutexLock lock(&listeners_mu_);
  const int id = next_listener_id_++;
  listeners_[id] = std::move(listener);
  return id;
}

void StoreImpl::RemoveChangeListener(int id) {
  absl::MutexLock lock(&listeners_mu_);
  listeners_.erase(id);
}

}  // namespace internal

Mutation Mutation::Put(std::string keyspace, std::string key,
                       std::string value) {
  Mutation m;
  m.keyspace = std::move(keyspace);
  m.key = std::move(key);
  m.value = std::move(value);
  return m;
}

Mutation Mutation::Erase(std::string keyspace, std::string key) {
  Mutation m;
  m.keyspace = std::move(keyspace);
  m.key = std::move(key);
  m.erase = true;
  return m;
}

Mutation Mutation::Delete(std::string keyspace, std::string key) {
  Mutation m;
  m.keyspace = std::move(keyspace);
  m.key = std::move(key);
  m.deleted = true;
  return m;
}

}  // namespace storage
}  // namespace tally
