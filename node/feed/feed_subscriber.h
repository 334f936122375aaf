// FeedSubscriber: follows one peer's change feed and applies what arrives.
//
// Each change is applied under last writer wins with its original version
// and origin, so that it flows on to this node's other subscribers; a change
// that is not newer is neither applied nor logged, which, with the
// publisher's origin filter, ends every flood. The upstream's (epoch,
// position) is committed in the same WriteBatch as the rows it covers (seed
// 002's crash-safe progress), so a restart resumes exactly.
//
// Without stored progress, or when the publisher answers
// FAILED_PRECONDITION (its epoch changed: its data was reset; or retention
// trimmed the log past this subscriber's position), the
// subscriber subscribes from the publisher's head and asks for an
// anti-entropy session with the peer, which covers everything before it.
// Broken links reconnect with exponential backoff (100 ms .. 5 s) and jitter.
// Remote timestamps too far ahead of the local clock are refused, counted
// and logged; the rest of the batch is applied.
//
// One keyspace in trouble never stops the others. A change this node
// cannot take is left out, the rest of its batch committed and the
// position moved past it: a change whose keyspace's schema fingerprint
// differs from the upstream's (the rule sessions apply,
// node/sync/schema_check.h; the upstream's fingerprints come with each
// handshake and are asked again every 5 s), a change of a keyspace the
// backend takes no rows of now (a rebuild) or whose row its database
// refused (storage::WriteResult::rejected), and, when the backend fails a
// whole write, the changes of every keyspace whose own write then fails
// again, keyspace by keyspace — as long as some keyspace's write goes
// through: when every keyspace's fails (the store or the database down, no
// keyspace taken), the trouble is no keyspace's and the batch is retried
// whole after a reconnect. Each is reported to the
// node's KeyspaceTrouble (counted per keyspace and reason, logged with the
// key, shown in status and metrics), and `request_repair` is called: the
// owner runs a session with the peer soon, which repairs the keyspace
// once the cause is gone. A keyspace whose changes are applied again with
// none left out flows again (KeyspaceTrouble::Flowed).
//
// It asks for batches of up to 10,000 changes (the publisher also bounds
// them to about 1 MB) and commits them in one WriteBatch, with their
// progress. Two threads share the work while a stream is open: one receives
// and decodes batches, the other commits them in order, so that the next
// batch is read and decoded while the previous one is written. The batches
// received while a commit runs are merged into one that waits for the
// committer (up to 10,000 changes or 4 MB): the next commit takes them all,
// as one store write and so one backend transaction (one PostgreSQL
// transaction for a sidecar), not one per batch. The merged write keeps
// each change's version and origin and their order, so last writer wins
// decides two changes of one key as applying them one by one would, and
// its progress is the last batch's.
//
// Thread-safe. Stop() (or the destructor) ends it promptly: it cancels the
// open stream, even one waiting on a silently dead link, and drops a
// decoded batch not yet committed (its progress was not stored either, so
// it is received again after a restart). A reconnection's handshake is not
// cancelled: on a dead link it waits out the keepalive (~10 s) or its
// deadline.
#ifndef TALLY_NODE_FEED_FEED_SUBSCRIBER_H_
#define TALLY_NODE_FEED_FEED_SUBSCRIBER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "node/client/client.h"
#include "node/feed/keyspace_trouble.h"
#include "node/feed/peer_outage_log.h"
#include "storage/store.h"

namespace tally {
namespace node {

struct FeedCounters {
  uint64_t received = 0;  // changes received
  uint64_t applied = 0;   // applied (newer than what this node had)
  uint64_t not_newer = 0;
  uint64_t refused_skew = 0;  // timestamps too far in the future
  uint64_t skipped_own = 0;   // reported by the publisher
  uint64_t skipped_superseded = 0;
  // Left out: their keyspace in trouble (see the top of the file).
  uint64_t rejected = 0;
  uint64_t reconnects = 0;
  uint64_t position = 0;  // upstream sequence applied up to
  uint64_t head = 0;      // the upstream's last sequence, as last heard
  // Entries of the upstream's log not applied yet (head - position).
  uint64_t lag_entries = 0;
  // How old what this node has of the upstream is: zero while connected
  // and caught up as of the last message (heartbeats come every second).
  // While behind, now minus the write time (version timestamp) of the
  // newest change applied from this feed — under steady load the age of
  // what is applied, a second or two, where "time since last caught up"
  // grew for as long as the load lasted — or, when that is older, minus
  // the last time it was caught up. While no stream is connected (the
  // upstream is unreachable or refuses this node) it keeps growing with
  // the clock from there, so that `lag_seconds > 30` fires on a down link.
  // Before anything was applied or caught up: from when following started.
  absl::Duration lag = absl::ZeroDuration();
  bool connected = false;  // a stream is open and has sent a message
};

class FeedSubscriber {
 public:
  // `client` must outlive the subscriber. `request_session` asks for an
  // anti-entropy session with this peer soon (it must not block).
  // `check_upstream`, if set, is called with the upstream's node name after
  // each handshake; an error stops that attempt before it subscribes (it is
  // retried after the backoff). `trouble`, if set, gets the reports of
  // changes left out and must outlive the subscriber; `request_repair`, if
  // set, is called (it must not block) after changes were left out: a
  // session with the peer should come soon, not at once (the cause may
  // well last).
  FeedSubscriber(
      storage::Store* store, NodeClient* client,
      std::function<void()> request_session,
      std::function<absl::Status(const std::string&)> check_upstream = nullptr,
      KeyspaceTrouble* trouble = nullptr,
      std::function<void()> request_repair = nullptr);
  ~FeedSubscriber();
  FeedSubscriber(const FeedSubscriber&) = delete;
  FeedSubscriber& operator=(const FeedSubscriber&) = delete;

