// absl::Status <-> grpc::Status. The numeric codes are the same; messages
// pass through unchanged. Only node/ and tools/ see gRPC.
#ifndef TALLY_NODE_CLIENT_GRPC_STATUS_H_
#define TALLY_NODE_CLIENT_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace tally {
namespace node {

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                      std::string(s.message()));
}

inline absl::Status ToAbslStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      s.error_message());
}

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_CLIENT_GRPC_STATUS_H_
