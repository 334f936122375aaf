#include "tree/version.h"

#include "absl/strings/str_cat.h"

namespace tally {
namespace tree {

int CompareVersions(const Version& a, const Version& b) {
  if (a.timestamp < b.timestamp) return -1;
  if (b.timestamp < a.timestamp) return 1;
  const int c = a.origin.compare(b.origin);
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

std::string Version::DebugString() const {
  return absl::StrCat(timestamp.DebugString(), "@", origin);
}

}  // namespace tree
}  // namespace tally
