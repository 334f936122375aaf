#include "node/session/session.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "node/client/wire.h"
#include "node/observe/log.h"
#include "node/sync/rows_to_move.h"
#include "node/sync/schema_check.h"
#include "tree/token.h"

namespace tally {
namespace node {

namespace {

int64_t UnixMillisOrZero(absl::Time t) {
  return t == absl::InfinitePast() ? 0 : absl::ToUnixMillis(t);
}

}  // namespace

void SessionProgressToProto(const SessionProgress& progress, absl::Time now,
                            v1::SessionProgress* out) {
  out->set_phase(std::string(SessionPhaseName(progress.phase)));
  if (progress.phase == SessionPhase::kFailed) {
    out->set_failed_in(std::string(SessionPhaseName(progress.failed_in)));
  }
  out->set_keyspace(progress.keyspace);
  out->set_phase_since_unix_ms(UnixMillisOrZero(progress.phase_since));
  if (progress.phase_since != absl::InfinitePast()) {
    out->set_phase_seconds(absl::ToDoubleSeconds(now - progress.phase_since));
  }
  out->set_started_unix_ms(UnixMillisOrZero(progress.started));
  out->set_keyspaces(progress.keyspaces);
  out->set_keyspaces_done(progress.keyspaces_done);
  out->set_differences(progress.differences);
  out->set_rows_received(progress.rows_received);
  out->set_rows_sent(progress.rows_sent);
  if (progress.rows_expected.has_value()) {
    out->set_rows_expected(*progress.rows_expected);
  }
  out->set_rows_per_second(progress.rows_per_second);
  if (progress.remaining.has_value()) {
    out->set_eta_seconds(absl::ToDoubleSeconds(*progress.remaining));
  }
}

Session::Session(storage::Store* store, NodeClient* client,
                 SessionOptions options)
    : store_(store),
      client_(client),
      options_(std::move(options)),
      local_(NewLocalReplica(store)),
      remote_(NewRemoteReplica(client)) {}

SessionProgress Session::progress() const {
  absl::MutexLock lock(&mu_);
  SessionProgress now = progress_;
  const SessionPhase phase = now.phase;
  if (phase == SessionPhase::kHandshake || phase == SessionPhase::kDiff ||
      phase == SessionPhase::kRepair) {
    const tree::ProgressEstimate e = meter_.Estimate(absl::Now());
    now.rows_per_second = e.rate;
    now.remaining = e.remaining;
  }
  return now;
}

SessionResult Session::Run() {
  result_.start = absl::Now();
  result_.clock_start_ms = store_->clock().PhysicalMillis();
  {
    absl::MutexLock lock(&mu_);
    progress_.started = result_.start;
    meter_ = tree::ProgressMeter(result_.start);
  }
  absl::Status handshake = Handshake();
  if (handshake.ok() && !options_.only_keyspace.empty()) {
    handshake = OnlyKeyspace();
  }
  if (handshake.ok()) ExpectRows();
  if (!handshake.ok()) Fail(handshake);
  const bool refused = !handshake.ok();
  if (!refused) {
    // A keyspace that fails does not stop the ones after it (a schema that
    // differs, rows this node's backend rejects, a keyspace this node may
    // not create): one keyspace in trouble would otherwise stop every
    // keyspace named after it for good. The session's outcome is the first
    // failure; only a stop or the deadline ends it early.
    for (const std::string& keyspace : keyspaces_) {
      if (absl::IsCancelled(result_.status) ||
          absl::IsDeadlineExceeded(result_.status)) {
        break;
      }
      // A keyspace whose schema differs from the peer's is refused on its
      // own (node/sync/schema_check.h).
      const absl::Status schema = CheckKeyspaceSchema(
          *store_, keyspace, peer_schemas_, peer_name_, peer_schema_texts_);
      if (!schema.ok()) {
        LogInfo("session", {{"peer", client_->address()},
                            {"name", peer_name_},
                            {"keyspace", keyspace},
                            {"outcome", schema}});
        if (options_.trouble != nullptr && absl::IsFailedPrecondition(schema)) {
          options_.trouble->Rejected(
              {keyspace, kTroubleSchema, "", schema, peer_name_, /*rows=*/0});
        }
      }
      const absl::Status synced = schema.ok() ? SyncKeyspace(keyspace) : schema;
      if (synced.ok()) {
        // Equal with the peer now: whatever was left out has been repaired.
        if (options_.trouble != nullptr) options_.trouble->Flowed(keyspace);
      } else if (result_.status.ok() || absl::IsCancelled(synced) ||
                 absl::IsDeadlineExceeded(synced)) {
        Fail(synced);
      }
    }
  }
  if (result_.status.ok() && options_.compare_roots_after) {
    const absl::Status compared = CompareRoots();
    if (!compared.ok()) {
      Fail(absl::Status(compared.code(),
                        absl::StrCat("the sync ended, but comparing the roots "
                                     "after it failed: ",
                                     compared.message())));
    }
  }
  Finish(refused);
  return result_;
}

absl::Status Session::OnlyKeyspace() {
  const std::string& only = options_.only_keyspace;
  if (keyspaces_.count(only) == 0) {
    std::string there;
    for (const std::string& name : keyspaces_) {
      absl::StrAppend(&there, there.empty() ? "" : ", ", name);
    }
    return absl::NotFoundError(absl::StrFormat(
        "keyspace '%s' is on neither this node nor peer %s; keyspaces there "
        "are: %s",
        only, client_->address(), there.empty() ? "none" : there));
  }
  keyspaces_ = {only};
  absl::MutexLock lock(&mu_);
  progress_.keyspaces = 1;
  return absl::OkStatus();
}

absl::Status Session::CompareRoots() {
  absl::StatusOr<v1::HandshakeResponse> answer = client_->Handshake({}, 0);
  if (!answer.ok()) return answer.status();
  absl::flat_hash_map<std::string, const v1::KeyspaceSummary*> theirs;
  for (const v1::KeyspaceSummary& ks : answer->keyspaces()) {
    theirs[ks.name()] = &ks;
  }
  for (const std::string& keyspace : keyspaces_) {
    v1::KeyspaceSummary ours;
    absl::StatusOr<std::unique_ptr<tree::TreeView>> view =
        store_->NewTreeView(keyspace);
    const bool here = view.ok();
    if (!here && !absl::IsNotFound(view.status())) return view.status();
    if (here) {
      const absl::Status summary = SummaryToProto(**view, keyspace, 0, &ours);
      if (!summary.ok()) return summary;
    }
    const auto there = theirs.find(keyspace);
    const bool equal = here ? there != theirs.end() &&
                                  there->second->root() == ours.root() &&
                                  there->second->row_count() == ours.row_count()
                            : there == theirs.end();
    if (!equal) result_.differing_after.push_back(keyspace);
  }
  return absl::OkStatus();
}

absl::Status Session::Handshake() {
  EnterPhase(SessionPhase::kHandshake, "");
  // Which keyspaces: every one either side has.
  for (const storage::KeyspaceInfo& ks : store_->ListKeyspaces()) {
    keyspaces_.insert(ks.name);
    local_rows_[ks.name] = ks.row_count;
  }
  absl::StatusOr<v1::HandshakeResponse> answer = client_->Handshake({}, 0);
  if (!answer.ok()) return answer.status();
  peer_name_ = answer->node_name();
  absl::Status status;
  if (options_.on_handshake) {
    status = options_.on_handshake(*answer, result_.clock_start_ms,
                                   store_->clock().PhysicalMillis());
  }
  if (status.ok() && answer->node_name() == store_->node_name()) {
    status = absl::FailedPreconditionError(absl::StrFormat(
        "peer %s has this node's own name '%s'; node names must be unique",
        client_->address(), store_->node_name()));
  }
  for (const v1::KeyspaceSummary& ks : answer->keyspaces()) {
    keyspaces_.insert(ks.name());
    peer_rows_[ks.name()] = ks.row_count();
  }
  LeaveOutDropped(*answer);
  peer_schemas_ = SchemaFingerprints(*answer);
  peer_schema_texts_ = SchemaDescriptions(*answer);
  absl::MutexLock lock(&mu_);
  progress_.keyspaces = static_cast<uint32_t>(keyspaces_.size());
  return status;
}

void Session::LeaveOutDropped(const v1::HandshakeResponse& answer) {
  absl::flat_hash_set<std::string> peer_holds;
  for (const v1::KeyspaceSummary& ks : answer.keyspaces()) {
    peer_holds.insert(ks.name());
  }
  // `held`: the other side holds it; `why`: what is reported if it does.
  auto leave_out = [&](const std::string& name, bool held,
                       const std::string& why) {
    keyspaces_.erase(name);
    if (options_.trouble == nullptr) return;
    if (!held) {
      options_.trouble->Resolved(name, kTroubleDropped, peer_name_);
      return;
    }
    const absl::Status status = absl::FailedPreconditionError(why);
    LogInfo("session", {{"peer", client_->address()},
                        {"name", peer_name_},
                        {"keyspace", name},
                        {"outcome", status}});
    options_.trouble->Rejected(
        {name, kTroubleDropped, "", status, peer_name_, /*rows=*/0});
  };
  for (const storage::DroppedKeyspaceInfo& dropped :
       store_->ListDroppedKeyspaces()) {
    leave_out(dropped.name, peer_holds.contains(dropped.name),
              absl::StrFormat(
                  "keyspace '%s' was dropped on this node; peer %s still "
                  "holds it, and its rows are left out: drop it there too "
                  "(tally keyspaces drop), or undo the drop here (tally "
                  "keyspaces undrop)",
                  dropped.name, peer_name_));
  }
  for (const std::string& name : answer.dropped_keyspaces()) {
    leave_out(name, local_rows_.contains(name),
              absl::StrFormat(
                  "keyspace '%s' was dropped on peer %s, which takes none of "
                  "its rows; this node still holds it: drop it here too "
                  "(tally keyspaces drop), or undo the drop there (tally "
                  "keyspaces undrop)",
                  name, peer_name_));
  }
}

void Session::ExpectRows() {
  RowsToMove bounds;
  for (const std::string& keyspace : keyspaces_) {
    const auto here = local_rows_.find(keyspace);
    const auto there = peer_rows_.find(keyspace);
    const uint64_t local = here == local_rows_.end() ? 0 : here->second;
    const uint64_t peer = there == peer_rows_.end() ? 0 : there->second;
    // One-way, the peer is the source (the sync's a).
    bounds += RowsToMove::Between(peer, local, options_.from_source);
  }
  absl::MutexLock lock(&mu_);
  progress_.rows_expected = bounds.Total();
  meter_.set_total(progress_.rows_expected);
}

void Session::CountRows(const SessionProgress& before, uint64_t received,
                        uint64_t sent) {
  absl::MutexLock lock(&mu_);
  progress_.rows_received = before.rows_received + received;
  progress_.rows_sent = before.rows_sent + sent;
  meter_.Record(absl::Now(), progress_.rows_received + progress_.rows_sent);
}

absl::Status Session::SyncKeyspace(const std::string& keyspace) {
  EnterPhase(SessionPhase::kDiff, keyspace);
  const bool from_source = options_.from_source;
  // The counts of the keyspaces before this one; the sync reports its own.
  const SessionProgress before = progress();
  SyncOptions options;
  options.keyspace = keyspace;
  options.a_is_source = from_source;
  // The local store answers in process: the diff sends its fingerprints and
  // the peer answers which differ (tree/diff/diff.h, DiffOptions::own_view).
  options.diff.own_view = from_source ? tree::DiffOptions::OwnView::kB
                                      : tree::DiffOptions::OwnView::kA;
  options.deadline = result_.start + options_.timeout;
  options.cancelled = options_.cancelled;
  options.bandwidth_bytes_per_second = options_.bandwidth_bytes_per_second;
  options.node_bandwidth = options_.node_bandwidth;
  options.batch_rows = options_.batch_rows;
  options.on_step = [this, &keyspace](SyncStep step) {
    EnterPhase(
        step == SyncStep::kRepair ? SessionPhase::kRepair : SessionPhase::kDiff,
        keyspace);
  };
  options.on_difference = [this, &keyspace](const KeyDifference& d) {
    result_.heat.AddDifference(keyspace, tree::TokenOf(d.key),
                               d.action != KeyDifference::Action::kConflict);
  };
  options.on_progress = [this, &before, from_source](const SyncProgress& p) {
    // Called once a batch was written: its repairs count.
    result_.heat.CommitRepairs();
    {
      absl::MutexLock lock(&mu_);
      progress_.differences = before.differences + p.differences;
    }
    CountRows(before, from_source ? p.rows_to_b : p.rows_to_a,
              from_source ? 0 : p.rows_to_b);
  };
  const tree::ViewTraffic traffic_before = client_->traffic();
  const absl::Time start = absl::Now();
  // The stats count what was done even when the sync fails half way: rows
  // of the batches it applied were moved all the same.
  SyncStats stats;
  const absl::Status synced =
      from_source ? node::SyncKeyspace(*remote_, *local_, options, &stats)
                  : node::SyncKeyspace(*local_, *remote_, options, &stats);
  const tree::ViewTraffic traffic_after = client_->traffic();
  const uint64_t in = from_source ? stats.rows_to_b : stats.rows_to_a;
  const uint64_t out = from_source ? 0 : stats.rows_to_b;
  result_.rows_received += in;
  result_.rows_sent += out;
  result_.bytes_repaired += stats.repair_bytes;
  result_.rows_erased += stats.erased_from_b;
  result_.conflicts += stats.conflicts;
  result_.rows_changed_during_session += stats.rows_changed;
  CountRows(before, in, out);
  {
    absl::MutexLock lock(&mu_);
    ++progress_.keyspaces_done;
  }
  const bool quiet = synced.ok() && in == 0 && out == 0 &&
                     stats.erased_from_b == 0 && stats.conflicts == 0 &&
                     stats.rows_changed == 0;
  if (options_.quiet_log != nullptr) {
    if (quiet) {
      options_.quiet_log->Quiet(absl::Now(), peer_name_, keyspace);
    } else {
      options_.quiet_log->Eventful(absl::Now(), peer_name_);
    }
  }
  const bool summed_up = quiet && options_.quiet_log != nullptr;
  Log(summed_up ? LogLevel::kDebug : LogLevel::kInfo, "session",
      {{"peer", client_->address()},
       {"name", peer_name_},
       {"keyspace", keyspace},
       {"mode", from_source ? "from-source" : "two-way"},
       {"outcome", synced.ok() ? std::string("ok") : synced.ToString()},
       {"rounds", stats.diff.rounds},
       {"bytes_sent", traffic_after.bytes_sent - traffic_before.bytes_sent},
       {"bytes_received",
        traffic_after.bytes_received - traffic_before.bytes_received},
       {"rows_sent", out},
       {"rows_received", in},
       {"erased", stats.erased_from_b},
       {"conflicts", stats.conflicts},
       {"rows_changed_during_session", stats.rows_changed},
       {"duration_ms", absl::ToInt64Milliseconds(absl::Now() - start)}});
  return synced;
}

void Session::Finish(bool refused) {
  // Refused before any keyspace was synced: no per-keyspace line says why.
  if (options_.outage_log != nullptr) {
    if (refused) {
      options_.outage_log->Failure(absl::Now(), result_.status);
    } else {
      options_.outage_log->Success(absl::Now());
    }
  } else if (refused) {
    LogWarning("session",
               {{"peer", client_->address()}, {"outcome", result_.status}});
  }
  SessionProgress now;
  {
    absl::MutexLock lock(&mu_);
    const bool ok = result_.status.ok();
    progress_.phase = ok ? SessionPhase::kDone : SessionPhase::kFailed;
    progress_.failed_in = ok ? SessionPhase::kIdle : failed_in_;
    progress_.keyspace = ok ? "" : failed_keyspace_;
    progress_.phase_since = absl::Now();
    now = progress_;
  }
  if (options_.on_phase) options_.on_phase(now);
}

void Session::EnterPhase(SessionPhase phase, const std::string& keyspace) {
  SessionProgress now;
  {
    absl::MutexLock lock(&mu_);
    if (progress_.phase == phase && progress_.keyspace == keyspace) return;
    progress_.phase = phase;
    progress_.keyspace = keyspace;
    progress_.phase_since = absl::Now();
    now = progress_;
  }
  if (options_.on_phase) options_.on_phase(now);
}

void Session::Fail(const absl::Status& error) {
  result_.status = error;
  absl::MutexLock lock(&mu_);
  failed_in_ = progress_.phase;
  failed_keyspace_ = progress_.keyspace;
}

}  // namespace node
}  // namespace tally
