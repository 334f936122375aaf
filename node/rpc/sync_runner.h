// SyncRunner: the Admin.Sync calls a node serves (`tally sync`). Each call
// asks the node's scheduler for a session now with one peer or every peer
// (PeerControl::RequestSessions) and streams where those sessions are until
// the last has ended: every peer's state about twice a second while they
// run, and once more at the end.
//
// Bounds, so that a tool cannot exhaust the node:
//   - at most `max_running` calls at once (tallyd gives it --max-sessions);
//     more are refused with RESOURCE_EXHAUSTED;
//   - every call is one of its client's bulk streams
//   (node/rpc/stream_limiter.h).
// A call holds a thread of the runner's own while it follows its sessions
// (the sessions themselves run on the scheduler's pool).
//
// A tool that goes away (it cancels, its deadline passes, its connection
// closes) stops the sessions it asked for (PeerControl::CancelRequest).
// Shutdown() ends every call once its sessions have ended (the scheduler
// stops them first: NodeServer shuts it down before the runner).
//
//   SyncRunner runner(&scheduler, /*max_running=*/2, &limiter);
//   ... AdminService::Sync: return runner.Start(context, request);
//   runner.Shutdown();
//
// Thread-safe. `control` and `limiter` must outlive the runner.
#ifndef TALLY_NODE_RPC_SYNC_RUNNER_H_
#define TALLY_NODE_RPC_SYNC_RUNNER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "node/rpc/stream_limiter.h"
#include "node/session/peer_control.h"
#include "node/worker_pool.h"
#include "tally/v1/tally.pb.h"

namespace tally {
namespace node {

class SyncCall;

class SyncRunner {
 public:
  // REQUIRES: max_running >= 1. `limiter` may be null.
  SyncRunner(PeerControl* control, int max_running, StreamLimiter* limiter);
  ~SyncRunner();  // Shutdown()
  SyncRunner(const SyncRunner&) = delete;
  SyncRunner& operator=(const SyncRunner&) = delete;

  // Serves one Admin.Sync call: admits it (or finishes it at once with the
  // error) and starts following it.
  grpc::ServerWriteReactor<::tally::v1::SyncEvent>* Start(
      grpc::CallbackServerContext* context,
      const ::tally::v1::SyncRequest* request) ABSL_LOCKS_EXCLUDED(mu_);

  // Refuses new calls (UNAVAILABLE), stops following the running ones (their
  // sessions are cancelled) and waits for their threads. Idempotent.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Follows one admitted call, on a pool thread.
  void Run(std::shared_ptr<SyncCall> call) ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  PeerControl* const control_;
  const int max_running_;
  StreamLimiter* const limiter_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::set<std::shared_ptr<SyncCall>> running_ ABSL_GUARDED_BY(mu_);
  // max_running_ threads; reset (joined) by Shutdown(), outside mu_.
  std::unique_ptr<WorkerPool> pool_;
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_RPC_SYNC_RUNNER_H_
