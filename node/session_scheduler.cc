#include "node/session_scheduler.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "node/log.h"

namespace tally {
namespace node {
namespace {

// How often the timer thread looks for due sessions.
constexpr absl::Duration kTick = absl::Milliseconds(100);
// A clock this far behind a peer's is warned about: NTP keeps clocks within
// milliseconds, and the round trip of a handshake is allowed for.
constexpr absl::Duration kClockBehindWarning = absl::Seconds(5);

int64_t UnixMillisOrZero(absl::Time t) {
  return t == absl::InfinitePast() ? 0 : absl::ToUnixMillis(t);
}

// `progress` as status shows it, as of `now`.
void SessionToProto(const SessionProgress& progress, absl::Time now,
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
}

}  // namespace

SessionScheduler::SessionScheduler(storage::Store* store,
                                   const NodeConfig& config,
                                   ClientOptions client_options)
    : store_(store),
      config_(config),
      client_options_(std::move(client_options)),
      jitter_state_(std::random_device{}()) {}

SessionScheduler::~SessionScheduler() { Shutdown(); }

absl::Status SessionScheduler::Start() {
  for (const PeerConfig& peer_config : config_.peers) {
    auto peer = std::make_unique<Peer>();
    peer->config = peer_config;
    absl::StatusOr<std::unique_ptr<NodeClient>> client =
        NodeClient::Connect(peer_config.address, client_options_);
    if (!client.ok()) return client.status();
    peer->client = std::move(*client);
    peer->outage_log =
        std::make_unique<PeerOutageLog>(peer_config.address, "sessions");
    // First sessions soon, but spread out.
    {
      absl::MutexLock lock(&mu_);
      peer->next_due = absl::Now() + JitteredLocked(absl::Milliseconds(500));
    }
    peers_.push_back(std::move(peer));
  }
  pool_ = std::make_unique<WorkerPool>(config_.max_sessions,
                                       std::max<size_t>(peers_.size(), 1));
  for (const auto& peer_ptr : peers_) {
    Peer* peer = peer_ptr.get();
    peer->feed = std::make_unique<FeedSubscriber>(
        store_, peer->client.get(),
        [this, peer] {
          absl::MutexLock lock(&mu_);
          peer->next_due = absl::Now();
        },
        [this, peer](const std::string& name) {
          return ClaimName(peer, name);
        });
    peer->feed->Start();
  }
  timer_ = std::thread([this] { TimerLoop(); });
  return absl::OkStatus();
}

void SessionScheduler::Shutdown() {
  if (stopping_.exchange(true)) return;
  // All feeds at once: each notices within a heartbeat.
  for (const auto& peer : peers_) {
    if (peer->feed != nullptr) peer->feed->RequestStop();
  }
  for (const auto& peer : peers_) {
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
    for (const auto& peer_ptr : peers_) {
      Peer* peer = peer_ptr.get();
      {
        absl::MutexLock lock(&mu_);
        if (peer->running || peer->next_due > now) continue;
        peer->running = true;
        ++sessions_running_;
      }
      if (!pool_->Schedule([this, peer] { RunSession(peer); })) {
        absl::MutexLock lock(&mu_);
        peer->running = false;
        --sessions_running_;
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
  options.cancelled = &stopping_;
  options.bandwidth_bytes_per_second = config_.repair_bandwidth_mb * 1e6;
  options.outage_log = peer->outage_log.get();
  options.on_handshake = [this, peer](const v1::HandshakeResponse& answer,
                                      uint64_t sent, uint64_t received) {
    return AcceptHandshake(peer, answer, sent, received);
  };
  auto owned =
      std::make_unique<Session>(store_, peer->client.get(), std::move(options));
  Session* const session = owned.get();
  std::unique_ptr<Session> last;
  {
    absl::MutexLock lock(&mu_);
    last = std::move(peer->session);
    peer->session = std::move(owned);
  }
  last.reset();  // outside the lock
  const SessionResult result = session->Run();

  absl::MutexLock lock(&mu_);
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
  peer->rows_received += result.rows_received;
  peer->rows_sent += result.rows_sent;
  peer->bytes_repaired += result.bytes_repaired;
  peer->rows_erased += result.rows_erased;
  peer->conflicts += result.conflicts;
  peer->session_durations.Add(absl::Now() - result.start);
  peer->heat.AddSession(result.heat);
  peer->next_due = absl::Now() + JitteredLocked(config_.sync_interval);
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

void SessionScheduler::FillStatus(v1::StatusResponse* response) {
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  response->set_listen(listen_address_);
  response->set_sessions_running(static_cast<uint32_t>(sessions_running_));
  uint64_t sessions_ok = 0;
  uint64_t sessions_failed = 0;
  uint64_t rows_erased = 0;
  uint64_t conflicts = 0;
  for (const auto& peer : peers_) {
    sessions_ok += peer->sessions_ok;
    sessions_failed += peer->sessions_failed;
    rows_erased += peer->rows_erased;
    conflicts += peer->conflicts;
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
    p->set_rows_received(peer->rows_received);
    p->set_rows_sent(peer->rows_sent);
    p->set_bytes_repaired(peer->bytes_repaired);
    p->set_rows_erased(peer->rows_erased);
    p->set_conflicts(peer->conflicts);
    peer->session_durations.ToProto(p->mutable_session_seconds());
    p->set_clock_behind_seconds(peer->clock_behind_seconds);
    peer->heat.ToProto(p);
    SessionToProto(peer->session != nullptr ? peer->session->progress()
                                            : SessionProgress{},
                   now, p->mutable_session());
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
      v1::FeedTotals* totals = response->mutable_feed();
      totals->set_received(totals->received() + feed.received);
      totals->set_applied(totals->applied() + feed.applied);
      totals->set_not_newer(totals->not_newer() + feed.not_newer);
      totals->set_refused_skew(totals->refused_skew() + feed.refused_skew);
    }
  }
  response->set_sessions_ok(sessions_ok);
  response->set_sessions_failed(sessions_failed);
  response->set_rows_erased(rows_erased);
  response->set_conflicts(conflicts);
  double behind = 0;
  for (const auto& peer : peers_) {
    behind = std::max(behind, peer->clock_behind_seconds);
  }
  response->set_clock_behind_seconds(behind);
}

}  // namespace node
}  // namespace tally
