// StoreImpl's staging of one group commit: keyspaces and origins resolved
// (new ones added to the catalogue edit), each mutation decided by the
// commit rules (internal/commit_rules.h), the accepted rows applied by the
// backend in one ApplyRows call, and the index records, leaves, change log
// and counts of the rows it applied (storage/internal/store_impl.h).
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
using internal::Fixed32String;
using internal::Fixed64String;
using internal::FromLevelDb;
using internal::kLocalOriginId;
using internal::RowHeader;
using tree::HlcTimestamp;
using tree::Token;
using tree::Version;

}  // namespace

namespace internal {

StoreImpl::StagedCommit StoreImpl::StartGroup() {
  commit_mu_.AssertHeld();
  StagedCommit g;
  g.edit = catalogue_.StartEdit();
  g.first_sequence = change_log_.last_sequence();
  g.sequence = g.first_sequence;
  g.arrival = PhysicalNow();
  return g;
}

std::pair<KeyspaceId, int> StoreImpl::ResolveKeyspace(StagedCommit& g,
                                                      const std::string& name,
                                                      int depth) {
  commit_mu_.AssertHeld();
  if (const Keyspace* ks = FindKeyspace(name); ks != nullptr) {
    return {ks->id, ks->depth};
  }
  auto it = g.edit.new_keyspaces.find(name);
  if (it != g.edit.new_keyspaces.end()) {
    return {it->second.id, it->second.depth};
  }
  const KeyspaceId id = g.edit.AddKeyspace(name, depth);
  // No rows yet: its filter is exact from the first.
  row_presence_.AddNew(id);
  g.batch.Put(internal::KeyspaceKey(name),
              internal::EncodeKeyspaceRecord(
                  internal::KeyspaceRecord{id.value(), depth}));
  return {id, depth};
}

OriginId StoreImpl::ResolveOrigin(StagedCommit& g, const std::string& name) {
  commit_mu_.AssertHeld();
  if (std::optional<OriginId> id = catalogue_.FindOrigin(name)) return *id;
  auto it = g.edit.new_origins.find(name);
  if (it != g.edit.new_origins.end()) return it->second;
  const OriginId id = g.edit.AddOrigin(name);
  g.batch.Put(internal::OriginByIdKey(id.value()), name);
  g.batch.Put(internal::OriginByNameKey(name), Fixed32String(id.value()));
  return id;
}

std::string StoreImpl::OriginNameIn(const StagedCommit& g, OriginId id) const {
  commit_mu_.AssertHeld();
  if (g.edit.IsNewOrigin(id)) return g.edit.NewOriginName(id);
  return catalogue_.OriginName(id);
}

absl::StatusOr<StagedRow*> StoreImpl::CurrentRow(StagedCommit& g,
                                                 const std::string& row_key,
                                                 KeyspaceId keyspace,
                                                 Token token) {
  commit_mu_.AssertHeld();
  auto it = g.staged.find(row_key);
  if (it != g.staged.end()) return &it->second;
  StagedRow current;
  current.damaged = IsDamaged(row_key);
  if (options_.row_filter && !row_presence_.MayExist(keyspace, token)) {
    // No row of the keyspace has the token: the read would find nothing.
    reads_skipped_.fetch_add(1, std::memory_order_relaxed);
    return &g.staged.emplace(row_key, std::move(current)).first->second;
  }
  rows_read_.fetch_add(1, std::memory_order_relaxed);
  std::string record;
  const leveldb::Status s = db_->Get(leveldb::ReadOptions(), row_key, &record);
  if (s.ok()) {
    absl::string_view payload;
    if (internal::DecodeRowRecord(record, &current.header, &payload)) {
      current.exists = true;
      // Kept for the backend's compare-and-swap token (moved, not copied).
      current.stored_record = std::move(record);
    } else if (!current.damaged) {
      return Corrupt("row", row_key);
    } else {
      // A damaged record that cannot even be decoded: the write treats the
      // row as absent, and its origin, unknown, keeps counting it until
      // RecountOriginRows.
      g.origin_unknown = true;
    }
  } else if (current.damaged && s.IsCorruption()) {
    // Same: the mark says what the read cannot.
    g.origin_unknown = true;
  } else if (!s.IsNotFound()) {
    return NoteTableDamage(FromLevelDb(s, "reading a row before writing it"));
  }
  return &g.staged.emplace(row_key, std::move(current)).first->second;
}

HlcTimestamp StoreImpl::StampLocalWrite(const StagedRow& current) {
  commit_mu_.AssertHeld();
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

void StoreImpl::CountRowChange(StagedCommit& g, const StagedRow& before,
                               std::optional<OriginId> after) {
  const OriginId before_origin(before.header.origin_id);
  if (before.exists && after == before_origin) return;
  auto add = [&g](OriginId origin_id, int64_t delta) {
    for (auto& [id, sum] : g.origin_row_deltas) {
      if (id == origin_id) {
        sum += delta;
        return;
      }
    }
    g.origin_row_deltas.emplace_back(origin_id, delta);
  };
  if (before.exists) add(before_origin, -1);
  if (after.has_value()) add(*after, +1);
}

void StoreImpl::StageChange(StagedCommit& g,
                            const internal::ChangeRecord& change, Token token,
                            int depth) {
  commit_mu_.AssertHeld();
  std::string record;
  internal::EncodeChangeRecord(change, &record);
  g.batch.Put(internal::ChangeKey(++g.sequence), record);
  g.edit.leaf_deltas.push_back(CatalogueEdit::LeafDelta{
      KeyspaceId(change.keyspace_id),
      static_cast<uint32_t>(tree::NodeIndexOf(token, depth)),
      change.digest_delta, change.count_delta});
}

internal::StoredState StoreImpl::StoredStateOf(const StagedCommit& g,
                                               const StagedRow& row) const {
  internal::StoredState state;
  state.exists = row.exists;
  state.damaged = row.damaged;
  if (row.exists) {
    state.deleted = row.header.deleted;
    state.digest = row.header.digest;
    // The origin's name orders versions; a damaged row's is never asked.
    if (!row.damaged) {
      state.version = Version{row.header.timestamp,
                              OriginNameIn(g, OriginId(row.header.origin_id))};
    }
  }
  return state;
}

absl::Status StoreImpl::StageMutation(StagedCommit& g, const Mutation& m,
                                      ApplyMode mode, WriteResult* result) {
  commit_mu_.AssertHeld();
  const auto [ks_id, depth] =
      ResolveKeyspace(g, m.keyspace, options_.default_depth);
  const Token token = tree::TokenOf(m.key);
  std::string row_key = internal::RowKey(ks_id.value(), token, m.key);
  TALLY_ASSIGN_OR_RETURN(StagedRow * current,
                         CurrentRow(g, row_key, ks_id, token));

  internal::IncomingRow row;
  row.kind = m.erase     ? internal::IncomingRow::Kind::kErase
             : m.deleted ? internal::IncomingRow::Kind::kDelete
                         : internal::IncomingRow::Kind::kPut;
  row.replicated = m.version.has_value();
  OriginId origin_id;
  if (m.version.has_value()) {
    row.version = *m.version;
    origin_id = ResolveOrigin(g, row.version.origin);
  } else {
    row.version = Version{StampLocalWrite(*current), node_name_};
    origin_id = OriginId(kLocalOriginId);
  }
  if (!m.erase) {
    row.digest =
        tree::RowDigest(m.keyspace, m.key, row.version, m.deleted, m.value);
    if (m.supersedes_stored && current->exists && !current->damaged &&
        !(current->header.timestamp < row.version.timestamp) &&
        !(current->header.timestamp == row.version.timestamp &&
          current->header.digest == row.digest)) {
      // The backend committed it after the stored row: it orders after it
      // whatever its commit time says. (The same version and digest is
      // the stored row itself, replayed: left to the rules below.)
      row.version.timestamp =
          HlcTimestamp::FromRaw(current->header.timestamp.raw() + 1);
      (void)clock_.Observe(row.version.timestamp);
      row.digest =
          tree::RowDigest(m.keyspace, m.key, row.version, m.deleted, m.value);
    }
  }
  internal::StoredState stored = StoredStateOf(g, *current);
  const internal::Decision decision =
      internal::Decide(stored, row, mode, purged_before_.load());
  if (!internal::Applies(decision)) {
    result->applied.push_back(false);
    // Last writer wins reports the version that stays.
    result->versions.push_back(decision == internal::Decision::kSkipNotNewer
                                   ? std::move(stored.version)
                                   : std::move(row.version));
    return absl::OkStatus();
  }

  // Accepted: staged once the backend has applied it (ApplyAccepted).
  const size_t self = g.accepted.size();
  StagedCommit::Accepted& a = g.accepted.emplace_back();
  a.result = result;
  a.index = result->applied.size();
  a.mutation = &m;
  a.token = token;
  a.depth = depth;
  a.keyspace_id = ks_id.value();
  a.origin_id = origin_id.value();
  a.decision = decision;
  a.digest = row.digest;
  a.before.exists = current->exists;
  a.before.damaged = current->damaged;
  a.before.header = current->header;
  a.captured = mode == ApplyMode::kCaptured;
  if (a.captured) {
    // The backend has it already: it ends the key's run of rows to apply.
    current->run_first = StagedRow::kNoRun;
  } else if (current->run_first == StagedRow::kNoRun) {
    // The first row of the key the backend gets: its expected state is the
    // row as the index holds it now.
    current->run_first = self;
    a.before_version = std::move(stored.version);
    a.expected_from = current->written_by;
  } else {
    // The backend gets the key's last row, against the first one's state.
    g.accepted[current->run_last].superseded = true;
  }
  a.run_first = a.captured ? self : current->run_first;
  if (!a.captured) current->run_last = self;
  result->applied.push_back(true);
  result->versions.push_back(row.version);
  a.version = std::move(row.version);

  // What the group's later mutations of the key see.
  if (decision == internal::Decision::kErase) {
    current->exists = false;
    current->damaged = false;
    current->header = RowHeader{};
  } else {
    current->exists = true;
    current->damaged = false;
    current->header.timestamp = a.version.timestamp;
    current->header.origin_id = origin_id.value();
    current->header.deleted = m.deleted;
    current->header.digest = row.digest;
  }
  current->written_by = &m;
  a.row_key = std::move(row_key);
  return absl::OkStatus();
}

absl::Status StoreImpl::StageAbsent(StagedCommit& g,
                                    const WriteRequest& request,
                                    WriteResult* result) {
  commit_mu_.AssertHeld();
  if (request.mutations.empty()) return absl::OkStatus();
  const std::string& keyspace = request.mutations.front().keyspace;
  const bool existed = FindKeyspace(keyspace) != nullptr;
  const auto [ks_id, depth] =
      ResolveKeyspace(g, keyspace, options_.default_depth);
  // Every row of the keyspace orders before `after`; each row of the
  // request must order after the one before it.
  std::string after;
  if (existed) {
    TALLY_ASSIGN_OR_RETURN(
        std::optional<std::string> last,
        internal::LastKeyWithPrefix(*db_, leveldb::ReadOptions(),
                                    internal::RowKeyPrefix(ks_id.value()),
                                    "reading a keyspace's last row"));
    if (last.has_value()) after = std::move(*last);
  }
  const bool unlogged =
      std::any_of(request.mutations.begin(), request.mutations.end(),
                  [](const Mutation& m) { return m.unlogged; });
  if (unlogged) {
    // Rows without entries leave their leaves' changes nowhere but in this
    // batch: it must hold a full checkpoint, so every leaf the log still
    // carries changes for is persisted first.
    TALLY_RETURN_IF_ERROR(CheckpointLeaves());
  }
  const bool check_damaged = damaged_count_.load() > 0;
  static const StagedRow kAbsent;
  OriginId origin_id;
  const std::string* origin_name = nullptr;
  result->applied.reserve(request.mutations.size());
  result->versions.reserve(request.mutations.size());
  for (const Mutation& m : request.mutations) {
    const Version& version = *m.version;  // ValidateRequest: captured rows
    const Token token = tree::TokenOf(m.key);
    std::string row_key = internal::RowKey(ks_id.value(), token, m.key);
    if (!after.empty() && !(after < row_key)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "bulk load of keyspace '%s': key '%s' does not order after the "
          "keyspace's last row or the row before it in the request (rows "
          "must come in (token, key) order, after every row the keyspace "
          "holds); nothing written",
          keyspace, absl::CHexEscape(m.key.substr(0, 64))));
    }
    if (origin_name == nullptr || *origin_name != version.origin) {
      origin_id = ResolveOrigin(g, version.origin);
      origin_name = &version.origin;
    }
    if (g.observed.empty() || !(g.observed.back() == version.timestamp)) {
      g.observed.push_back(version.timestamp);
    }
    RowHeader header;
    header.timestamp = version.timestamp;
    header.origin_id = origin_id.value();
    header.deleted = false;
    header.digest = tree::RowDigest(m.keyspace, m.key, version, false, m.value);
    g.batch.Put(row_key,
                internal::EncodeRowRecord(header, m.captured_payload.has_value()
                                                      ? *m.captured_payload
                                                      : m.value));
    // Before the batch reaches LevelDB (internal/row_presence.h).
    row_presence_.Add(ks_id, {token});
    if (m.unlogged) {
      // The rows come in token order: a leaf's rows are consecutive.
      const auto leaf = static_cast<uint32_t>(tree::NodeIndexOf(token, depth));
      std::vector<CatalogueEdit::LeafDelta>& deltas = g.edit.leaf_deltas;
      if (deltas.empty() || deltas.back().keyspace != ks_id ||
          deltas.back().leaf != leaf) {
        deltas.push_back(CatalogueEdit::LeafDelta{ks_id, leaf, {}, 0});
      }
      deltas.back().digest ^= header.digest;
      deltas.back().count += 1;
    } else {
      internal::ChangeRecord change;
      change.keyspace_id = ks_id.value();
      change.timestamp = version.timestamp;
      change.origin_id = origin_id.value();
      change.key = m.key;
      change.digest_delta = header.digest;
      change.count_delta = 1;
      StageChange(g, change, token, depth);
    }
    CountRowChange(g, kAbsent, origin_id);
    if (check_damaged && IsDamaged(row_key)) {
      // A mark left without its row: the row written now replaces it.
      g.batch.Delete(internal::DamagedKey(row_key));
      g.repaired.push_back(row_key);
    }
    result->applied.push_back(true);
    result->versions.push_back(version);
    after = std::move(row_key);
  }
  result->last_sequence = g.sequence;
  if (unlogged) StageLeafCheckpoint(g, existed);
  return absl::OkStatus();
}

