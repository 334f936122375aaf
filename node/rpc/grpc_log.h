// Routes gRPC's own log lines (gpr_log: handshake failures, transport
// errors, ...) through tally's logger (node/observe/log.h), so they have its
// timestamp, format and level instead of gRPC's "E1203 05:14:10.123 ..."
// lines on stderr.
//
//   RouteGrpcLogs(LogLevel::kInfo);  // before the first gRPC object
//
// A gRPC line becomes `grpc: MESSAGE` with fields `file` and `line`.
// gRPC's ERROR lines are tally warnings (a client that fails its TLS
// handshake is worth a look, not a node error), INFO info, DEBUG debug.
// gRPC writes its INFO and DEBUG lines only at --log-level=debug; unless
// GRPC_VERBOSITY is set in the environment, which then decides what gRPC
// writes (for an operator chasing a gRPC problem); tally's level still
// filters the lines.
//
// Thread-safe; call again (SIGHUP) to follow a new level.
#ifndef TALLY_NODE_RPC_GRPC_LOG_H_
#define TALLY_NODE_RPC_GRPC_LOG_H_

#include "node/observe/log.h"

namespace tally {
namespace node {

void RouteGrpcLogs(LogLevel level);

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_RPC_GRPC_LOG_H_
