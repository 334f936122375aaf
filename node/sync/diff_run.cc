#include "node/sync/diff_run.h"

#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "node/client/replica.h"
#include "node/client/wire.h"
#include "node/sync/rows_to_move.h"
#include "node/sync/schema_check.h"
#include "node/sync/sync.h"
#include "tree/progress_meter.h"
#include "tree/status_macros.h"

namespace tally {
namespace node {
namespace {

bool IsRepair(v1::RunDiffMode mode) { return mode != v1::RUN_DIFF_MODE_DIFF; }

// The keyspace as a node summarises it, or nullopt when it lacks it.
using MaybeSummary = std::optional<v1::KeyspaceSummary>;

// Step 2's answer: B's name and its summary of the keyspace.
struct PeerAnswer {
  std::string name;
  MaybeSummary keyspace;
  v1::HandshakeResponse handshake;
};

// B's handshake for `keyspace`. A node that lacks the keyspace answers
// kNotFound; it is asked again for all keyspaces, for its name.
absl::StatusOr<PeerAnswer> AskPeer(NodeClient& peer,
                                   const std::string& keyspace) {
  PeerAnswer answer;
  absl::StatusOr<v1::HandshakeResponse> r = peer.Handshake({keyspace}, 0);
  if (absl::IsNotFound(r.status())) r = peer.Handshake({}, 0);
  if (!r.ok()) return r.status();
  answer.name = r->node_name();
  for (const v1::KeyspaceSummary& ks : r->keyspaces()) {
    if (ks.name() == keyspace) answer.keyspace = ks;
  }
  answer.handshake = *std::move(r);
  return answer;
}

absl::StatusOr<MaybeSummary> LocalSummary(storage::Store& store,
                                          const std::string& keyspace) {
  absl::StatusOr<std::unique_ptr<tree::TreeView>> view =
      store.NewTreeView(keyspace);
  if (absl::IsNotFound(view.status())) return MaybeSummary();
  if (!view.ok()) return view.status();
  v1::KeyspaceSummary summary;
  TALLY_RETURN_IF_ERROR(
      SummaryToProto(**view, keyspace, /*top_levels=*/0, &summary));
  return MaybeSummary(std::move(summary));
}

void ToRoot(const MaybeSummary& summary, v1::RunDiffRoot* out) {
  out->set_has_keyspace(summary.has_value());
  if (!summary.has_value()) return;
  out->set_root(summary->root());
  out->set_row_count(summary->row_count());
}

void ToSide(const tree::RowEntry* entry, v1::DiffSide* out) {
  ToProto(entry->version, out->mutable_version());
  out->set_deleted(entry->deleted);
}

// A sync's action, in the request's terms: the sync's a is the peer when
// `swapped` (this node is the copy).
v1::DiffAction ActionOf(KeyDifference::Action action, bool swapped) {
  switch (action) {
    case KeyDifference::Action::kCopyToA:
      return swapped ? v1::DIFF_ACTION_COPY_TO_B : v1::DIFF_ACTION_COPY_TO_A;
    case KeyDifference::Action::kCopyToB:
      return swapped ? v1::DIFF_ACTION_COPY_TO_A : v1::DIFF_ACTION_COPY_TO_B;
    case KeyDifference::Action::kEraseFromB:
      return swapped ? v1::DIFF_ACTION_ERASE_FROM_A
                     : v1::DIFF_ACTION_ERASE_FROM_B;
    case KeyDifference::Action::kConflict:
      return v1::DIFF_ACTION_CONFLICT;
    case KeyDifference::Action::kSkip:
      return v1::DIFF_ACTION_SKIPPED;
  }
  return v1::DIFF_ACTION_NONE;
}

absl::Status ValidateScope(const v1::RunDiffRequest& request) {
  if (request.has_range() && request.range().first() > request.range().last()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "run diff: range's first token %016x is after its last %016x",
        request.range().first(), request.range().last()));
  }
  if (request.has_range() && request.keys_size() > 0) {
    return absl::InvalidArgumentError(
        "run diff: give a range or keys, not both");
  }
  if (static_cast<size_t>(request.keys_size()) > kMaxRunDiffKeys) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "run diff: %d keys; the limit is %d a request (send more requests)",
        request.keys_size(), kMaxRunDiffKeys));
  }
  size_t bytes = 0;
  for (int i = 0; i < request.keys_size(); ++i) {
    const std::string& key = request.keys(i);
    if (key.empty() || key.size() > kMaxRunDiffKeyBytes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("run diff: key %d is %d bytes; keys are 1..%d bytes",
                          i, key.size(), kMaxRunDiffKeyBytes));
    }
    bytes += key.size();
  }
  if (bytes > kMaxRunDiffKeyListBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "run diff: the keys are %d bytes in all; the limit is %d a request",
        bytes, kMaxRunDiffKeyListBytes));
  }
  return absl::OkStatus();
}

