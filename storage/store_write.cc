// StoreImpl's write path: validation, the writer queue, the group commit
// (staged in store_stage.cc), its installation once durable, the backend
// position, and leaf checkpoints (storage/store.h,
// storage/internal/store_impl.h).
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
#include "storage/internal/commit_rules.h"
#include "storage/internal/leveldb_status.h"
#include "storage/internal/leveldb_write.h"
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
using internal::FromLevelDb;
using tree::HlcTimestamp;

}  // namespace

namespace internal {

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
    if (request.mode == ApplyMode::kCaptured && !m.version.has_value()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "captured change of key '%s' has no version; the capture gives it",
          absl::CHexEscape(m.key)));
    }
    if (m.supersedes_stored && request.mode != ApplyMode::kCaptured) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "key '%s' is marked as superseding the stored row outside a "
          "captured write",
          absl::CHexEscape(m.key)));
    }
    if (m.captured_payload.has_value() &&
        request.mode != ApplyMode::kCaptured) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "key '%s' carries a captured payload outside a captured write",
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
  if (request.backend_position.has_value() &&
      (request.backend_position->bytes.empty() ||
       request.backend_position->bytes.size() > options_.max_key_bytes)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "backend position is %d bytes; it must be 1..%d (max_key_bytes)",
        request.backend_position->bytes.size(), options_.max_key_bytes));
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
  const size_t keyspaces = catalogue_.keyspace_count();
  if (keyspaces + new_names.size() > options_.max_keyspaces) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "keyspace '%s' would be a new keyspace; this store holds %d and the "
        "limit is %d (max_keyspaces)",
        first_new, keyspaces, options_.max_keyspaces));
  }
  return absl::OkStatus();
}

absl::StatusOr<WriteResult> StoreImpl::Write(WriteRequest request) {
  TALLY_RETURN_IF_ERROR(ValidateRequest(request));
  for (const Mutation& m : request.mutations) {
    if (m.unlogged) {
      // Write decides each row against the stored one: it may replace a
      // row a peer has, and only the log would tell the peer.
      return absl::InvalidArgumentError(absl::StrFormat(
          "key '%s' is unlogged; only a bulk load (LoadAbsent) takes "
          "unlogged rows",
          absl::CHexEscape(m.key.substr(0, 64))));
    }
  }
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
  size_t bytes = 0;
  for (const Mutation& m : request.mutations) {
    bytes += m.keyspace.size() + m.key.size() + m.value.size();
  }
  PendingWrite writer(request.mutations.size(), bytes);
  writer.request = &request;
  return Enqueue(&writer);
}

absl::Status StoreImpl::ValidateAbsent(const WriteRequest& request) {
  if (request.mode != ApplyMode::kCaptured) {
    return absl::InvalidArgumentError(
        "a bulk load (LoadAbsent) takes captured rows only");
  }
  for (const Mutation& m : request.mutations) {
    if (m.deleted || m.erase) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "a bulk load (LoadAbsent) takes puts only; key '%s' is a %s",
          absl::CHexEscape(m.key), m.erase ? "erase" : "delete"));
    }
    if (m.keyspace != request.mutations.front().keyspace) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "a bulk load (LoadAbsent) takes rows of one keyspace; '%s' and '%s'",
          request.mutations.front().keyspace, m.keyspace));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<WriteResult> StoreImpl::LoadAbsent(WriteRequest request) {
  TALLY_RETURN_IF_ERROR(ValidateRequest(request));
  TALLY_RETURN_IF_ERROR(ValidateAbsent(request));
  if (!request.mutations.empty()) {
    TALLY_RETURN_IF_ERROR(
        CheckKeyspaceLimit({request.mutations.front().keyspace}));
  }
  size_t bytes = 0;
  for (const Mutation& m : request.mutations) {
    bytes += m.keyspace.size() + m.key.size() + m.value.size();
  }
  // Alone in its group: StageAbsent's check of the keyspace's last row then
  // sees every row committed before it, and no later mutation of the group
  // can write one of its keys without seeing it.
  PendingWrite writer(request.mutations.size(), bytes, /*alone=*/true);
  writer.request = &request;
  writer.load_absent = true;
  return Enqueue(&writer);
}

absl::Status StoreImpl::CreateKeyspace(absl::string_view name, int depth) {
  TALLY_RETURN_IF_ERROR(ValidateKeyspaceName(name));
  if (depth < tree::kMinDepth || depth > tree::kMaxDepth) {
    return absl::InvalidArgumentError(
        absl::StrFormat("keyspace depth %d is out of range; it must be %d..%d",
                        depth, tree::kMinDepth, tree::kMaxDepth));
  }
  if (catalogue_.IsDropped(name)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "keyspace '%s' was dropped on node %s; it is not created again "
        "(undo the drop with `tally keyspaces undrop`)",
        name, node_name_));
  }
  if (const Keyspace* ks = FindKeyspace(name); ks != nullptr) {
    if (ks->depth == depth) return absl::OkStatus();
    return absl::AlreadyExistsError(absl::StrFormat(
        "keyspace '%s' exists with depth %d, not %d", name, ks->depth, depth));
  }
  TALLY_RETURN_IF_ERROR(CheckKeyspaceLimit({name}));
  PendingWrite writer(/*items=*/0, /*bytes=*/0);
  writer.create_keyspace.emplace(std::string(name), depth);
  TALLY_RETURN_IF_ERROR(Enqueue(&writer).status());
  const Keyspace* ks = FindKeyspace(name);
  if (ks != nullptr && ks->depth != depth) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "keyspace '%s' exists with depth %d, not %d", name, ks->depth, depth));
  }
  return absl::OkStatus();
}

