// Logging for tallyd and tally: one line per event on stderr, with a UTC
// timestamp and a level. Our Abseil has no absl/log; this is the project's
// one logging header.
//
//   LogInfo(absl::StrFormat("session peer=%s outcome=%s", peer, outcome));
//
// Thread-safe: lines from concurrent threads never interleave.
#ifndef TALLY_NODE_LOG_H_
#define TALLY_NODE_LOG_H_

#include "absl/strings/string_view.h"

namespace tally {
namespace node {

void LogInfo(absl::string_view message);
void LogWarning(absl::string_view message);
void LogError(absl::string_view message);

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_LOG_H_
