// SessionScheduler: runs anti-entropy sessions with every peer, on an
// interval, from one bounded pool.
//
// Each peer gets a session every `sync_interval` (jittered by ±20% so that
// peers do not synchronise their load), never two at once for the same
// peer. A session (node/session/session.h) handshakes with the peer, then for
// every keyspace either side has diffs and repairs: two-way last-writer-wins
// with a peer, one-way from a `role=source` peer (this node becomes its copy).
// Sessions have a deadline and stop at the next step when the scheduler
// shuts down. The scheduler keeps each peer's running (or last) session, so
// that status shows its phase, and adds its result to the peer's totals
// and where it found differences to the peer's heat (node/sync/repair_heat.h).
//
// Each handshake answer carries the peer's clock: a node whose clock is
// far behind a peer's (more than 5 s, beyond the round trip) logs a warning
// once and shows how far in status (clock_behind_seconds) and metrics.
// The start of the last successful session with every peer
// (PeersSyncedSince, for the tombstone purge) is read from the store's
// clock, the one tombstone arrivals are stamped with.
//
// Every peer is also followed through its change feed (FeedSubscriber); a
// feed that has no position in its publisher's log asks for a session with
// that peer at once. A feed that left changes out (a keyspace in trouble,
// node/feed/keyspace_trouble.h) asks for one within the trouble retry, the
// shorter of 30 s and `sync_interval`; and while any keyspace is in
// trouble, every peer's next session comes within it too, so that a
// troubled keyspace is retried, and repaired once its cause is gone,
// without waiting a long sync interval.
//
// What status shows of each peer: its totals (rows received and sent
// include the running session's rows so far, so they rise while a long
// session runs, not only when it ends), the running or last session's
// progress, and the last sessions (node/session/session_history.h). Each
// session ends with one log line of what it did, also when it failed or was
// stopped half way.
//
// The peers may change while the node runs (SetPeers, from a SIGHUP's
// config): a peer added gets a feed and its first session within a
// second; a peer removed has its feed stopped and its running session told
// to stop at its next step, and leaves status (its totals stay in the
// node's).
//
// An operator may pause the sessions with a peer (SetPaused, `tally peer
// pause`): a paused peer gets no session until it is resumed, and a session
// running with it is told to stop at its next step (the rows it applied
// stay applied; its outcome says it was stopped by the pause). The change
// feed from the peer goes on. Paused peers are kept in the data directory
// (node/session/paused_peers.h), so a pause outlives a restart.
//
//   SessionScheduler scheduler(store, config, client_options);
//   scheduler.Start();
//   ...
//   scheduler.Shutdown();  // waits for running sessions to stop
//
// Thread-safe.
#ifndef TALLY_NODE_SESSION_SESSION_SCHEDULER_H_
#define TALLY_NODE_SESSION_SESSION_SCHEDULER_H_

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "node/client/client.h"
#include "node/config/config.h"
#include "node/feed/feed_subscriber.h"
#include "node/feed/keyspace_trouble.h"
#include "node/observe/duration_histogram.h"
#include "node/session/peer_control.h"
#include "node/session/session.h"
#include "node/session/session_history.h"
#include "node/session/session_request.h"
#include "node/sync/bandwidth_limiter.h"
#include "node/sync/repair_heat.h"
#include "node/worker_pool.h"
#include "storage/store.h"

namespace tally {
namespace node {

class SessionScheduler : public StatusSource, public PeerControl {
 public:
  // `node_bandwidth` (the node's repair limit, shared with tools' repairs)
  // and `trouble` (where feeds and sessions report keyspaces in trouble)
  // may be null; they must outlive the scheduler.
  SessionScheduler(storage::Store* store, const NodeConfig& config,
                   ClientOptions client_options,
                   BandwidthLimiter* node_bandwidth = nullptr,
                   KeyspaceTrouble* trouble = nullptr);
  ~SessionScheduler() override;
  SessionScheduler(const SessionScheduler&) = delete;
  SessionScheduler& operator=(const SessionScheduler&) = delete;

  // Creates the peers' clients and starts the timer thread. The first
  // session with each peer starts after a short random delay.
  absl::Status Start();

  // Stops starting sessions, asks running ones to stop, and waits for them.
  void Shutdown();

  // The address the node listens on, for status.
  void SetListenAddress(const std::string& address) ABSL_LOCKS_EXCLUDED(mu_);

  // A node's handshake with this one (`name`, from `address`): one that is
  // not among this node's peers (no peer has told that name) is shown in
  // status (unlisted_callers) and logged once as a warning: the link is
  // one-sided, so this node never follows that node's change feed.
  void ObserveCaller(const std::string& address, const std::string& name)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The start of the oldest of the peers' last successful sessions: every
  // peer has completed a session (every keyspace synced) that started at or
  // after it. InfinitePast while some peer has not completed one since this
  // node started; InfiniteFuture when there are no peers. Tombstones older
  // than this have reached every peer (section "Tombstone purge").
  absl::Time PeersSyncedSince() const ABSL_LOCKS_EXCLUDED(mu_);