void StoreImpl::StageLeafCheckpoint(StagedCommit& g, bool keyspace_existed) {
  commit_mu_.AssertHeld();
  // Each leaf once, with its deltas summed, in the order first changed.
  std::vector<LeafRef> leaves;
  absl::flat_hash_map<LeafRef, size_t> slot;
  std::vector<tree::NodeState> deltas;
  for (const CatalogueEdit::LeafDelta& d : g.edit.leaf_deltas) {
    const LeafRef ref{d.keyspace, d.leaf};
    auto [it, added] = slot.emplace(ref, leaves.size());
    if (added) {
      leaves.push_back(ref);
      deltas.emplace_back();
    }
    deltas[it->second].digest ^= d.digest;
    deltas[it->second].count += d.count;
  }
  // A keyspace this group creates has empty leaves (the catalogue does not
  // know it yet).
  std::vector<tree::NodeState> states =
      keyspace_existed ? catalogue_.LeafStates(leaves)
                       : std::vector<tree::NodeState>(leaves.size());
  for (size_t i = 0; i < leaves.size(); ++i) {
    states[i].digest ^= deltas[i].digest;
    states[i].count += deltas[i].count;
  }
  LeafCheckpoints::BuildCheckpoint(g.sequence, leaves, states, &g.batch);
  g.leaves_checkpointed = true;
}

