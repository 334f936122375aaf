// DiffRunner: the Admin.RunDiff calls a node serves. Each call is one
// DiffRun (node/sync/diff_run.h) of this node against the peer it names, on a
// thread of the runner's own, its events streamed to the tool as they come.
//
// Bounds, so that a tool cannot exhaust the node:
//   - at most `max_running` runs at once on the node (tallyd gives it
//     --max-sessions); more are refused with RESOURCE_EXHAUSTED;
//   - every run is one of its client's bulk streams
//   (node/rpc/stream_limiter.h):
//     the per-client limit counts it, and a tool that stops reading is
//     cancelled after the idle timeout.
// A run holds its thread for as long as it lasts (it waits for the peer), so
// runs get threads of their own, not the node's worker pool's.
//
// A tool that goes away (it cancels, its deadline passes, its connection
// closes) stops its run at the run's next step; so does Shutdown(). The
// tool's deadline is the run's.
//
// Streaming: while one message is written, the differences found meanwhile
// collect in the next one (at most kMaxDifferencesPerEvent and about
// kStreamChunkBytes; the run waits for the tool beyond that), so a tool
// that reads fast sees each difference as it is found and a slow one gets
// fuller messages.
//
//   DiffRunner runner(store, peer_client_options, /*max_running=*/2,
//                     &limiter);
//   runner.SetListenAddress("10.0.0.1:7400");
//   ... AdminService::RunDiff: return runner.Start(context, request);
//   runner.Shutdown();
//
// Thread-safe. `store` and `limiter` must outlive the runner.
#ifndef TALLY_NODE_RPC_DIFF_RUNNER_H_
#define TALLY_NODE_RPC_DIFF_RUNNER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "node/client/client.h"
#include "node/observe/status_source.h"
#include "node/rpc/stream_limiter.h"
#include "node/sync/bandwidth_limiter.h"
#include "node/worker_pool.h"
#include "storage/store.h"
#include "tally/v1/tally.pb.h"

namespace tally {
namespace node {

// The most differences one RunDiffEvent carries.
inline constexpr int kMaxDifferencesPerEvent = 4096;

class RunDiffCall;

class DiffRunner : public StatusSource {
 public:
  // `peer_client`: how this node dials peers. REQUIRES: max_running >= 1.
  // `limiter` may be null (no per-client bound); `node_bandwidth` (the
  // node's repair limit) too.
  DiffRunner(storage::Store* store, ClientOptions peer_client, int max_running,
             StreamLimiter* limiter,
             BandwidthLimiter* node_bandwidth = nullptr);
  // Shutdown().
  ~DiffRunner() override;
  DiffRunner(const DiffRunner&) = delete;
  DiffRunner& operator=(const DiffRunner&) = delete;

  // This node's address (with its bound port), so that a request naming it
  // is refused. Call before the server takes calls.
  void SetListenAddress(std::string address) ABSL_LOCKS_EXCLUDED(mu_);

  // Serves one Admin.RunDiff call: validates and admits it (or finishes it
  // at once with the error) and starts the run.
  grpc::ServerWriteReactor<::tally::v1::RunDiffEvent>* Start(
      grpc::CallbackServerContext* context,
      const ::tally::v1::RunDiffRequest* request) ABSL_LOCKS_EXCLUDED(mu_);

  // Cancels every run, waits for their threads, and refuses new calls
  // (UNAVAILABLE). Idempotent.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  // Runs going on now.
  int running() const ABSL_LOCKS_EXCLUDED(mu_);

  // Sets StatusResponse.diffs_running.
  void FillStatus(::tally::v1::StatusResponse* response) override
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // The run of one admitted call, on a pool thread.
  void Run(std::shared_ptr<RunDiffCall> call) ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  storage::Store* const store_;
  const ClientOptions peer_client_;
  const int max_running_;
  StreamLimiter* const limiter_;
  BandwidthLimiter* const node_bandwidth_;

  mutable absl::Mutex mu_;
  std::string self_address_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The calls running now, so that Shutdown() can cancel them.
  std::set<std::shared_ptr<RunDiffCall>> running_ ABSL_GUARDED_BY(mu_);
  // max_running_ threads: an admitted run always has one at once. Reset
  // (joined) by Shutdown(), outside mu_.
  std::unique_ptr<WorkerPool> pool_;
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_RPC_DIFF_RUNNER_H_
