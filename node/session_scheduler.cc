#include "node/session_scheduler.h"

#include <algorithm>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "node/log.h"
#include "node/replica.h"
#include "node/schema_check.h"
#include "node/sync.h"

namespace tally {
namespace node {
namespace {

// How often the timer thread looks for due sessions.
constexpr absl::Duration kTick = absl::Milliseconds(100);
// A clock this far behind a peer's is warned about: NTP keeps clocks within
// milliseconds, and the round trip of a handshake is allowed for.
constexpr absl::Duration kClockBehindWarning = absl::Seconds(5);

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
  const absl::Time start = absl::Now();
  // When the session started by the store's clock: what the tombstone
  // purge compares with the arrival of its tombstones.
  const uint64_t clock_start = store_->clock().PhysicalMillis();
  const bool from_source = peer->config.role == PeerRole::kSource;
  absl::Status status;
  uint64_t rows_received = 0;
  uint64_t rows_sent = 0;
  uint64_t bytes_repaired = 0;
  uint64_t rows_erased = 0;
  uint64_t conflicts = 0;

  // Which keyspaces: every one either side has.
  std::set<std::string> keyspaces;
  for (const storage::KeyspaceInfo& ks : store_->ListKeyspaces()) {
    keyspaces.insert(ks.name);
  }
  absl::StatusOr<v1::HandshakeResponse> handshake =
      peer->client->Handshake({}, 0);
  if (handshake.ok()) {
    // Before the clock is observed, so that its warning names the peer.
    absl::MutexLock lock(&mu_);
    peer->name = handshake->node_name();
  }
  if (handshake.ok() && handshake->clock_unix_ms() != 0) {
    ObserveClock(peer, handshake->clock_unix_ms(), clock_start,
                 store_->clock().PhysicalMillis());
  }
  if (!handshake.ok()) {
    status = handshake.status();
  } else {
    status = ClaimName(peer, handshake->node_name());
    if (status.ok() && handshake->node_name() == store_->node_name()) {
      status = absl::FailedPreconditionError(absl::StrFormat(
          "peer %s has this node's own name '%s'; node names must be unique",
          peer->config.address, store_->node_name()));
    }
    for (const v1::KeyspaceSummary& ks : handshake->keyspaces()) {
      keyspaces.insert(ks.name());
    }
  }

  // Refused before any keyspace was synced: no per-keyspace line says why.
  const bool refused = !status.ok();
  const absl::flat_hash_map<std::string, std::string> peer_schemas =
      handshake.ok() ? SchemaFingerprints(*handshake)
                     : absl::flat_hash_map<std::string, std::string>();
  std::unique_ptr<Replica> local = NewLocalReplica(store_);
  std::unique_ptr<Replica> remote = NewRemoteReplica(peer->client.get());
  // A keyspace this node may not create (it is at max-keyspaces) fails on
  // its own: the keyspaces after it are synced all the same, or one such
  // keyspace of a peer would stop every keyspace named after it for good.
  bool keyspace_refused = false;
  for (const std::string& keyspace : keyspaces) {
    if (!status.ok() && !keyspace_refused) break;
    SyncOptions options;
    options.keyspace = keyspace;
    options.a_is_source = from_source;
    options.deadline = start + config_.session_timeout;
    options.cancelled = &stopping_;
    options.bandwidth_bytes_per_second = config_.repair_bandwidth_mb * 1e6;
    const tree::ViewTraffic before = peer->client->traffic();
    const absl::Time keyspace_start = absl::Now();
    // The stats count what was done even when the sync fails half way:
    // rows of the batches it applied were moved all the same.
    SyncStats stats;
    // A keyspace whose schema differs from the peer's is refused on its
    // own, as one this node may not create.
    const absl::Status schema =
        handshake.ok() ? CheckKeyspaceSchema(*store_, keyspace, peer_schemas,
                                             handshake->node_name())
                       : absl::OkStatus();
    const absl::Status synced =
        !schema.ok()  ? schema
        : from_source ? SyncKeyspace(*remote, *local, options, &stats)
                      : SyncKeyspace(*local, *remote, options, &stats);
    const tree::ViewTraffic after = peer->client->traffic();
    const uint64_t in = from_source ? stats.rows_to_b : stats.rows_to_a;
    const uint64_t out = from_source ? 0 : stats.rows_to_b;
    rows_received += in;
    rows_sent += out;
    bytes_repaired += stats.repair_bytes;
    rows_erased += stats.erased_from_b;
    conflicts += stats.conflicts;
    if (!synced.ok()) {
      keyspace_refused = absl::IsResourceExhausted(synced) || !schema.ok();
      if (status.ok() || !keyspace_refused) status = synced;
    }
    LogInfo(absl::StrFormat(
        "session peer=%s name=%s keyspace=%s mode=%s outcome=%s rounds=%d "
        "bytes_sent=%d bytes_received=%d rows_sent=%d rows_received=%d "
        "erased=%d conflicts=%d duration_ms=%d",
        peer->config.address, handshake.ok() ? handshake->node_name() : "?",
        keyspace, from_source ? "from-source" : "two-way",
        synced.ok() ? "ok" : synced.ToString(), stats.diff.rounds,
        after.bytes_sent - before.bytes_sent,
        after.bytes_received - before.bytes_received, out, in,
        stats.erased_from_b, stats.conflicts,
        absl::ToInt64Milliseconds(absl::Now() - keyspace_start)));
  }
  if (refused) {
    LogWarning(absl::StrFormat("session peer=%s outcome=%s",
                               peer->config.address, status.ToString()));
  }

  absl::MutexLock lock(&mu_);
  peer->running = false;
  --sessions_running_;
  peer->last_session = start;
  peer->last_outcome = status.ok() ? "ok" : status.ToString();
  if (status.ok()) {
    ++peer->sessions_ok;
    peer->synced_since =
        absl::FromUnixMillis(static_cast<int64_t>(clock_start));
  } else {
    ++peer->sessions_failed;
  }
  peer->rows_received += rows_received;
  peer->rows_sent += rows_sent;
  peer->bytes_repaired += bytes_repaired;
  peer->rows_erased += rows_erased;
  peer->conflicts += conflicts;
  peer->next_due = absl::Now() + JitteredLocked(config_.sync_interval);
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
    p->set_last_outcome(peer->last_outcome);
    p->set_session_running(peer->running);
    p->set_sessions_ok(peer->sessions_ok);
    p->set_sessions_failed(peer->sessions_failed);
    p->set_rows_received(peer->rows_received);
    p->set_rows_sent(peer->rows_sent);
    p->set_bytes_repaired(peer->bytes_repaired);
    p->set_rows_erased(peer->rows_erased);
    p->set_conflicts(peer->conflicts);
    p->set_clock_behind_seconds(peer->clock_behind_seconds);
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