absl::Status StoreImpl::ApplyAccepted(StagedCommit& g) {
  // One RowChange per run of a key's accepted rows (the run's last change,
  // against the state before its first), so that the backend sees a key at
  // most once; captured rows are not sent. A refused run refuses all its
  // rows: the later ones were decided against the earlier ones.
  std::vector<RowChange> changes;
  std::vector<size_t> change_of(g.accepted.size(), StagedRow::kNoRun);
  for (size_t i = 0; i < g.accepted.size(); ++i) {
    const StagedCommit::Accepted& a = g.accepted[i];
    if (a.captured || a.superseded) continue;
    const StagedCommit::Accepted& first = g.accepted[a.run_first];
    const Mutation& m = *a.mutation;
    RowChange& c = changes.emplace_back();
    c.row = RowLocation{m.keyspace, a.token, m.key};
    c.kind = m.erase     ? RowChange::Kind::kErase
             : m.deleted ? RowChange::Kind::kDelete
                         : RowChange::Kind::kPut;
    c.value = m.value;
    c.version = &a.version;
    c.expected.exists = first.before.exists;
    if (first.before.exists) {
      c.expected.version = &first.before_version;
      c.expected.deleted = first.before.header.deleted;
      c.expected.digest = first.before.header.digest;
      c.expected.payload = ExpectedPayload(g, first);
    }
    change_of[a.run_first] = changes.size() - 1;
  }
  std::vector<RowOutcome> outcomes;
  if (!changes.empty()) {
    TALLY_RETURN_IF_ERROR(backend_->ApplyRows(changes, &outcomes));
    if (outcomes.size() != changes.size()) {
      return absl::InternalError(
          absl::StrFormat("backend '%s' answered %d rows of %d",
                          backend_->name(), outcomes.size(), changes.size()));
    }
  }
  // Each accepted mutation was decided against the row as the group's
  // earlier ones left it, assuming the backend would apply them. A refused
  // run left the row as it was; a captured mutation after it (the
  // application's write, often the refusal's very cause) must be indexed
  // against that real row, or its leaf delta, its row count, its origin's
  // count and the row filter take the refused row for the stored one.
  absl::flat_hash_map<absl::string_view, StagedRow> real;
  for (size_t i = 0; i < g.accepted.size(); ++i) {
    StagedCommit::Accepted& a = g.accepted[i];
    auto [it, first_of_key] = real.try_emplace(a.row_key, a.before);
    if (!first_of_key) {
      a.before.exists = it->second.exists;
      a.before.damaged = it->second.damaged;
      a.before.header = it->second.header;
    }
    RowOutcome* outcome = nullptr;
    if (!a.captured) {
      outcome = &outcomes[change_of[a.run_first]];
      if (!outcome->applied) {
        a.result->applied[a.index] = false;
        if (outcome->rejected.ok()) {
          a.result->refused.push_back(a.index);
        } else {
          // The database refused the row itself: the row is still owed,
          // which the caller must know (not a settled compare-and-swap).
          a.result->rejected.push_back(
              RejectedMutation{a.index, a.mutation->keyspace, a.mutation->key,
                               outcome->rejected});
        }
        continue;
      }
    }
    StageAccepted(g, a, outcome);
    StagedRow& row = it->second;
    row.damaged = false;
    if (a.decision == internal::Decision::kErase) {
      row.exists = false;
      row.header = RowHeader{};
    } else {
      row.exists = true;
      row.header.timestamp = a.version.timestamp;
      row.header.origin_id = a.origin_id;
      row.header.deleted = a.mutation->deleted;
      row.header.digest = a.digest;
    }
  }
  return absl::OkStatus();
}

