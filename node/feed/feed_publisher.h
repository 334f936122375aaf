// FeedPublisher: the publishing side of the change feed (Peer.Subscribe).
//
// A subscriber gives its node name, the epoch and the last sequence it
// applied. The publisher streams the change-log entries after it, in
// batches, each change with its row's current value and original version,
// skipping
//   - entries born at the subscriber (origin == subscriber): loop prevention;
//   - entries a later entry for the same key superseded (the row's version
//     is no longer the entry's): the later one carries the row. A row whose
//     backend read answers ABORTED (a sidecar's table does not show the
//     indexed version: its commit may not be visible yet) is read again
//     for up to a second before its entry is skipped so;
//   - erases (source overrides are between a source and its copy only).
// A batch holds at most the subscriber's max_batch entries (default 1,000,
// limit 10,000) and stops after about kStreamChunkBytes of rows, so that
// messages stay small whatever the values' sizes. Every batch carries the
// position it brings the subscriber to, skipped entries included, so that
// progress moves even when nothing is sent. When the log is quiet a heartbeat
// (an empty batch) goes out every `heartbeat`.
//
// A wrong epoch, a position beyond the end of the log, or one older than
// the retained log (retention trimmed what follows it) answers
// FAILED_PRECONDITION: the subscriber must run an anti-entropy session and
// subscribe again from the head.
//
// Each subscription runs on a thread of its own (it waits for changes for
// as long as the link lives), at most `max_subscriptions` subscribers at
// once; more answer RESOURCE_EXHAUSTED. A subscriber has one subscription:
// a newer one under the same name replaces the older, which ends with
// ABORTED (cancelled at once if it is stuck writing to a reader that does
// not read). A subscriber that reconnects before its old link is noticed
// dead therefore never finds its own slot taken, and no client fills the
// slots by subscribing again and again under one name. Threads stay
// bounded: with 2 * max_subscriptions still running (replaced ones ending),
// new subscriptions are refused too.
//
// Thread-safe. `store` must outlive the publisher; the gRPC server must be
// shut down (ending every subscription) before the publisher is destroyed.
#ifndef TALLY_NODE_FEED_FEED_PUBLISHER_H_
#define TALLY_NODE_FEED_FEED_PUBLISHER_H_

#include <atomic>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "node/observe/status_source.h"
#include "storage/store.h"
#include "tally/v1/tally.grpc.pb.h"

namespace tally {
namespace node {

struct FeedOptions {
  absl::Duration heartbeat = absl::Seconds(1);
  int max_subscriptions = 64;
  // Whether `subscriber` (the node name it subscribes under) is one of this
  // node's listed peers. Subscribers that are not hold at most half of
  // max_subscriptions between them, so that any client able to connect
  // cannot take the slots the node's own peers need. Null: no reservation.
  std::function<bool(const std::string& subscriber)> is_peer;
};

class FeedPublisher : public StatusSource {
 public:
  FeedPublisher(storage::Store* store, FeedOptions options);
  FeedPublisher(const FeedPublisher&) = delete;
  FeedPublisher& operator=(const FeedPublisher&) = delete;

  grpc::ServerWriteReactor<::tally::v1::FeedBatch>* Subscribe(
      grpc::CallbackServerContext* context,
      const ::tally::v1::SubscribeRequest* request);

  // Ends every subscription within about a heartbeat, and refuses new ones
  // (UNAVAILABLE): call before shutting the server down, which otherwise
  // waits out its grace period for streams that never end on their own.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  // Waits until every subscription's thread is done with the store. Call
  // after Shutdown() and after the server shut down (which cancels streams
  // whose subscriber stopped reading), before the store goes away.
  void WaitForSubscriptions() ABSL_LOCKS_EXCLUDED(mu_);

  // For subscriptions: one more (with a function that wakes it, and one
  // that ends it when a newer subscription of the same subscriber replaces
  // it; returns 0 when the limit is reached, -1 when the limit of
  // subscribers that are not listed peers is, FeedOptions::is_peer) or one
  // fewer running.
  int SubscriptionStarted(const std::string& subscriber, uint64_t position,
                          std::function<void()> wake,
                          std::function<void()> replace)
      ABSL_LOCKS_EXCLUDED(mu_);
  void SubscriptionEnded(int id) ABSL_LOCKS_EXCLUDED(mu_);
  bool stopping() const { return stopping_.load(); }
  // Counts a message a subscription sent.
  void BatchSent(int id, const ::tally::v1::FeedBatch& batch)
      ABSL_LOCKS_EXCLUDED(mu_);

  // StatusSource: the subscriptions served now and the publishing totals.
  void FillStatus(::tally::v1::StatusResponse* response) override
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct SubscriptionStats {
    std::string subscriber;
    uint64_t position = 0;
    uint64_t sent = 0;
    uint64_t skipped_own = 0;
    uint64_t skipped_superseded = 0;
  };

  storage::Store* const store_;
  const FeedOptions options_;
  std::atomic<bool> stopping_{false};
  absl::Mutex mu_;
  // Subscription threads running, replaced ones included.
  int subscriptions_ ABSL_GUARDED_BY(mu_) = 0;
  // The current subscription of each subscriber: what the limit counts.
  std::map<std::string, int> current_ ABSL_GUARDED_BY(mu_);
  // The subscribers of current_ that are not listed peers.
  std::set<std::string> unlisted_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::function<void()>> replacers_ ABSL_GUARDED_BY(mu_);
  int next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<int, std::function<void()>> wakers_ ABSL_GUARDED_BY(mu_);
  std::map<int, SubscriptionStats> stats_ ABSL_GUARDED_BY(mu_);
  // Totals since start, over all subscriptions (ended ones too).
  SubscriptionStats totals_ ABSL_GUARDED_BY(mu_);
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_FEED_FEED_PUBLISHER_H_
