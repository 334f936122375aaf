// BuildMarker: what a node's database remembers of the node's index having
// been built, so that a start whose store holds no index can tell an index
// LOST (data directory deleted, disk replaced) from a FIRST start. The two must
// build differently: a first start gives every row the bootstrap version, so
// identical tables build identical trees; after a loss, rows the application
// wrote here may not have reached the peers yet, and the bootstrap version
// would make the peers' older rows win over them (pg/sidecar/bootstrap.h,
// "Index lost").
//
// The marker is the comment of the node's publication (pg/schema/names.h), set
// by the sidecar once a build has stored its position, and by any start that
// resumes from a stored position (so that an index built before the marker
// existed gets it too):
//   "tally: index built on system <id>; first build at unix us <t>"
// where <t> is the server's clock just before the node's FIRST build
// created its slot (the "; first build ..." part absent when that is not
// known: an index built before the marker existed, or rebuilt from another
// system). A row committed before <t> was in that build's snapshot (a slot
// reaches its consistent point only after every transaction running when
// it was asked for has ended), so it got the bootstrap version, and the
// peers compared it under that version: it is no pending local write. The
// marker keeps the first <t> across later builds.
//
// Why a comment of the publication:
//  - it lives in the database, so it survives the store; the node owns the
//    publication (it created it), so it may comment it; COMMENT is
//    transactional and needs no schema of ours in the user's database;
//  - the slot and the origin do not tell the two cases apart: the origin is
//    created when the backend opens (before any build), and the slot when a
//    build begins, so a first build that crashed leaves both, exactly as a
//    lost index does;
//  - the system identifier in it makes a copy of the database in another
//    cluster (pg_dump and restore, which keeps comments) start as a first
//    start: every row there carries the restore's commit time, and a loss
//    build would give them all fresh versions, winning over every peer.
//
//   TALLY_ASSIGN_OR_RETURN(std::optional<BuildMarker> m,
//                          ReadBuildMarker(conn, names.publication));
//   bool lost = m.has_value() && m->system_id == system_id;
//   ...
//   TALLY_RETURN_IF_ERROR(WriteBuildMarker(conn, names.publication, *m));
//
// Thread-compatible: the functions use the connection they are given.
#ifndef TALLY_PG_SIDECAR_BUILD_MARKER_H_
#define TALLY_PG_SIDECAR_BUILD_MARKER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pg/wire/connection.h"

namespace tally {
namespace pg {

struct BuildMarker {
  uint64_t system_id = 0;
  // Microseconds since 1970 UTC on the server's clock (the clock of its
  // commit timestamps); nullopt when not known.
  std::optional<int64_t> first_build_unix_us;

  // The comment text described above.
  std::string Text() const;
  // The marker `text` spells; nullopt for any other text.
  static std::optional<BuildMarker> Parse(absl::string_view text);

  friend bool operator==(const BuildMarker& a, const BuildMarker& b) {
    return a.system_id == b.system_id &&
           a.first_build_unix_us == b.first_build_unix_us;
  }
};

// The marker on publication `publication`; nullopt when the publication is
// missing or its comment is none or not a marker. Returns the connection's
// errors.
absl::StatusOr<std::optional<BuildMarker>> ReadBuildMarker(
    Connection& conn, absl::string_view publication);

// Sets `marker` as the comment of `publication` (nothing when it is there
// already). Returns the connection's errors (the server's when the
// publication does not exist or the role does not own it).
// REQUIRES: the index of every kept table is built and its position stored.
absl::Status WriteBuildMarker(Connection& conn, absl::string_view publication,
                              const BuildMarker& marker);

// The server's clock now, in microseconds since 1970 UTC.
absl::StatusOr<int64_t> ServerUnixMicros(Connection& conn);

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_SIDECAR_BUILD_MARKER_H_
