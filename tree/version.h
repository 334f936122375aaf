// Versions and their order: last writer wins, per row.
//
// A version is (HLC timestamp, origin long name). Versions are totally
// ordered, timestamp first and then the origin's long name byte-wise, so
// every node picks the same winner without talking. Origins travel and are
// digested by long name; short ids are a storage detail.
//
// Thread-safe: value types.
#ifndef TALLY_TREE_VERSION_H_
#define TALLY_TREE_VERSION_H_

#include <string>

#include "tree/hlc.h"

namespace tally {
namespace tree {

struct Version {
  HlcTimestamp timestamp;
  std::string origin;  // long name of the node where this version was born

  std::string DebugString() const;
};

// Negative, zero or positive as `a` is older than, equal to or newer than `b`.
int CompareVersions(const Version& a, const Version& b);

inline bool operator<(const Version& a, const Version& b) {
  return CompareVersions(a, b) < 0;
}
inline bool operator>(const Version& a, const Version& b) {
  return CompareVersions(a, b) > 0;
}
inline bool operator==(const Version& a, const Version& b) {
  return CompareVersions(a, b) == 0;
}
inline bool operator!=(const Version& a, const Version& b) {
  return CompareVersions(a, b) != 0;
}

}  // namespace tree
}  // namespace tally

#endif  // TALLY_TREE_VERSION_H_