  void Start();
  // Asks the threads to stop without waiting (so that many stop at once).
  void RequestStop() ABSL_LOCKS_EXCLUDED(queue_mu_);
  // Stops and waits for the threads.
  void Stop() ABSL_LOCKS_EXCLUDED(queue_mu_);

  FeedCounters counters() const;

 private:
  // A batch received and decoded, waiting to be committed.
  struct DecodedBatch;

  void Run();
  // Follows the feed once, until the stream ends; returns why it ended.
  absl::Status FollowOnce() ABSL_LOCKS_EXCLUDED(queue_mu_);
  // Receiving thread: turns a batch into mutations.
  DecodedBatch Decode(const std::string& upstream, const v1::FeedBatch& batch);
  // Receiving thread: hands `batch` to the committer, merged into the batch
  // already waiting for it when there is one (up to 10,000 changes or
  // 4 MB; beyond, it waits until the committer has room) — or, when the
  // committer is idle, the batch small and the stream had no backlog (live
  // traffic), commits it right here: a hand-over would only add a thread
  // wake-up to the replication lag. Returns the committer's error, or
  // kCancelled when stopping.
  absl::Status Hand(const std::string& upstream,
                    std::unique_ptr<DecodedBatch> batch)
      ABSL_LOCKS_EXCLUDED(queue_mu_);
  // Committing thread: commits handed batches in order until the stream
  // ended and nothing waits, a commit fails, or the subscriber stops.
  void CommitLoop(const std::string& upstream) ABSL_LOCKS_EXCLUDED(queue_mu_);
  // Writes a batch's rows and the progress it brings, in one WriteBatch,
  // leaving out the changes this node cannot take.
  absl::Status Commit(const std::string& upstream, DecodedBatch batch)
      ABSL_LOCKS_EXCLUDED(mu_);

  // What one commit left out and applied, per keyspace.
  struct KeyspaceOutcome;
  using Outcomes = absl::flat_hash_map<std::string, KeyspaceOutcome>;
  // Writes `write` (with its progress); when the backend fails it whole for
  // a reason of its rows, writes it again keyspace by keyspace and the
  // progress alone, leaving out the keyspaces whose write fails so.
  // Returns a failure that is no keyspace's (the store or the database
  // down): the stream then ends and the batch comes again.
  absl::Status WriteIsolated(storage::WriteRequest write, Outcomes* outcomes,
                             uint64_t* applied, uint64_t* not_newer);
  // Reports the commit's left-out changes and flowing keyspaces.
  void Report(const std::string& upstream, const Outcomes& outcomes);

  // The upstream's schema fingerprints (from `hello`, or asked again when
  // older than 5 s) against this node's: the keyspaces whose rows this
  // node must not take from it, with CheckKeyspaceSchema's refusal.
  void NoteSchemas(const std::string& upstream,
                   const v1::HandshakeResponse& hello)
      ABSL_LOCKS_EXCLUDED(schema_mu_);
  // Asks again when the answer is older than 5 s, or 1 s when `batch`
  // names a keyspace the last answer did not list.
  void RefreshSchemas(const std::string& upstream,
                      const storage::WriteRequest& batch)
      ABSL_LOCKS_EXCLUDED(schema_mu_);

  storage::Store* const store_;
  NodeClient* const client_;
  const std::function<void()> request_session_;
  const std::function<absl::Status(const std::string&)> check_upstream_;
  KeyspaceTrouble* const trouble_;
  const std::function<void()> request_repair_;
  // Logs the link's outages (a line when it goes down, summaries, a line
  // when it is back) instead of every failed reconnect.
  PeerOutageLog outage_;
  std::atomic<bool> stopping_{false};
  // Cancels the open stream on stop.
  StreamCanceller canceller_;
  std::thread thread_;

  // The hand-over between the receiving and the committing thread.
  absl::Mutex queue_mu_;
  std::unique_ptr<DecodedBatch> handed_ ABSL_GUARDED_BY(queue_mu_);
  bool stream_ended_ ABSL_GUARDED_BY(queue_mu_) = false;
  bool halted_ ABSL_GUARDED_BY(queue_mu_) = false;  // stopping
  bool committer_busy_ ABSL_GUARDED_BY(queue_mu_) = false;
  absl::Status commit_error_ ABSL_GUARDED_BY(queue_mu_);
  // Receiving thread only: when Hand last returned (a batch received sooner
  // than kBacklogGap after it was waiting in the stream).
  absl::Time last_hand_end_ = absl::InfinitePast();

  absl::Mutex schema_mu_;
  absl::Time schemas_at_ ABSL_GUARDED_BY(schema_mu_) = absl::InfinitePast();
  absl::flat_hash_map<std::string, absl::Status> schema_refusals_
      ABSL_GUARDED_BY(schema_mu_);
  // The keyspaces the last answer listed: a change of another one (a
  // keyspace the upstream created since) asks again at once.
  absl::flat_hash_set<std::string> schemas_known_ ABSL_GUARDED_BY(schema_mu_);

  mutable absl::Mutex mu_;
  FeedCounters counters_ ABSL_GUARDED_BY(mu_);
  // What progress this subscriber last committed.
  bool position_stored_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t stored_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  // Everything the upstream wrote up to this time is here, as far as this
  // node knows: when a message last showed the position at the upstream's
  // head, or the write time of the newest change applied since, whichever
  // is later (before either, when following started).
  absl::Time fresh_as_of_ ABSL_GUARDED_BY(mu_) = absl::Now();
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_FEED_FEED_SUBSCRIBER_H_
