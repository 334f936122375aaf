// Helpers the gRPC services share for their calls.
//
// Every call follows one rule: the reaction (the gRPC thread) validates what
// it can without the store, and everything that reads or writes the store
// runs on the WorkerPool. A reactor is finished exactly once, by whichever
// step ends the call, and that step touches nothing of the call afterwards:
// Finish may run OnDone, which deletes the reactor, on another thread.
//
// Shutdown order for whoever owns a server: server Shutdown, then the pool,
// then the store — a pool task may still be returning from Finish.
#ifndef TALLY_NODE_RPC_INTERNAL_UNARY_H_
#define TALLY_NODE_RPC_INTERNAL_UNARY_H_

#include <grpcpp/grpcpp.h>

#include <functional>

#include "absl/status/status.h"
#include "node/worker_pool.h"

namespace tally {
namespace node {
namespace internal {

// The answer when the pool's queue is full.
grpc::Status Overloaded();

// Runs `work` on the pool (in `lane`) and finishes the unary call with its
// status. `work` may use the call's request and response: they live until
// Finish.
grpc::ServerUnaryReactor* FinishOnPool(
    grpc::CallbackServerContext* context, WorkerPool* pool,
    std::function<absl::Status()> work,
    WorkerPool::Lane lane = WorkerPool::Lane::kControl);

// Finishes a unary call at once (bad input found by the reaction).
grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context,
                                    const absl::Status& status);

}  // namespace internal
}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_RPC_INTERNAL_UNARY_H_
