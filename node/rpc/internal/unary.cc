#include "node/rpc/internal/unary.h"

#include "node/client/grpc_status.h"

namespace tally {
namespace node {
namespace internal {

grpc::Status Overloaded() {
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                      "node is overloaded; retry later");
}

grpc::ServerUnaryReactor* FinishOnPool(grpc::CallbackServerContext* context,
                                       WorkerPool* pool,
                                       std::function<absl::Status()> work,
                                       WorkerPool::Lane lane) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const bool scheduled = pool->Schedule(
      [reactor, work = std::move(work)] {
        reactor->Finish(ToGrpcStatus(work()));
      },
      lane);
  if (!scheduled) reactor->Finish(Overloaded());
  return reactor;
}

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context,
                                    const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace internal
}  // namespace node
}  // namespace tally
