#include "node/session/session_scheduler.h"

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "node/observe/log.h"
#include "node/session/paused_peers.h"
#include "node/session/saved_history.h"
#include "storage/names.h"
#include "tree/status_macros.h"

namespace tally {
namespace node {
namespace {

// How often the timer thread looks for due sessions.
constexpr absl::Duration kTick = absl::Milliseconds(100);
// A clock this far behind a peer's is warned about: NTP keeps clocks within
// milliseconds, and the round trip of a handshake is allowed for.
constexpr absl::Duration kClockBehindWarning = absl::Seconds(5);
// The longest a keyspace in trouble waits for its next session.
constexpr absl::Duration kTroubleRetry = absl::Seconds(30);

}  // namespace

SessionScheduler::SessionScheduler(storage::Store* store,
                                   const NodeConfig& config,
                                   ClientOptions client_options,
                                   BandwidthLimiter* node_bandwidth,
                                   KeyspaceTrouble* trouble)
    : store_(store),
      config_(config),
      client_options_(std::move(client_options)),
      node_bandwidth_(node_bandwidth),
      trouble_(trouble),
      trouble_retry_(std::min(kTroubleRetry, config.sync_interval)),
      jitter_state_(std::random_device{}()) {}

SessionScheduler::~SessionScheduler() { Shutdown(); }

absl::StatusOr<std::shared_ptr<SessionScheduler::Peer>>
SessionScheduler::MakePeer(const PeerConfig& peer_config) {
  auto peer = std::make_shared<Peer>();
  peer->config = peer_config;
  ClientOptions options = client_options_;
  options.scheduled_sessions = true;
  absl::StatusOr<std::unique_ptr<NodeClient>> client =
      NodeClient::Connect(peer_config.address, options);
  if (!client.ok()) return client.status();
  peer->client = std::move(*client);
  peer->outage_log =
      std::make_unique<PeerOutageLog>(peer_config.address, "sessions");
  peer->quiet_log = std::make_unique<QuietSessionLog>(peer_config.address);
  // First sessions soon, but spread out.
  absl::MutexLock lock(&mu_);
  peer->next_due = absl::Now() + JitteredLocked(absl::Milliseconds(500));
  return peer;
}

void SessionScheduler::StartFeed(Peer* peer) {
  // The feed is stopped before its Peer goes (Shutdown, SetPeers), so its
  // callbacks may hold the raw pointer.
  peer->feed = std::make_unique<FeedSubscriber>(
      store_, peer->client.get(),
      [this, peer] {
        absl::MutexLock lock(&mu_);
        peer->next_due = absl::Now();
      },
      [this, peer](const std::string& name) { return ClaimName(peer, name); },
      trouble_,
      [this, peer] {
        // Soon, not at once: the cause may well last, and the feed
        // reports at every batch.
        absl::MutexLock lock(&mu_);
        peer->next_due = std::min(peer->next_due,
                                  absl::Now() + JitteredLocked(trouble_retry_));
      });
  peer->feed->Start();
}

std::vector<std::shared_ptr<SessionScheduler::Peer>>
SessionScheduler::PeersNow() const {
  absl::MutexLock lock(&mu_);
  return peers_;
}

absl::Status SessionScheduler::Start() {
  for (const PeerConfig& peer_config : config_.peers) {
    TALLY_ASSIGN_OR_RETURN(std::shared_ptr<Peer> peer, MakePeer(peer_config));
    absl::MutexLock lock(&mu_);
    peers_.push_back(std::move(peer));
  }
  RestorePaused();
  RestoreHistory();
  // Room for every peer's session in the queue, and for peers added later.
  pool_ = std::make_unique<WorkerPool>(
      config_.max_sessions, std::max<size_t>(config_.peers.size(), 256));
  for (const std::shared_ptr<Peer>& peer : PeersNow()) StartFeed(peer.get());
  timer_ = std::thread([this] { TimerLoop(); });
  return absl::OkStatus();
}

absl::StatusOr<SessionScheduler::PeerChanges> SessionScheduler::SetPeers(
    const std::vector<PeerConfig>& peers) {
  PeerChanges changes;
  std::vector<std::string> role_changed;
  std::vector<std::shared_ptr<Peer>> added;
  for (const PeerConfig& wanted : peers) {
    bool known = false;
    {
      absl::MutexLock lock(&mu_);
      for (const std::shared_ptr<Peer>& peer : peers_) {
        if (peer->config.address != wanted.address) continue;
        known = true;
        if (peer->config.role != wanted.role) {
          role_changed.push_back(wanted.address);
        }
      }
    }
    if (known) continue;
    TALLY_ASSIGN_OR_RETURN(std::shared_ptr<Peer> peer, MakePeer(wanted));
    added.push_back(std::move(peer));
  }
  std::vector<std::shared_ptr<Peer>> removed;
  std::vector<std::shared_ptr<SessionRequest>> unrun;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_.load()) {
      return absl::UnavailableError("the node is shutting down");
    }
    for (auto it = peers_.begin(); it != peers_.end();) {
      const bool listed =
          std::any_of(peers.begin(), peers.end(), [&](const PeerConfig& p) {
            return p.address == (*it)->config.address;
          });
      if (listed) {
        ++it;
        continue;
      }
      Peer& peer = **it;
      if (peer.running) {
        peer.stop_reason = "the peer was removed from the node's peers";
      }
      peer.stop_session.store(true);
      for (auto& request : peer.requests) unrun.push_back(std::move(request));
      peer.requests.clear();
      removed_.sessions_ok += peer.sessions_ok;
      removed_.sessions_failed += peer.sessions_failed;
      removed_.rows_erased += peer.rows_erased;
      removed_.conflicts += peer.conflicts;
      removed_.rows_changed_during_session += peer.rows_changed_during_session;
      changes.removed.push_back(peer.config.address);
      removed.push_back(std::move(*it));
      it = peers_.erase(it);
    }
    for (const std::shared_ptr<Peer>& peer : added) {
      changes.added.push_back(peer->config.address);
      peers_.push_back(peer);
    }
  }
  for (const auto& request : unrun) {
    FinishUnrun(request, absl::UnavailableError(
                             "the peer was removed from the node's peers"));
  }
  for (const std::shared_ptr<Peer>& peer : removed) {
    if (peer->feed != nullptr) peer->feed->RequestStop();
  }
  for (const std::shared_ptr<Peer>& peer : removed) {
    if (peer->feed != nullptr) peer->feed->Stop();
  }
  for (const std::shared_ptr<Peer>& peer : added) StartFeed(peer.get());
  if (!removed.empty() || !added.empty()) {
    (void)PersistPaused();  // a removed peer's pause goes with it
    PersistHistory();
  }
  if (!role_changed.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the role of peer%s %s changed; a role (peer or source) changes with "
        "a restart only, so %s kept as %s",
        role_changed.size() == 1 ? "" : "s", absl::StrJoin(role_changed, ", "),
        role_changed.size() == 1 ? "it is" : "they are",
        role_changed.size() == 1 ? "it was" : "they were"));
  }
  return changes;
}