absl::string_view StoreImpl::ExpectedPayload(
    const StagedCommit& g, const StagedCommit::Accepted& first) const {
  if (first.expected_from == nullptr) {
    // The row as LevelDB holds it.
    auto it = g.staged.find(first.row_key);
    if (it == g.staged.end() ||
        it->second.stored_record.size() < internal::kRowHeaderSize) {
      return absl::string_view();
    }
    return absl::string_view(it->second.stored_record)
        .substr(internal::kRowHeaderSize);
  }
  // Written earlier in this group by a captured change.
  const Mutation& m = *first.expected_from;
  return m.captured_payload.has_value() ? *m.captured_payload
                                        : absl::string_view(m.value);
}

void StoreImpl::StageAccepted(StagedCommit& g, const StagedCommit::Accepted& a,
                              const RowOutcome* outcome) {
  const Mutation& m = *a.mutation;
  const StagedRow& before = a.before;
  internal::ChangeRecord change;
  change.keyspace_id = a.keyspace_id;
  change.timestamp = a.version.timestamp;
  change.origin_id = a.origin_id;
  change.key = m.key;
  if (a.decision == internal::Decision::kWriteTie) ++g.ties_resolved;
  if (a.decision == internal::Decision::kErase) {
    // The run's last change writes the row record.
    if (!a.superseded) g.batch.Delete(a.row_key);
    // The tombstone's 'T' record, if any, is removed by the purge that
    // finds it stale (internal/records.h).
    change.erased = true;
    if (before.damaged) {
      // A damaged row is already out of its leaf.
      g.batch.Delete(internal::DamagedKey(a.row_key));
      g.repaired.push_back(a.row_key);
    } else {
      change.digest_delta = before.header.digest;
      change.count_delta = -1;
    }
    StageChange(g, change, a.token, a.depth);
    if (before.exists) CountRowChange(g, before, std::nullopt);
  } else {
    if (m.version.has_value()) g.observed.push_back(a.version.timestamp);
    RowHeader header;
    header.timestamp = a.version.timestamp;
    header.origin_id = a.origin_id;
    header.deleted = m.deleted;
    header.digest = a.digest;
    if (!before.exists) {
      // A new row (or one only damaged before): its token goes in the
      // filter before the batch reaches LevelDB (internal/row_presence.h).
      // A row that existed is in it already.
      row_presence_.Add(KeyspaceId(a.keyspace_id), {a.token});
    }
    if (!a.superseded) {
      absl::string_view payload;
      if (outcome != nullptr) {
        payload = outcome->payload;
      } else if (m.captured_payload.has_value()) {
        payload = *m.captured_payload;
      } else {
        payload = m.value;
      }
      g.batch.Put(a.row_key, internal::EncodeRowRecord(header, payload));
    }
    if (m.deleted) {
      // Indexed by arrival here; the value says which tombstone it is, so
      // that the purge can tell a stale record (internal/records.h).
      g.batch.Put(internal::TombstoneKey(g.arrival, a.row_key),
                  internal::EncodeTombstoneValue(a.version.timestamp));
    }
    change.deleted = m.deleted;
    change.digest_delta = header.digest;
    // A damaged row is already out of its leaf.
    const bool in_leaf = before.exists && !before.damaged;
    if (in_leaf) change.digest_delta ^= before.header.digest;
    change.count_delta = in_leaf ? 0 : 1;
    StageChange(g, change, a.token, a.depth);
    if (before.damaged) {
      g.batch.Delete(internal::DamagedKey(a.row_key));
      g.repaired.push_back(a.row_key);
    }
    CountRowChange(g, before, OriginId(a.origin_id));
  }
  a.result->last_sequence = g.sequence;
}