absl::StatusOr<WriteResult> StoreImpl::Enqueue(PendingWrite* writer) {
  TALLY_RETURN_IF_ERROR(
      queue_.Write(writer, [this](absl::Span<WriteQueue::Writer* const> group) {
        return CommitGroup(group);
      }));
  TALLY_RETURN_IF_ERROR(writer->refusal);
  return std::move(writer->result);
}

bool StoreImpl::RefusedAsDropped(absl::string_view keyspace) const {
  commit_mu_.AssertHeld();
  return dropping_.contains(keyspace) || catalogue_.IsDropped(keyspace);
}

absl::Status StoreImpl::DroppedRefusal(absl::string_view keyspace) const {
  commit_mu_.AssertHeld();
  if (dropping_.contains(keyspace)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "keyspace '%s' is being dropped on node %s; its rows are not taken",
        keyspace, node_name_));
  }
  if (catalogue_.IsDropped(keyspace)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "keyspace '%s' was dropped on node %s; its rows are not taken, and "
        "it is not created again (undo the drop with `tally keyspaces "
        "undrop`)",
        keyspace, node_name_));
  }
  return absl::OkStatus();
}

bool StoreImpl::NoneTaken(
    const WriteRequest& request,
    const absl::flat_hash_map<absl::string_view, absl::Status>& not_taken)
    const {
  commit_mu_.AssertHeld();
  if (not_taken.empty()) return false;
  for (const Mutation& m : request.mutations) {
    // A dropped keyspace is this node's lasting choice, not the backend's
    // passing trouble: refusing a request for it would hold a feed back
    // for good.
    if (!not_taken.contains(m.keyspace) || RefusedAsDropped(m.keyspace)) {
      return false;
    }
  }
  return true;
}

absl::flat_hash_map<absl::string_view, absl::Status> StoreImpl::NotTaken(
    const WriteRequest& request, bool drop_erase) const {
  commit_mu_.AssertHeld();
  absl::flat_hash_map<absl::string_view, absl::Status> not_taken;
  absl::flat_hash_set<absl::string_view> asked;
  for (const Mutation& m : request.mutations) {
    if (!asked.insert(m.keyspace).second) continue;
    absl::Status takes =
        drop_erase ? absl::OkStatus() : DroppedRefusal(m.keyspace);
    // Captured rows are the backend's own.
    if (takes.ok() && request.mode != ApplyMode::kCaptured) {
      takes = backend_->TakesRows(m.keyspace);
    }
    if (!takes.ok()) not_taken.emplace(m.keyspace, std::move(takes));
  }
  return not_taken;
}

absl::Status StoreImpl::CommitGroup(
    absl::Span<WriteQueue::Writer* const> group) {
  absl::MutexLock commit_lock(&commit_mu_);
  // Refused before staging: nothing can be committed.
  TALLY_RETURN_IF_ERROR(write_status());
  StagedCommit g = StartGroup();
  std::vector<WriteResult> results(group.size());
  for (size_t i = 0; i < group.size(); ++i) {
    // Every writer of this queue is a PendingWrite (Enqueue).
    PendingWrite* w = static_cast<PendingWrite*>(group[i]);
    if (w->create_keyspace.has_value()) {
      w->refusal = DroppedRefusal(w->create_keyspace->first);
      if (w->refusal.ok()) {
        ResolveKeyspace(g, w->create_keyspace->first,
                        w->create_keyspace->second);
      }
      continue;
    }
    WriteRequest& request = *w->request;
    const absl::flat_hash_map<absl::string_view, absl::Status> not_taken =
        NotTaken(request, w->drop_erase);
    if (w->load_absent) {
      // One keyspace, captured rows: refused whole, which TakesRows never
      // does to captured rows today.
      if (!not_taken.empty()) {
        w->refusal = not_taken.begin()->second;
        continue;
      }
      TALLY_RETURN_IF_ERROR(StageAbsent(g, request, &results[i]));
    } else if (request.refuse_when_none_taken &&
               NoneTaken(request, not_taken)) {
      w->refusal = not_taken.find(request.mutations.front().keyspace)->second;
      continue;
    } else {
      WriteResult& result = results[i];
      for (Mutation& m : request.mutations) {
        if (auto it = not_taken.find(m.keyspace); it != not_taken.end()) {
          // Only this keyspace's rows wait: the rest of the request, and
          // its progress, commit (a feed batch carries every keyspace).
          result.rejected.push_back(RejectedMutation{
              result.applied.size(), m.keyspace, m.key, it->second,
              /*not_taken=*/true,
              /*dropped=*/RefusedAsDropped(m.keyspace)});
          result.applied.push_back(false);
          result.versions.push_back(m.version.value_or(tree::Version{}));
          continue;
        }
        TALLY_RETURN_IF_ERROR(StageMutation(g, m, request.mode, &result));
      }
    }
    if (request.progress.has_value()) {
      g.batch.Put(internal::ProgressKey(request.progress->upstream),
                  internal::EncodeProgress(internal::ProgressRecord{
                      request.progress->epoch, request.progress->sequence}));
    }
    if (request.backend_position.has_value()) {
      // In the rows' batch: after a crash the position and the rows it
      // covers are both there or both gone.
      g.batch.Put(
          internal::BackendPositionKey(),
          internal::EncodeBackendPosition(request.backend_position->bytes));
    }
  }
  TALLY_RETURN_IF_ERROR(ApplyAccepted(g));
  TALLY_RETURN_IF_ERROR(FinishGroup(g));
  TALLY_RETURN_IF_ERROR(WriteToLevelDb(&g.batch, options_.sync, "committing"));
  for (size_t i = 0; i < group.size(); ++i) {
    // Rejected as not taken while staged, and by the backend in
    // ApplyAccepted: in index order for the caller.
    std::vector<RejectedMutation>& rejected = results[i].rejected;
    std::sort(rejected.begin(), rejected.end(),
              [](const RejectedMutation& a, const RejectedMutation& b) {
                return a.index < b.index;
              });
    static_cast<PendingWrite*>(group[i])->result = std::move(results[i]);
  }
  Install(g);
  return absl::OkStatus();
}