void SessionScheduler::Shutdown() {
  if (stopping_.exchange(true)) return;
  {
    // Running sessions stop at their next step. Under mu_: a session the
    // timer claims clears its peer's flag under it, before this.
    absl::MutexLock lock(&mu_);
    for (const auto& peer : peers_) {
      if (peer->running) peer->stop_reason = "the node is shutting down";
      peer->stop_session.store(true);
      for (const auto& request : peer->requests) {
        FinishUnrun(request,
                    absl::UnavailableError("the node is shutting down"));
      }
      peer->requests.clear();
    }
  }
  // All feeds at once: each notices within a heartbeat.
  const std::vector<std::shared_ptr<Peer>> peers = PeersNow();
  for (const auto& peer : peers) {
    if (peer->feed != nullptr) peer->feed->RequestStop();
  }
  for (const auto& peer : peers) {
    if (peer->feed != nullptr) peer->feed->Stop();
  }
  if (timer_.joinable()) timer_.join();
  // Running sessions see stopping_ at their next step; the pool's
  // destructor waits for them.
  pool_.reset();
}

absl::Duration SessionScheduler::JitteredLocked(absl::Duration d) {
  // A 64-bit LCG is plenty to spread sessions out.
  jitter_state_ =
      jitter_state_ * 6364136223846793005ULL + 1442695040888963407ULL;
  const double unit = static_cast<double>(jitter_state_ >> 11) /
                      static_cast<double>(1ULL << 53);
  return d * (0.8 + 0.4 * unit);
}