// Step 4 for a scoped run: the root and rows of the scope on one side,
// from `view` (null: the side lacks the keyspace).
absl::Status ScopedRoot(std::unique_ptr<tree::TreeView> view,
                        const tree::DiffScope& scope, v1::RunDiffRoot* out) {
  TALLY_ASSIGN_OR_RETURN(const std::optional<tree::ViewSummary> summary,
                         tree::ScopedSummary(std::move(view), scope));
  out->set_has_keyspace(summary.has_value());
  if (!summary.has_value()) return absl::OkStatus();
  std::string root;
  summary->root.AppendTo(&root);
  out->set_root(std::move(root));
  out->set_row_count(summary->row_count);
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateRunDiffRequest(const v1::RunDiffRequest& request,
                                    absl::string_view self_address) {
  if (request.peer().empty()) {
    return absl::InvalidArgumentError(
        "run diff: peer is empty; name node B as HOST:PORT");
  }
  if (request.peer().size() > kMaxPeerAddressBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("run diff: peer address is %d bytes; the limit is %d",
                        request.peer().size(), kMaxPeerAddressBytes));
  }
  if (absl::Status s = ValidateAddress(request.peer()); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("run diff: bad peer address '%s': %s",
                        absl::CHexEscape(request.peer()), s.message()));
  }
  if (request.peer() == self_address) {
    return MarkPeerIsSelf(absl::InvalidArgumentError(absl::StrFormat(
        "run diff: peer %s is this node itself; diff two different nodes",
        request.peer())));
  }
  if (absl::Status s = storage::ValidateKeyspaceName(request.keyspace());
      !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("run diff: bad keyspace: ", s.message()));
  }
  if (!v1::RunDiffMode_IsValid(request.mode())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("run diff: unknown mode %d", request.mode()));
  }
  if (request.dry_run() && !IsRepair(request.mode())) {
    return absl::InvalidArgumentError(
        "run diff: dry_run applies to repairs; a diff changes nothing");
  }
  if ((request.insert_only() || request.upsert_only() ||
       request.max_rows() > 0) &&
      !IsRepair(request.mode())) {
    return absl::InvalidArgumentError(
        "run diff: insert_only, upsert_only and max_rows apply to repairs; a "
        "diff changes nothing");
  }
  if (request.insert_only() && request.upsert_only()) {
    return absl::InvalidArgumentError(
        "run diff: insert_only and upsert_only exclude each other");
  }
  // NaN fails both comparisons.
  if (!(request.bandwidth_mb() >= 0 && request.bandwidth_mb() <= 1e6)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "run diff: bandwidth_mb %g is not a number of MB/s in 0..1000000 "
        "(0: no limit)",
        request.bandwidth_mb()));
  }
  if (request.bandwidth_mb() > 0 && !IsRepair(request.mode())) {
    return absl::InvalidArgumentError(
        "run diff: bandwidth_mb applies to repairs; a diff moves no rows");
  }
  return ValidateScope(request);
}

tree::DiffScope ScopeOf(const v1::RunDiffRequest& request) {
  tree::DiffScope scope;
  if (request.has_range()) {
    scope.range =
        tree::TokenRange{request.range().first(), request.range().last()};
  }
  if (request.keys_size() > 0) {
    scope.keys = std::make_shared<const tree::KeyList>(request.keys().begin(),
                                                       request.keys().end());
  }
  return scope;
}