  // Whether `name` is the node name of one of the listed peers (as told by
  // its handshake or feed; a peer not reached yet has none).
  bool IsListedPeer(const std::string& name) const ABSL_LOCKS_EXCLUDED(mu_);

  // Makes `peers` the node's peers, by address: the ones not listed before
  // are added and started, the ones no longer listed are removed (their
  // feed stopped, their running session stopped at its next step). A
  // listed address whose role changed is kept as it was and named in the
  // error (kFailedPrecondition: a source is a restart's business), after
  // the rest was applied. Returns what it did, for the log.
  struct PeerChanges {
    std::vector<std::string> added;
    std::vector<std::string> removed;
  };
  absl::StatusOr<PeerChanges> SetPeers(const std::vector<PeerConfig>& peers)
      ABSL_LOCKS_EXCLUDED(mu_);

  // PeerControl. A session running with a peer being paused is told to
  // stop at its next step.
  absl::StatusOr<::tally::v1::PeerControlResponse> SetPaused(
      const std::string& peer, bool paused) override ABSL_LOCKS_EXCLUDED(mu_);

  // PeerControl. Requested sessions run on the scheduler's pool as its
  // own do, one at a time per peer; a paused peer's waiting requests are
  // finished (FAILED_PRECONDITION) as it is paused, and every waiting one
  // (UNAVAILABLE) at Shutdown.
  absl::StatusOr<std::vector<Asked>> RequestSessions(
      const std::string& peer, const std::string& keyspace) override
      ABSL_LOCKS_EXCLUDED(mu_);
  void CancelRequest(const std::shared_ptr<SessionRequest>& request) override
      ABSL_LOCKS_EXCLUDED(mu_);

  // StatusSource: peers and sessions.
  void FillStatus(::tally::v1::StatusResponse* response) override;

 private:
  struct Peer {
    PeerConfig config;
    std::unique_ptr<NodeClient> client;
    std::unique_ptr<FeedSubscriber> feed;
    // Sessions refused by an unreachable peer, logged once per outage.
    std::unique_ptr<PeerOutageLog> outage_log;
    // Syncs that changed nothing, summed up (not a line each).
    std::unique_ptr<QuietSessionLog> quiet_log;
    // Protected by SessionScheduler::mu_.
    std::string name;
    bool running = false;
    absl::Time next_due = absl::InfinitePast();
    absl::Time last_session = absl::InfinitePast();
    // Start of the last session that completed without error (also
    // PeerStatus.last_success_unix_ms).
    absl::Time synced_since = absl::InfinitePast();
    std::string last_outcome;
    uint64_t sessions_ok = 0;
    uint64_t sessions_failed = 0;
    uint64_t rows_received = 0;
    uint64_t rows_sent = 0;
    uint64_t bytes_repaired = 0;
    // Rows this node erased because its source lacks them.
    uint64_t rows_erased = 0;
    // Keys with equal versions and different content: last writer wins
    // cannot order them, so they stay different until a write settles them.
    uint64_t conflicts = 0;
    // Rows its sessions left to the capture (changed while read).
    uint64_t rows_changed_during_session = 0;
    // How long its sessions took, every outcome.
    DurationHistogram session_durations{DurationHistogram::SessionBounds()};
    // How far this node's clock was behind the peer's at the last
    // handshake (negative: ahead), and whether that was warned about.
    double clock_behind_seconds = 0;
    bool clock_warned = false;
    // Where the last sessions found differences (PeerStatus.heat).
    RepairHeatHistory heat;
    // The running session, or the last one; null before the first. Only
    // RunSession replaces it, and never while the session runs. Lock order:
    // mu_, then the session's own (FillStatus reads its progress under mu_).
    std::shared_ptr<Session> session;
    // Sessions asked for (RequestSessions), in order, and the one of the
    // running session (null for a scheduled one).
    std::deque<std::shared_ptr<SessionRequest>> requests;
    std::shared_ptr<SessionRequest> request;
    // True from the moment RunSession made `session` current until its
    // result is added to the totals above: while true, the session's rows
    // so far are added to rows_received and rows_sent in status.
    bool counting_session = false;
    SessionTrigger trigger = SessionTrigger::kScheduled;
    SessionHistory history;
    // Paused by an operator (SetPaused), or in paused-peers at start.
    bool paused = false;
    absl::Time paused_since = absl::InfinitePast();
    // Why stop_session was set, for the session's outcome.
    std::string stop_reason;
    // Not under mu_: the running session's cancel flag, set by a pause and
    // by Shutdown; cleared as a session starts.
    std::atomic<bool> stop_session{false};
  };