void SessionScheduler::TimerLoop() {
  while (!stopping_.load()) {
    const absl::Time now = absl::Now();
    for (const std::shared_ptr<Peer>& peer_ref : PeersNow()) {
      Peer* peer = peer_ref.get();
      {
        absl::MutexLock lock(&mu_);
        if (stopping_.load() || peer->running || peer->paused ||
            (peer->next_due > now && peer->requests.empty())) {
          continue;
        }
        peer->running = true;
        if (!peer->requests.empty()) {
          peer->request = std::move(peer->requests.front());
          peer->requests.pop_front();
          peer->trigger = SessionTrigger::kRequested;
        } else {
          peer->request = nullptr;
          peer->trigger = SessionTrigger::kScheduled;
        }
        peer->stop_reason.clear();
        peer->stop_session.store(false);
        ++sessions_running_;
      }
      // The session keeps its Peer alive should SetPeers remove it.
      if (!pool_->Schedule([this, peer_ref] { RunSession(peer_ref.get()); })) {
        absl::MutexLock lock(&mu_);
        peer->running = false;
        --sessions_running_;
        if (peer->request != nullptr) {
          peer->requests.push_front(std::move(peer->request));
        }
      }
    }
    absl::SleepFor(kTick);
  }
}

absl::Status SessionScheduler::ClaimName(Peer* peer, const std::string& name) {
  absl::MutexLock lock(&mu_);
  peer->name = name;
  // Two addresses of one node (localhost and 127.0.0.1, a name and its IP)
  // escape the config's duplicate check; their two feed subscriptions would
  // replace each other at the publisher forever. The first one listed wins.
  for (const auto& other : peers_) {
    if (other.get() == peer) break;
    if (other->name == name) {
      return absl::AlreadyExistsError(absl::StrFormat(
          "peers %s and %s are the same node '%s'; give each peer once (this "
          "node follows and syncs with it through %s only)",
          other->config.address, peer->config.address, name,
          other->config.address));
    }
  }
  return absl::OkStatus();
}

