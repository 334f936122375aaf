// The version tallyd and tally print for --version: the project's version
// (CMake's project(VERSION)) and the build it came from (`git describe` of
// the source tree when it was built, or "unknown" outside a git checkout),
// so that an operator can tell which code a node runs. /metrics has both
// as the labels of tally_build_info.
//
//   std::puts(VersionText("tallyd").c_str());
//   // tallyd 0.1.0 (build v0.1.0-42-g1a2b3c4)
//
// Thread-safe: pure functions over constants.
#ifndef TALLY_NODE_OBSERVE_VERSION_H_
#define TALLY_NODE_OBSERVE_VERSION_H_

#include <string>

#include "absl/strings/string_view.h"

namespace tally {
namespace node {

// "0.1.0".
absl::string_view ProjectVersion();
// "v0.1.0-42-g1a2b3c4", "1a2b3c4-dirty", or "unknown".
absl::string_view BuildDescription();
// "PROGRAM VERSION (build BUILD)", without a newline.
std::string VersionText(absl::string_view program);

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_OBSERVE_VERSION_H_