  // The peer named `peer` (its address as configured, or its node name);
  // kNotFound listing the peers otherwise.
  absl::StatusOr<Peer*> FindPeerLocked(const std::string& peer) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Records `name` as the node at `peer`'s address. kAlreadyExists when a
  // peer listed before it is that node under another address.
  absl::Status ClaimName(Peer* peer, const std::string& name)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Pauses the peers the data directory's paused-peers file names
  // (node/session/paused_peers.h); an unreadable file is logged and ignored.
  void RestorePaused() ABSL_LOCKS_EXCLUDED(mu_);
  // Reads the peers' last sessions from the data directory's
  // session-history file (node/session/saved_history.h); an unreadable file
  // is logged and ignored.
  void RestoreHistory() ABSL_LOCKS_EXCLUDED(mu_);
  // Writes every peer's history to that file; a failure is logged once.
  void PersistHistory() ABSL_LOCKS_EXCLUDED(mu_, persist_mu_);
  // Writes the paused peers to that file and returns whether it could; a
  // failure is logged too (the change then holds until a restart).
  absl::Status PersistPaused() ABSL_LOCKS_EXCLUDED(mu_, persist_mu_);

  // Finishes `request` as never run, with `outcome`.
  static void FinishUnrun(const std::shared_ptr<SessionRequest>& request,
                          const absl::Status& outcome);

  // `peer`'s node name, "?" before its first handshake.
  std::string PeerName(Peer* peer) ABSL_LOCKS_EXCLUDED(mu_);

  void TimerLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // Runs one session with `peer` and records its result; REQUIRES:
  // peer->running was set by us.
  void RunSession(Peer* peer) ABSL_LOCKS_EXCLUDED(mu_);
  // A session's handshake with `peer` was answered: records the peer's name
  // and clock, and claims the name (ClaimName's error refuses the peer).
  absl::Status AcceptHandshake(Peer* peer,
                               const ::tally::v1::HandshakeResponse& answer,
                               uint64_t sent, uint64_t received)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Records the peer's clock from a handshake answered between `sent` and
  // `received` (this node's clock, Unix ms); warns once when this node's
  // clock is far behind.
  void ObserveClock(Peer* peer, uint64_t peer_clock_ms, uint64_t sent,
                    uint64_t received) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether a peer has told `name` as its node name.
  bool IsPeerNameLocked(const std::string& name) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `d` scaled by a random factor in [0.8, 1.2).
  absl::Duration JitteredLocked(absl::Duration d)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // A new peer, its client connected (lazily: no I/O), its feed not
  // started; kInvalidArgument for an address gRPC cannot use.
  absl::StatusOr<std::shared_ptr<Peer>> MakePeer(const PeerConfig& config)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Creates and starts `peer`'s feed subscriber.
  void StartFeed(Peer* peer) ABSL_LOCKS_EXCLUDED(mu_);
  // The peers now (the list may change once the lock is released; each
  // Peer lives while a reference does).
  std::vector<std::shared_ptr<Peer>> PeersNow() const ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  storage::Store* const store_;
  const NodeConfig config_;
  const ClientOptions client_options_;
  BandwidthLimiter* const node_bandwidth_;
  KeyspaceTrouble* const trouble_;
  // How soon a keyspace in trouble is retried (see the top of the file).
  const absl::Duration trouble_retry_;

  std::unique_ptr<WorkerPool> pool_;
  std::thread timer_;
  std::atomic<bool> stopping_{false};

  std::atomic<bool> history_write_warned_{false};
  // Serialises PersistPaused's and PersistHistory's writes; taken before
  // mu_.
  absl::Mutex persist_mu_ ABSL_ACQUIRED_BEFORE(mu_);

  mutable absl::Mutex mu_;
  // The peers, in the order listed (added ones last). Their fields are
  // under mu_ too; a session or feed holds its Peer alive.
  std::vector<std::shared_ptr<Peer>> peers_ ABSL_GUARDED_BY(mu_);
  // What removed peers had counted, so that the node's totals never go
  // down.
  struct Totals {
    uint64_t sessions_ok = 0;
    uint64_t sessions_failed = 0;
    uint64_t rows_erased = 0;
    uint64_t conflicts = 0;
    uint64_t rows_changed_during_session = 0;
  };
  Totals removed_ ABSL_GUARDED_BY(mu_);
  int sessions_running_ ABSL_GUARDED_BY(mu_) = 0;
  std::string listen_address_ ABSL_GUARDED_BY(mu_);
  // Nodes that handshook with this one, by name (bounded: see
  // ObserveCaller).
  struct Caller {
    std::string address;
    uint64_t handshakes = 0;
    absl::Time last;
    bool warned = false;
  };
  std::map<std::string, Caller> callers_ ABSL_GUARDED_BY(mu_);
  uint64_t jitter_state_ ABSL_GUARDED_BY(mu_);
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_SESSION_SESSION_SCHEDULER_H_