void SessionScheduler::RunSession(Peer* peer) {
  SessionOptions options;
  options.from_source = peer->config.role == PeerRole::kSource;
  options.timeout = config_.session_timeout;
  options.cancelled = &peer->stop_session;
  options.bandwidth_bytes_per_second = config_.repair_bandwidth_mb * 1e6;
  options.node_bandwidth = node_bandwidth_;
  options.outage_log = peer->outage_log.get();
  options.quiet_log = peer->quiet_log.get();
  options.trouble = trouble_;
  options.on_handshake = [this, peer](const v1::HandshakeResponse& answer,
                                      uint64_t sent, uint64_t received) {
    return AcceptHandshake(peer, answer, sent, received);
  };
  std::shared_ptr<SessionRequest> request;
  {
    absl::MutexLock lock(&mu_);
    request = peer->request;
  }
  if (request != nullptr) {
    options.only_keyspace = request->keyspace();
    options.compare_roots_after = true;
  }
  auto owned =
      std::make_shared<Session>(store_, peer->client.get(), std::move(options));
  Session* const session = owned.get();
  std::shared_ptr<Session> last;
  {
    absl::MutexLock lock(&mu_);
    last = std::move(peer->session);
    peer->session = owned;
    peer->counting_session = true;
  }
  if (request != nullptr) request->Start(owned);
  last.reset();  // outside the lock
  SessionResult result = session->Run();
  const SessionProgress progress = session->progress();
  const absl::Time end = absl::Now();

  SessionRecord record;
  {
    absl::MutexLock lock(&mu_);
    if (absl::IsCancelled(result.status) && !peer->stop_reason.empty()) {
      // The sync's own message cannot know who stopped it.
      result.status = absl::CancelledError(
          absl::StrCat("session stopped: ", peer->stop_reason));
    }
    peer->running = false;
    --sessions_running_;
    peer->last_session = result.start;
    peer->last_outcome = result.status.ok() ? "ok" : result.status.ToString();
    if (result.status.ok()) {
      ++peer->sessions_ok;
      peer->synced_since =
          absl::FromUnixMillis(static_cast<int64_t>(result.clock_start_ms));
    } else {
      ++peer->sessions_failed;
    }
    // In the same critical section as counting_session is cleared: status
    // never counts the session's rows twice, nor drops them for a moment.
    peer->counting_session = false;
    peer->rows_received += result.rows_received;
    peer->rows_sent += result.rows_sent;
    peer->bytes_repaired += result.bytes_repaired;
    peer->rows_erased += result.rows_erased;
    peer->conflicts += result.conflicts;
    peer->rows_changed_during_session += result.rows_changed_during_session;
    peer->session_durations.Add(end - result.start);
    peer->heat.AddSession(result.heat);
    // A keyspace in trouble is retried within trouble_retry_: the session
    // that repairs it once its cause is gone is what heals it.
    const bool troubled = trouble_ != nullptr && !trouble_->InTrouble().empty();
    peer->next_due =
        end + JitteredLocked(troubled ? trouble_retry_ : config_.sync_interval);
    record.start = result.start;
    record.duration = end - result.start;
    record.trigger = peer->trigger;
    record.outcome = peer->last_outcome;
    record.keyspaces = progress.keyspaces_done;
    record.differences = progress.differences;
    record.rows_received = result.rows_received;
    record.rows_sent = result.rows_sent;
    record.rows_erased = result.rows_erased;
    record.conflicts = result.conflicts;
    record.bytes_repaired = result.bytes_repaired;
    record.rows_changed_during_session = result.rows_changed_during_session;
    peer->history.Record(record);
    peer->request = nullptr;
  }
  PersistHistory();
  if (request != nullptr) {
    request->Finish(record, std::move(result.differing_after));
  }
  // One line per session with what it did, whatever its outcome: a session
  // stopped at shutdown says how many rows it had copied.
  // A session refused before any keyspace (the peer down) is the peer's
  // outage log's to report, once per outage: here only at debug level.
  const bool refused = !result.status.ok() && record.keyspaces == 0;
  Log(refused ? LogLevel::kDebug : LogLevel::kInfo, "session ended",
      {{"peer", peer->config.address},
       {"name", PeerName(peer)},
       {"trigger", SessionTriggerName(record.trigger)},
       {"outcome", record.outcome},
       {"keyspaces", record.keyspaces},
       {"differences", record.differences},
       {"rows_received", record.rows_received},
       {"rows_sent", record.rows_sent},
       {"erased", record.rows_erased},
       {"conflicts", record.conflicts},
       {"bytes_repaired", record.bytes_repaired},
       {"rows_changed_during_session", record.rows_changed_during_session},
       {"duration_ms", absl::ToInt64Milliseconds(record.duration)}});
}

void SessionScheduler::FinishUnrun(
    const std::shared_ptr<SessionRequest>& request,
    const absl::Status& outcome) {
  SessionRecord record;
  record.start = absl::Now();
  record.trigger = SessionTrigger::kRequested;
  record.outcome = outcome.ToString();
  request->Finish(std::move(record), {});
}

absl::StatusOr<std::vector<PeerControl::Asked>>
SessionScheduler::RequestSessions(const std::string& name,
                                  const std::string& keyspace) {
  if (!keyspace.empty()) {
    const absl::Status valid = storage::ValidateKeyspaceName(keyspace);
    if (!valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad keyspace: ", valid.message()));
    }
  }
  std::vector<Asked> asked;
  absl::MutexLock lock(&mu_);
  if (stopping_.load()) {
    return absl::UnavailableError("the node is shutting down");
  }
  if (peers_.empty()) {
    return absl::FailedPreconditionError(
        "this node has no peers (--peer); there is nothing to sync with");
  }
  std::vector<Peer*> chosen;
  if (!name.empty()) {
    absl::StatusOr<Peer*> found = FindPeerLocked(name);
    if (!found.ok()) return found.status();
    if ((*found)->paused) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "sessions with peer %s are paused; resume them first: tally peer "
          "resume %s",
          (*found)->config.address, (*found)->config.address));
    }
    chosen.push_back(*found);
  } else {
    for (const auto& peer : peers_) chosen.push_back(peer.get());
  }
  bool any = false;
  for (Peer* peer : chosen) {
    Asked one;
    one.address = peer->config.address;
    one.name = peer->name;
    if (!peer->paused) {
      one.request = std::make_shared<SessionRequest>(keyspace);
      any = true;
    }
    asked.push_back(std::move(one));
  }
  if (!any) {
    return absl::FailedPreconditionError(
        "every peer of this node is paused; resume one first: tally peer "
        "resume PEER");
  }
  // Queued only once every check passed: all or nothing.
  for (size_t i = 0; i < chosen.size(); ++i) {
    if (asked[i].request != nullptr) {
      chosen[i]->requests.push_back(asked[i].request);
    }
  }
  return asked;
}

