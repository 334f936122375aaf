// PeerOutageLog: what a node logs about a peer it cannot reach. A peer that
// stays down used to log a line at every session and every feed reconnect
// (14-25 lines a minute); now a run of failures logs
//
//   WARN peer down peer=10.0.0.2:7400 link=sessions error="UNAVAILABLE: ..."
//   WARN peer still down peer=... link=sessions down_for=5m failures=11
//        error="UNAVAILABLE: ..."                 (every summary_interval)
//   INFO peer back up peer=... link=sessions down_for=12m30s failures=26
//
// and a change of error code while it is down is logged at once (the peer
// answers now, but refuses). One log per peer and link ("sessions",
// "feed"): either may fail while the other works.
//
//   PeerOutageLog outage("10.0.0.2:7400", "feed");
//   outage.Failure(absl::Now(), status);   // logs as above
//   outage.Success(absl::Now());
//
// Thread-safe.
#ifndef TALLY_NODE_FEED_PEER_OUTAGE_LOG_H_
#define TALLY_NODE_FEED_PEER_OUTAGE_LOG_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tally {
namespace node {

class PeerOutageLog {
 public:
  static constexpr absl::Duration kDefaultSummaryInterval = absl::Minutes(5);

  PeerOutageLog(std::string peer, std::string link,
                absl::Duration summary_interval = kDefaultSummaryInterval);

  // What one failure or success means for the log.
  enum class Event {
    kNone,       // nothing to log
    kDown,       // the first failure after a success (or at start)
    kStillDown,  // a summary is due, or the error code changed
    kBackUp,     // the first success after failures
  };
  struct Decision {
    Event event = Event::kNone;
    absl::Duration down_for;  // since the first failure of the run
    uint64_t failures = 0;    // in the run so far
    absl::Status error;       // the last failure
  };

  // The decision alone, without logging: for tests.
  Decision OnFailure(absl::Time now, const absl::Status& error)
      ABSL_LOCKS_EXCLUDED(mu_);
  Decision OnSuccess(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

  // The decision, logged.
  void Failure(absl::Time now, const absl::Status& error)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Success(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void LogDecision(const Decision& decision) const;

  const std::string peer_;
  const std::string link_;
  const absl::Duration summary_interval_;

  absl::Mutex mu_;
  bool down_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time down_since_ ABSL_GUARDED_BY(mu_);
  absl::Time last_logged_ ABSL_GUARDED_BY(mu_);
  uint64_t failures_ ABSL_GUARDED_BY(mu_) = 0;
  absl::StatusCode last_code_ ABSL_GUARDED_BY(mu_) = absl::StatusCode::kOk;
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_FEED_PEER_OUTAGE_LOG_H_
