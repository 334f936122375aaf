#include "node/version.h"

#include "absl/strings/str_format.h"

// Set by node/CMakeLists.txt on this file only, so that a new
// `git describe` recompiles one file.
#ifndef TALLY_VERSION
#define TALLY_VERSION "unknown"
#endif
#ifndef TALLY_BUILD
#define TALLY_BUILD "unknown"
#endif

namespace tally {
namespace node {

absl::string_view ProjectVersion() { return TALLY_VERSION; }

absl::string_view BuildDescription() { return TALLY_BUILD; }

std::string VersionText(absl::string_view program) {
  return absl::StrFormat("%s %s (build %s)", program, ProjectVersion(),
                         BuildDescription());
}

}  // namespace node
}  // namespace tally