void SessionScheduler::CancelRequest(
    const std::shared_ptr<SessionRequest>& request) {
  bool dropped = false;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& peer : peers_) {
      if (peer->request == request) {
        peer->stop_reason = "the tool that asked for it went away";
        peer->stop_session.store(true);
        return;  // RunSession finishes it
      }
      auto it =
          std::find(peer->requests.begin(), peer->requests.end(), request);
      if (it != peer->requests.end()) {
        peer->requests.erase(it);
        dropped = true;
        break;
      }
    }
  }
  if (dropped) {
    FinishUnrun(request,
                absl::CancelledError("the tool that asked for it went away"));
  }
}

void SessionScheduler::RestorePaused() {
  if (config_.data_dir.empty()) return;
  absl::StatusOr<std::set<std::string>> paused =
      ReadPausedPeers(config_.data_dir);
  if (!paused.ok()) {
    LogWarning(
        absl::StrCat(paused.status().message(), "; every peer starts resumed"));
    return;
  }
  absl::MutexLock lock(&mu_);
  for (const std::string& address : *paused) {
    Peer* found = nullptr;
    for (const auto& peer : peers_) {
      if (peer->config.address == address) found = peer.get();
    }
    if (found == nullptr) {
      LogWarning(absl::StrFormat(
          "%s names %s, which is no longer a peer; ignored (dropped at the "
          "next pause or resume)",
          kPausedPeersFile, address));
      continue;
    }
    found->paused = true;
    found->paused_since = absl::Now();
    LogInfo(absl::StrFormat(
        "peer %s stays paused (%s in the data directory); tally peer resume "
        "%s ends it",
        address, kPausedPeersFile, address));
  }
}

void SessionScheduler::RestoreHistory() {
  if (config_.data_dir.empty()) return;
  absl::StatusOr<std::map<std::string, SavedPeer>> saved =
      ReadSavedHistory(config_.data_dir);
  if (!saved.ok()) {
    LogWarning(absl::StrCat(saved.status().message(),
                            "; the peers' session history starts empty"));
    return;
  }
  absl::MutexLock lock(&mu_);
  for (const auto& peer : peers_) {
    auto found = saved->find(peer->config.address);
    if (found == saved->end()) continue;
    // Oldest first, so that the newest ends newest.
    const SavedPeer& saved_peer = found->second;
    for (auto it = saved_peer.records.rbegin(); it != saved_peer.records.rend();
         ++it) {
      peer->history.Record(*it);
    }
    for (auto it = saved_peer.heat.rbegin(); it != saved_peer.heat.rend();
         ++it) {
      peer->heat.AddSessionCounts(*it);
    }
  }
}

void SessionScheduler::PersistHistory() {
  if (config_.data_dir.empty()) return;
  absl::MutexLock persist(&persist_mu_);
  std::map<std::string, SavedPeer> by_peer;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& peer : peers_) {
      SavedPeer& saved = by_peer[peer->config.address];
      saved.records = peer->history.Newest();
      saved.heat = peer->heat.NewestFirst();
      // Never more counts than records (a history smaller than the heat
      // window): the counts belong to the newest sessions.
      if (saved.heat.size() > saved.records.size()) {
        saved.heat.resize(saved.records.size());
      }
    }
  }
  const absl::Status written = WriteSavedHistory(config_.data_dir, by_peer);
  if (!written.ok() && !history_write_warned_.exchange(true)) {
    LogWarning(absl::StrCat(written.message(),
                            "; the session history will not outlive a "
                            "restart (said once)"));
  }
}