absl::Status StoreImpl::write_status() const {
  absl::MutexLock lock(&write_failure_mu_);
  return write_failure_;
}

absl::Status StoreImpl::WriteToLevelDb(leveldb::WriteBatch* batch, bool sync,
                                       absl::string_view what) {
  TALLY_RETURN_IF_ERROR(write_status());
  const absl::Status status = WriteBatchTo(*db_, batch, sync, what);
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
  // LevelDB fails a write with Corruption only after a compaction failed
  // on a block it could not decode: no write succeeds until the table is
  // salvaged.
  return NoteTableDamage(status);
}

absl::StatusOr<std::optional<BackendPosition>> StoreImpl::backend_position() {
  std::string record;
  const leveldb::Status s =
      db_->Get(leveldb::ReadOptions(), internal::BackendPositionKey(), &record);
  if (s.IsNotFound()) return std::optional<BackendPosition>();
  TALLY_RETURN_IF_ERROR(FromLevelDb(s, "reading the backend position"));
  BackendPosition position;
  if (!internal::DecodeBackendPosition(record, &position.bytes)) {
    return Corrupt("backend position", internal::BackendPositionKey());
  }
  return std::optional<BackendPosition>(std::move(position));
}

void StoreImpl::Install(const StagedCommit& g) {
  commit_mu_.AssertHeld();
  for (const HlcTimestamp& t : g.observed) (void)clock_.Observe(t);
  catalogue_.Install(g.edit);
  if (!g.repaired.empty()) {
    absl::MutexLock lock(&damaged_mu_);
    for (const std::string& row_key : g.repaired) damaged_.erase(row_key);
    damaged_count_.store(damaged_.size());
  }
  ties_resolved_.fetch_add(g.ties_resolved, std::memory_order_relaxed);
  if (g.origin_unknown) origin_recount_needed_.store(true);
  std::vector<LeafRef> changed;
  changed.reserve(g.edit.leaf_deltas.size());
  for (const CatalogueEdit::LeafDelta& d : g.edit.leaf_deltas) {
    changed.push_back(LeafRef{d.keyspace, d.leaf});
  }
  if (g.leaves_checkpointed) {
    // The batch held every changed leaf and the sequence they include.
    leaf_checkpoints_.Checkpointed(g.sequence);
  } else {
    leaf_checkpoints_.MarkDirty(changed);
  }
  change_log_.Committed(g.sequence);
  if (leaf_checkpoints_.CheckpointDue(g.sequence,
                                      options_.leaf_checkpoint_interval)) {
    // The batch is durable whatever this returns; a failed checkpoint only
    // means a longer replay at the next open.
    (void)CheckpointLeaves();
  }
}

absl::Status StoreImpl::CheckpointLeaves() {
  commit_mu_.AssertHeld();
  const Sequence sequence = change_log_.last_sequence();
  if (sequence == leaf_checkpoints_.sequence()) return absl::OkStatus();
  const std::vector<LeafRef> leaves = leaf_checkpoints_.DirtyLeaves();
  const std::vector<tree::NodeState> states = catalogue_.LeafStates(leaves);
  leveldb::WriteBatch batch;
  LeafCheckpoints::BuildCheckpoint(sequence, leaves, states, &batch);
  TALLY_RETURN_IF_ERROR(
      WriteToLevelDb(&batch, options_.sync, "checkpointing leaves"));
  leaf_checkpoints_.Checkpointed(sequence);
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace storage
}  // namespace tally
