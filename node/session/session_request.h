// SessionRequest: a session with one peer that an operator asked for
// (`tally sync`, Admin.Sync), shared by the scheduler that runs it and the
// call that follows it.
//
// Its life: waiting (queued at the peer; a session with the peer may be
// running, the requested one starts once it ends) → running → done. The
// scheduler moves it on (Start, Finish; Finish also for one that never ran:
// the peer was paused, the node shuts down, the tool went away); the call
// reads where it is (Snapshot, WaitUntilDone).
//
//   auto request = std::make_shared<SessionRequest>("users");
//   ... scheduler: request->Start(session); ... request->Finish(record, {});
//   while (!request->WaitUntilDone(absl::Milliseconds(500))) {
//     Show(request->Snapshot().progress);
//   }
//
// Thread-safe.
#ifndef TALLY_NODE_SESSION_SESSION_REQUEST_H_
#define TALLY_NODE_SESSION_SESSION_REQUEST_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "node/session/session.h"
#include "node/session/session_history.h"

namespace tally {
namespace node {

class SessionRequest {
 public:
  enum class State { kWaiting, kRunning, kDone };

  // Where the request is.
  struct Snapshot {
    State state = State::kWaiting;
    // kRunning: the session's progress so far; kDone: its last (default
    // for a request that never ran).
    SessionProgress progress;
    // kDone: what the session did, or why it never ran (its outcome).
    SessionRecord record;
    // kDone: the keyspaces whose roots still differ after a successful
    // session (Session's compare step).
    std::vector<std::string> differing_after;
  };

  // `keyspace`: the only keyspace to sync; empty for all.
  explicit SessionRequest(std::string keyspace)
      : keyspace_(std::move(keyspace)) {}
  SessionRequest(const SessionRequest&) = delete;
  SessionRequest& operator=(const SessionRequest&) = delete;

  const std::string& keyspace() const { return keyspace_; }

  // The scheduler started `session` for it. REQUIRES: waiting.
  void Start(std::shared_ptr<const Session> session) ABSL_LOCKS_EXCLUDED(mu_);
  // It is done: the session ended (or never ran; record.outcome says why).
  // Later calls are ignored.
  void Finish(SessionRecord record, std::vector<std::string> differing_after)
      ABSL_LOCKS_EXCLUDED(mu_);

  Snapshot snapshot() const ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until it is done or `timeout` passed; returns whether it is done.
  bool WaitUntilDone(absl::Duration timeout) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  bool DoneLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string keyspace_;

  mutable absl::Mutex mu_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kWaiting;
  std::shared_ptr<const Session> session_ ABSL_GUARDED_BY(mu_);
  SessionRecord record_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> differing_after_ ABSL_GUARDED_BY(mu_);
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_SESSION_SESSION_REQUEST_H_