absl::Status SessionScheduler::PersistPaused() {
  if (config_.data_dir.empty()) {
    return absl::FailedPreconditionError("the node has no data directory");
  }
  // One writer at a time, each writing the latest state: a pause and a
  // resume racing cannot leave the older one in the file.
  absl::MutexLock persist(&persist_mu_);
  std::set<std::string> paused;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& peer : peers_) {
      if (peer->paused) paused.insert(peer->config.address);
    }
  }
  const absl::Status written = WritePausedPeers(config_.data_dir, paused);
  if (!written.ok()) {
    LogWarning(absl::StrCat(written.message(),
                            "; the change holds until the node restarts"));
  }
  return written;
}

std::string SessionScheduler::PeerName(Peer* peer) {
  absl::MutexLock lock(&mu_);
  return peer->name.empty() ? std::string("?") : peer->name;
}

absl::StatusOr<SessionScheduler::Peer*> SessionScheduler::FindPeerLocked(
    const std::string& name) const {
  if (name.empty()) {
    return absl::InvalidArgumentError(
        "no peer given; name one of the node's peers by its address or its "
        "node name");
  }
  // Addresses and node names are short; a long one is no peer, and is not
  // echoed back whole.
  constexpr size_t kMaxPeerName = 1024;
  if (name.size() > kMaxPeerName) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "peer is %d bytes; the limit is %d", name.size(), kMaxPeerName));
  }
  for (const auto& peer : peers_) {
    if (peer->config.address == name) return peer.get();
  }
  for (const auto& peer : peers_) {
    if (!peer->name.empty() && peer->name == name) return peer.get();
  }
  std::string known;
  for (const auto& peer : peers_) {
    absl::StrAppend(
        &known, known.empty() ? "" : ", ", peer->config.address,
        peer->name.empty() ? "" : absl::StrCat(" (", peer->name, ")"));
  }
  return absl::NotFoundError(
      absl::StrFormat("'%s' is not a peer of this node; its peers: %s",
                      absl::CHexEscape(name), known.empty() ? "none" : known));
}

absl::StatusOr<v1::PeerControlResponse> SessionScheduler::SetPaused(
    const std::string& name, bool paused) {
  v1::PeerControlResponse response;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<Peer*> found = FindPeerLocked(name);
    if (!found.ok()) return found.status();
    Peer* peer = *found;
    response.set_address(peer->config.address);
    response.set_name(peer->name);
    response.set_changed(peer->paused != paused);
    response.set_paused(paused);
    if (peer->paused != paused) {
      peer->paused = paused;
      peer->paused_since = paused ? absl::Now() : absl::InfinitePast();
      if (paused && peer->running) {
        peer->stop_reason = "the peer was paused (tally peer pause)";
        peer->stop_session.store(true);
        response.set_session_stopped(true);
      }
      if (paused) {
        for (const auto& request : peer->requests) {
          FinishUnrun(request, absl::FailedPreconditionError(
                                   "the peer was paused (tally peer pause) "
                                   "before the session started"));
        }
        peer->requests.clear();
      }
      if (!paused) {
        // Its next session comes soon, not a whole interval after resume.
        peer->next_due = absl::Now() + JitteredLocked(absl::Milliseconds(500));
      }
    }
  }
  if (response.changed()) {
    const absl::Status saved = PersistPaused();
    response.set_saved(saved.ok());
    if (!saved.ok()) response.set_save_error(std::string(saved.message()));
  } else {
    response.set_saved(true);  // as it was, and as saved before
  }
  if (response.changed()) {
    LogInfo(paused ? "peer paused" : "peer resumed",
            {{"peer", response.address()},
             {"name", response.name().empty() ? "?" : response.name()},
             {"running_session",
              response.session_stopped() ? "stopping" : "none"}});
  }
  return response;
}