absl::Status StoreImpl::FinishGroup(StagedCommit& g) {
  commit_mu_.AssertHeld();
  if (!g.edit.new_keyspaces.empty()) {
    g.batch.Put(
        internal::TaggedKey(internal::kMetaTag, internal::kMetaNextKeyspaceId),
        Fixed32String(g.edit.next_keyspace_id.value()));
  }
  if (!g.edit.new_origins.empty()) {
    g.batch.Put(
        internal::TaggedKey(internal::kMetaTag, internal::kMetaNextOriginId),
        Fixed32String(g.edit.next_origin_id.value()));
  }
  if (g.sequence != g.first_sequence) {
    g.batch.Put(
        internal::TaggedKey(internal::kMetaTag, internal::kMetaLastSequence),
        Fixed64String(g.sequence));
  }
  // An open recounts when the mark is gone (BuildOriginRows).
  if (g.origin_unknown) {
    g.batch.Delete(internal::MetaKey(internal::kMetaOriginRows));
  }
  // The leader holds commit_mu_: nobody else changes the counts meanwhile.
  if (!g.origin_row_deltas.empty()) {
    for (const auto& [id, delta] : g.origin_row_deltas) {
      if (delta == 0) continue;
      const int64_t before = static_cast<int64_t>(catalogue_.origin_rows(id));
      // Never below zero: Verify() reports a count that disagrees with the
      // rows, and a wrapped counter would hide how far off it is.
      const uint64_t after =
          static_cast<uint64_t>(std::max<int64_t>(0, before + delta));
      if (after == 0) {
        g.batch.Delete(internal::OriginRowsKey(id.value()));
      } else {
        g.batch.Put(internal::OriginRowsKey(id.value()), Fixed64String(after));
      }
      g.edit.origin_rows.emplace_back(id, after);
    }
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace storage
}  // namespace tally
