#include "node/rpc/grpc_log.h"

#include <grpc/support/log.h>

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace tally {
namespace node {
namespace {

void LogGrpcLine(gpr_log_func_args* args) {
  LogLevel level = LogLevel::kInfo;
  if (args->severity == GPR_LOG_SEVERITY_ERROR) level = LogLevel::kWarning;
  if (args->severity == GPR_LOG_SEVERITY_DEBUG) level = LogLevel::kDebug;
  Log(level,
      absl::StrCat("grpc: ", absl::StripAsciiWhitespace(
                                 args->message ? args->message : "")),
      {{"file", args->file ? args->file : ""}, {"line", args->line}});
}

}  // namespace

void RouteGrpcLogs(LogLevel level) {
  gpr_set_log_function(&LogGrpcLine);
  if (std::getenv("GRPC_VERBOSITY") != nullptr) return;
  gpr_set_log_verbosity(level == LogLevel::kDebug ? GPR_LOG_SEVERITY_DEBUG
                                                  : GPR_LOG_SEVERITY_ERROR);
}

}  // namespace node
}  // namespace tally