absl::Status SessionScheduler::AcceptHandshake(
    Peer* peer, const v1::HandshakeResponse& answer, uint64_t sent,
    uint64_t received) {
  {
    // Before the clock is observed, so that its warning names the peer.
    absl::MutexLock lock(&mu_);
    peer->name = answer.node_name();
  }
  if (answer.clock_unix_ms() != 0) {
    ObserveClock(peer, answer.clock_unix_ms(), sent, received);
  }
  return ClaimName(peer, answer.node_name());
}

void SessionScheduler::ObserveClock(Peer* peer, uint64_t peer_clock_ms,
                                    uint64_t sent, uint64_t received) {
  // The peer read its clock somewhere in [sent, received]; the middle is
  // off by at most half the round trip.
  const double local_ms = (static_cast<double>(sent) + received) / 2;
  const double behind = (static_cast<double>(peer_clock_ms) - local_ms) / 1000;
  const double uncertainty = (static_cast<double>(received) - sent) / 2000;
  const double threshold = absl::ToDoubleSeconds(kClockBehindWarning);
  std::string warning;
  {
    absl::MutexLock lock(&mu_);
    peer->clock_behind_seconds = behind;
    if (behind - uncertainty > threshold && !peer->clock_warned) {
      peer->clock_warned = true;
      warning = absl::StrFormat(
          "clock: this node's clock is %.1f s behind peer %s%s; its "
          "writes lose to older ones elsewhere and the peer's newer writes "
          "may be refused (max-clock-skew %s). Fix its time source (NTP).",
          behind, peer->config.address,
          // The name is learned at the first handshake that succeeds.
          peer->name.empty() ? "" : absl::StrCat(" (", peer->name, ")"),
          absl::FormatDuration(config_.max_clock_skew));
    } else if (behind < threshold / 2) {
      peer->clock_warned = false;  // warn again if it falls behind again
    }
  }
  if (!warning.empty()) LogWarning(warning);
}

absl::Time SessionScheduler::PeersSyncedSince() const {
  absl::MutexLock lock(&mu_);
  absl::Time since = absl::InfiniteFuture();
  for (const auto& peer : peers_) since = std::min(since, peer->synced_since);
  return since;
}

void SessionScheduler::SetListenAddress(const std::string& address) {
  absl::MutexLock lock(&mu_);
  listen_address_ = address;
}

void SessionScheduler::ObserveCaller(const std::string& address,
                                     const std::string& name) {
  // Enough for any mesh; more names than this are not a mesh but a flood,
  // and are not remembered.
  constexpr size_t kMaxCallers = 1024;
  bool warn = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = callers_.find(name);
    if (it == callers_.end()) {
      if (callers_.size() >= kMaxCallers) return;
      it = callers_.emplace(name, Caller{}).first;
    }
    Caller& caller = it->second;
    caller.address = address;
    ++caller.handshakes;
    caller.last = absl::Now();
    if (!caller.warned && !IsPeerNameLocked(name)) {
      caller.warned = true;
      warn = true;
    }
  }
  if (warn) {
    LogWarning(
        "a node that is not among this node's peers runs sessions with it: "
        "the link is one-sided, so this node does not follow its change "
        "feed and its writes arrive only with its sessions. Name it as a "
        "peer here too (or it is a listed peer this node has not reached "
        "yet)",
        {{"caller", name}, {"from", address}});
  }
}

bool SessionScheduler::IsListedPeer(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  return IsPeerNameLocked(name);
}

bool SessionScheduler::IsPeerNameLocked(const std::string& name) const {
  for (const auto& peer : peers_) {
    if (peer->name == name) return true;
  }
  return false;
}