absl::StatusOr<v1::RunDiffSummary> RunDiffAgainstPeer(
    storage::Store* store, const v1::RunDiffRequest& request,
    const DiffRunOptions& options, DiffRunEvents* events) {
  TALLY_RETURN_IF_ERROR(ValidateRunDiffRequest(request, options.self_address));
  const std::string& keyspace = request.keyspace();
  v1::RunDiffSummary summary;

  // Step 1: connect.
  TALLY_ASSIGN_OR_RETURN(
      std::unique_ptr<NodeClient> peer,
      NodeClient::Connect(request.peer(), options.peer_client));
  peer->AwaitConnection(
      std::min(options.peer_client.rpc_timeout, kConnectWait));

  // Step 2: handshake. Any failure of the first call is one of reaching B
  // (a handshake writes nothing a reached node could refuse).
  absl::StatusOr<PeerAnswer> answer = AskPeer(*peer, keyspace);
  if (absl::IsUnavailable(answer.status()) ||
      absl::IsDeadlineExceeded(answer.status())) {
    return MarkPeerUnreachable(
        absl::UnavailableError(absl::StrFormat(
            "node %s (%s) cannot reach %s: %s", options.self_address,
            store->node_name(), request.peer(), answer.status().message())),
        request.peer());
  }
  if (!answer.ok()) return answer.status();
  if (answer->name == store->node_name()) {
    return MarkPeerIsSelf(absl::InvalidArgumentError(absl::StrFormat(
        "run diff: peer %s is node '%s', this node itself; diff two different "
        "nodes",
        request.peer(), answer->name)));
  }
  TALLY_ASSIGN_OR_RETURN(MaybeSummary local, LocalSummary(*store, keyspace));
  summary.set_a_has_keyspace(local.has_value());
  summary.set_b_has_keyspace(answer->keyspace.has_value());
  if (!local.has_value() && !answer->keyspace.has_value()) return summary;
  if (local.has_value() && answer->keyspace.has_value()) {
    TALLY_RETURN_IF_ERROR(CheckKeyspaceSchema(
        *store, keyspace, SchemaFingerprints(answer->handshake),
        absl::StrFormat("%s (%s)", request.peer(), answer->name),
        SchemaDescriptions(answer->handshake)));
  }

  // Step 3: sync. A diff is a sync that changes nothing.
  const bool repair = IsRepair(request.mode());
  const bool swapped = request.mode() == v1::RUN_DIFF_MODE_REPAIR_FROM_PEER;
  std::unique_ptr<Replica> here = NewLocalReplica(store);
  std::unique_ptr<Replica> there = NewRemoteReplica(peer.get());
  Replica& sync_a = swapped ? *there : *here;
  Replica& sync_b = swapped ? *here : *there;
  SyncOptions sync;
  sync.keyspace = keyspace;
  sync.scope = ScopeOf(request);
  // This node's store answers in process, as in a session: the diff sends
  // its fingerprints and the peer answers which differ (tree/diff/diff.h,
  // DiffOptions::own_view), so the nodes' link carries a session's bytes.
  sync.diff.own_view =
      swapped ? tree::DiffOptions::OwnView::kB : tree::DiffOptions::OwnView::kA;
  sync.a_is_source = request.mode() == v1::RUN_DIFF_MODE_REPAIR_FROM_NODE ||
                     request.mode() == v1::RUN_DIFF_MODE_REPAIR_FROM_PEER;
  sync.dry_run = !repair || request.dry_run();
  sync.changes = request.insert_only()   ? RepairChanges::kInsertOnly
                 : request.upsert_only() ? RepairChanges::kUpsertOnly
                                         : RepairChanges::kAll;
  sync.max_rows = request.max_rows();
  sync.bandwidth_bytes_per_second = request.bandwidth_mb() * 1e6;
  sync.node_bandwidth = options.node_bandwidth;
  sync.deadline = options.deadline;
  // The sync's callbacks cannot fail it, and it checks one flag: `stop`,
  // set by the first failed event (kept in event_error) or mirrored from
  // options.cancelled at every difference and batch; the sync stops at its
  // next step.
  std::atomic<bool> stop{false};
  absl::Status event_error;
  sync.cancelled = &stop;
  auto check_cancelled = [&] {
    if (options.cancelled != nullptr && options.cancelled->load()) {
      stop.store(true);
    }
  };
  // The tool prints every key of a diff and of a dry run; a real repair
  // prints only its counts.
  const bool stream_keys =
      !repair || request.dry_run() || request.stream_keys();
  sync.on_difference = [&](const KeyDifference& d) {
    check_cancelled();
    if (!stream_keys || !event_error.ok()) return;
    const tree::RowEntry* in_a = swapped ? d.in_b : d.in_a;
    const tree::RowEntry* in_b = swapped ? d.in_a : d.in_b;
    v1::DiffDifference out;
    out.set_key(d.key);
    if (in_a != nullptr) ToSide(in_a, out.mutable_a());
    if (in_b != nullptr) ToSide(in_b, out.mutable_b());
    out.set_action(repair ? ActionOf(d.action, swapped) : v1::DIFF_ACTION_NONE);
    event_error = events->Difference(std::move(out));
    if (!event_error.ok()) stop.store(true);
  };
  // The rows to copy, where both row counts give a total (a node empty or
  // far behind: node/sync/rows_to_move.h), and how fast they go.
  const uint64_t local_rows = local.has_value() ? local->row_count() : 0;
  const uint64_t peer_rows =
      answer->keyspace.has_value() ? answer->keyspace->row_count() : 0;
  // A run limited to a range or keys has none: the keyspaces' counts do not
  // bound the part.
  const std::optional<uint64_t> rows_expected =
      !sync.scope.IsWhole()
          ? std::nullopt
          : (swapped
                 ? RowsToMove::Between(peer_rows, local_rows, true)
                 : RowsToMove::Between(local_rows, peer_rows, sync.a_is_source))
                .Total();
  tree::ProgressMeter meter(absl::Now());
  meter.set_total(rows_expected);
  sync.on_progress = [&](const SyncProgress& p) {
    check_cancelled();
    if (!event_error.ok()) return;
    v1::RunDiffProgress out;
    out.set_differences(p.differences);
    out.set_rows_to_a(swapped ? p.rows_to_b : p.rows_to_a);
    out.set_rows_to_b(swapped ? p.rows_to_a : p.rows_to_b);
    const absl::Time now = absl::Now();
    meter.Record(now, p.rows_to_a + p.rows_to_b);
    const tree::ProgressEstimate e = meter.Estimate(now);
    if (rows_expected.has_value()) out.set_rows_expected(*rows_expected);
    out.set_rows_per_second(e.rate);
    if (e.remaining.has_value()) {
      out.set_eta_seconds(absl::ToDoubleSeconds(*e.remaining));
    }
    out.set_seconds(absl::ToDoubleSeconds(e.elapsed));
    event_error = events->Progress(out);
    if (!event_error.ok()) stop.store(true);
  };
  SyncStats stats;
  const absl::Status synced = SyncKeyspace(sync_a, sync_b, sync, &stats);
  if (!event_error.ok()) return event_error;
  if (absl::IsCancelled(synced)) {
    return absl::CancelledError(
        "run diff: cancelled (the tool went away, or the node is shutting "
        "down)");
  }
  TALLY_RETURN_IF_ERROR(synced);

  summary.set_differences(stats.diff.differences);
  summary.set_rounds(stats.diff.rounds);
  summary.set_bytes_sent(stats.diff.bytes_sent);
  summary.set_bytes_received(stats.diff.bytes_received);
  summary.set_seconds(absl::ToDoubleSeconds(stats.duration));
  summary.set_rows_to_a(swapped ? stats.rows_to_b : stats.rows_to_a);
  summary.set_rows_to_b(swapped ? stats.rows_to_a : stats.rows_to_b);
  summary.set_erased(stats.erased_from_b);
  summary.set_ignored(stats.ignored);
  summary.set_conflicts(stats.conflicts);
  summary.set_repair_bytes(stats.repair_bytes);
  summary.set_rows_changed(stats.rows_changed);
  summary.set_skipped(stats.skipped);

  // Step 4: roots, after a real repair.
  if (repair && !request.dry_run() && !sync.scope.IsWhole()) {
    absl::StatusOr<std::unique_ptr<tree::TreeView>> local_view =
        store->NewTreeView(keyspace);
    if (!local_view.ok() && !absl::IsNotFound(local_view.status())) {
      return local_view.status();
    }
    TALLY_RETURN_IF_ERROR(
        ScopedRoot(local_view.ok() ? *std::move(local_view) : nullptr,
                   sync.scope, summary.mutable_a_after()));
    TALLY_RETURN_IF_ERROR(ScopedRoot(peer->NewTreeView(keyspace), sync.scope,
                                     summary.mutable_b_after()));
  } else if (repair && !request.dry_run()) {
    TALLY_ASSIGN_OR_RETURN(MaybeSummary local_after,
                           LocalSummary(*store, keyspace));
    TALLY_ASSIGN_OR_RETURN(PeerAnswer peer_after, AskPeer(*peer, keyspace));
    ToRoot(local_after, summary.mutable_a_after());
    ToRoot(peer_after.keyspace, summary.mutable_b_after());
  }
  return summary;
}

}  // namespace node
}  // namespace tally
