// The names of the PostgreSQL objects a node owns in its database: one
// logical replication slot, one publication and one replication origin, all
// named alike and derived from the node's name, so that an operator can tell
// which node a slot belongs to and two nodes sharing a server never collide.
//
//   ReplicationNames names = NamesForNode("eu-west/db-3");
//   names.slot == "tally_eu_west_db_3_1a2b3c4d"  (the hex is a hash)
//
// The rule: "tally_" + the node name lowercased with every character other
// than [a-z0-9] replaced by '_', cut to 40 characters, then "_" and the
// first 8 hex digits of XXH3-64 of the node name (its upper 32 bits). The
// hash keeps names distinct that the replacement and the cut would merge
// ("db-3" and "db_3", two long names with a common prefix); the result is at
// most 49 characters of [a-z0-9_], inside PostgreSQL's 63-character rule for
// slot names.
//
// Thread-safe: pure functions.
#ifndef TALLY_PG_SCHEMA_NAMES_H_
#define TALLY_PG_SCHEMA_NAMES_H_

#include <string>

#include "absl/strings/string_view.h"
#include "tree/version.h"

namespace tally {
namespace pg {

struct ReplicationNames {
  std::string slot;
  std::string publication;
  std::string origin;
};

// The base name described above.
std::string ReplicationBaseName(absl::string_view node_name);

// Slot, publication and origin of the node, each ReplicationBaseName().
ReplicationNames NamesForNode(absl::string_view node_name);

// The origin name every first-build row's version carries (with the
// smallest non-zero timestamp): the same on every replica, so that two
// identical tables build identical trees. Reserved: no node may use it.
inline constexpr absl::string_view kBootstrapOrigin = "tally.bootstrap";

// The version every row found by a first build gets on every replica: the
// smallest non-zero HLC timestamp and kBootstrapOrigin. Identical tables
// therefore give identical digests (a sidecar's first build and the ad-hoc
// `tally diff URL URL` scan alike).
tree::Version BootstrapVersion();

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_SCHEMA_NAMES_H_