void SessionScheduler::FillStatus(v1::StatusResponse* response) {
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  response->set_listen(listen_address_);
  response->set_sessions_running(static_cast<uint32_t>(sessions_running_));
  for (const auto& [name, caller] : callers_) {
    if (IsPeerNameLocked(name)) continue;
    v1::UnlistedCaller* unlisted = response->add_unlisted_callers();
    unlisted->set_name(name);
    unlisted->set_address(caller.address);
    unlisted->set_handshakes(caller.handshakes);
    unlisted->set_last_unix_ms(
        static_cast<uint64_t>(absl::ToUnixMillis(caller.last)));
  }
  uint64_t sessions_ok = removed_.sessions_ok;
  uint64_t sessions_failed = removed_.sessions_failed;
  uint64_t rows_erased = removed_.rows_erased;
  uint64_t conflicts = removed_.conflicts;
  uint64_t rows_changed_during_session = removed_.rows_changed_during_session;
  for (const auto& peer : peers_) {
    sessions_ok += peer->sessions_ok;
    sessions_failed += peer->sessions_failed;
    rows_erased += peer->rows_erased;
    conflicts += peer->conflicts;
    rows_changed_during_session += peer->rows_changed_during_session;
    v1::PeerStatus* p = response->add_peers();
    p->set_address(peer->config.address);
    p->set_role(peer->config.role == PeerRole::kSource ? "source" : "peer");
    p->set_name(peer->name);
    if (peer->last_session != absl::InfinitePast()) {
      p->set_last_session_unix_ms(absl::ToUnixMillis(peer->last_session));
    }
    if (peer->synced_since != absl::InfinitePast()) {
      p->set_last_success_unix_ms(absl::ToUnixMillis(peer->synced_since));
    }
    p->set_last_outcome(peer->last_outcome);
    p->set_session_running(peer->running);
    p->set_sessions_ok(peer->sessions_ok);
    p->set_sessions_failed(peer->sessions_failed);
    const SessionProgress progress = peer->session != nullptr
                                         ? peer->session->progress()
                                         : SessionProgress{};
    // The running session's rows so far count too: a long session shows
    // its work as it goes (RunSession adds them for good as it ends).
    const bool counting = peer->counting_session;
    p->set_rows_received(peer->rows_received +
                         (counting ? progress.rows_received : 0));
    p->set_rows_sent(peer->rows_sent + (counting ? progress.rows_sent : 0));
    p->set_bytes_repaired(peer->bytes_repaired);
    p->set_rows_erased(peer->rows_erased);
    p->set_conflicts(peer->conflicts);
    p->set_rows_changed_during_session(peer->rows_changed_during_session);
    peer->session_durations.ToProto(p->mutable_session_seconds());
    p->set_clock_behind_seconds(peer->clock_behind_seconds);
    peer->heat.ToProto(p);
    SessionProgressToProto(progress, now, p->mutable_session());
    if (peer->session != nullptr) {
      p->mutable_session()->set_trigger(SessionTriggerName(peer->trigger));
    }
    for (const SessionRecord& record : peer->history.Newest()) {
      SessionRecordToProto(record, p->add_history());
    }
    p->set_paused(peer->paused);
    if (peer->paused) {
      p->set_paused_since_unix_ms(absl::ToUnixMillis(peer->paused_since));
    }
    if (peer->feed != nullptr) {
      const FeedCounters feed = peer->feed->counters();
      p->set_feed_received(feed.received);
      p->set_feed_applied(feed.applied);
      p->set_feed_position(feed.position);
      p->set_feed_reconnects(feed.reconnects);
      p->set_feed_refused_skew(feed.refused_skew);
      p->set_feed_not_newer(feed.not_newer);
      p->set_feed_skipped_own(feed.skipped_own);
      p->set_feed_skipped_superseded(feed.skipped_superseded);
      p->set_feed_lag_entries(feed.lag_entries);
      p->set_feed_lag_seconds(absl::ToDoubleSeconds(feed.lag));
      p->set_feed_connected(feed.connected);
      p->set_feed_rejected(feed.rejected);
      v1::FeedTotals* totals = response->mutable_feed();
      totals->set_received(totals->received() + feed.received);
      totals->set_applied(totals->applied() + feed.applied);
      totals->set_not_newer(totals->not_newer() + feed.not_newer);
      totals->set_refused_skew(totals->refused_skew() + feed.refused_skew);
      totals->set_rejected(totals->rejected() + feed.rejected);
    }
  }
  response->set_sessions_ok(sessions_ok);
  response->set_sessions_failed(sessions_failed);
  response->set_rows_erased(rows_erased);
  response->set_conflicts(conflicts);
  response->set_rows_changed_during_session(rows_changed_during_session);
  double behind = 0;
  for (const auto& peer : peers_) {
    behind = std::max(behind, peer->clock_behind_seconds);
  }
  response->set_clock_behind_seconds(behind);
}

}  // namespace node
}  // namespace tally
