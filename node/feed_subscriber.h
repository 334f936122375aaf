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
// Thread-safe. Runs one thread; Stop() (or the destructor) ends it within
// about a heartbeat.
#ifndef TALLY_NODE_FEED_SUBSCRIBER_H_
#define TALLY_NODE_FEED_SUBSCRIBER_H_

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "node/client.h"
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
  uint64_t reconnects = 0;
  uint64_t position = 0;  // upstream sequence applied up to
  uint64_t head = 0;      // the upstream's last sequence, as last heard
  // Entries of the upstream's log not applied yet (head - position).
  uint64_t lag_entries = 0;
  // Time since this node was last caught up with the upstream (zero when
  // caught up now).
  absl::Duration lag = absl::ZeroDuration();
  bool connected = false;  // a stream is open and has sent a message
};

class FeedSubscriber {
 public:
  // `client` must outlive the subscriber. `request_session` asks for an
  // anti-entropy session with this peer soon (it must not block).
  FeedSubscriber(storage::Store* store, NodeClient* client,
                 std::function<void()> request_session);
  ~FeedSubscriber();
  FeedSubscriber(const FeedSubscriber&) = delete;
  FeedSubscriber& operator=(const FeedSubscriber&) = delete;

  void Start();
  // Asks the thread to stop without waiting (so that many stop at once).
  void RequestStop() { stopping_ = true; }
  // Stops and waits for the thread.
  void Stop();

  FeedCounters counters() const;

 private:
  void Run();
  // Follows the feed once, until the stream ends; returns why it ended.
  absl::Status FollowOnce();
  absl::Status Apply(const std::string& upstream, const v1::FeedBatch& batch);

  storage::Store* const store_;
  NodeClient* const client_;
  const std::function<void()> request_session_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;

  mutable absl::Mutex mu_;
  FeedCounters counters_ ABSL_GUARDED_BY(mu_);
  // What progress this subscriber last committed.
  bool position_stored_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t stored_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  // When the position last reached the upstream's head (or, before that,
  // when following started).
  absl::Time caught_up_at_ ABSL_GUARDED_BY(mu_) = absl::Now();
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_FEED_SUBSCRIBER_H_
