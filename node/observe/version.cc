#include "node/observe/version.h"

#include "absl/strings/str_format.h"

// TALLY_VERSION is set by node/CMakeLists.txt on this file only; TALLY_BUILD
// comes from a header generated at every build (cmake/build_description.cmake)
// that changes only with the commit, so that a new `git describe` recompiles
// this one file.
#include "build_description.h"
#ifndef TALLY_VERSION
#define TALLY_VERSION "unknown"
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
