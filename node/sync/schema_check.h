// Schema check: two nodes exchange the rows of a keyspace only when their
// backends give that keyspace the same schema fingerprint
// (storage::RowBackend::SchemaFingerprint), which each node sends per
// keyspace in its handshake answer (KeyspaceSummary.schema_fingerprint).
// A row is then never applied to a table of another shape: a session
// refuses that keyspace with FAILED_PRECONDITION naming both fingerprints
// and, when both nodes sent the text their fingerprint hashes
// (KeyspaceSummary.schema_description: a PostgreSQL table's columns), the
// columns that differ ("column a: integer on this node (a), bigint on b");
// it goes on with the others; `tally diff` and `tally repair` refuse it the
// same way.
//
// An empty fingerprint is a node from before the field. It matches any
// fingerprint, so that a mesh keeps syncing through a rolling upgrade:
// every such node keeps its rows in the embedded backend, whose values are
// opaque bytes that any node can take. The embedded backend's own
// fingerprint (storage::kEmbeddedFingerprint) matches any for the same
// reason: an embedded node can hold a PostgreSQL table's canonical rows and
// diff equal with the database's sidecar. Two PostgreSQL nodes must agree.
// (An embedded node between two PostgreSQL nodes whose tables differ does
// not stop their rows meeting: the receiving database refuses rows of
// another shape when it applies them.)
//
//   absl::flat_hash_map<std::string, std::string> theirs =
//       SchemaFingerprints(handshake);
//   absl::Status ok = CheckKeyspaceSchema(store, "users", theirs, "node-b");
//
// Thread-safe: functions only.
#ifndef TALLY_NODE_SYNC_SCHEMA_CHECK_H_
#define TALLY_NODE_SYNC_SCHEMA_CHECK_H_

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "storage/store.h"
#include "tally/v1/tally.pb.h"

namespace tally {
namespace node {

// One node's fingerprint of a keyspace, the node's name for messages, and
// the text the fingerprint hashes ("" when unknown).
struct SchemaOf {
  absl::string_view node;
  absl::string_view fingerprint;
  absl::string_view description = "";
};

// OK when the rows of `keyspace` may be exchanged between `a` and `b`:
// their fingerprints are equal, or either is empty (a node from before the
// field) or the embedded backend's. Otherwise kFailedPrecondition naming the
// keyspace, both nodes and both fingerprints, and the differing columns
// when both descriptions are PostgreSQL tables': retrying cannot help until
// the schemas match.
absl::Status CheckSchema(absl::string_view keyspace, const SchemaOf& a,
                         const SchemaOf& b);

// The schema fingerprint of every keyspace a handshake answer summarises,
// by keyspace name ("" for a keyspace the peer sent none for).
absl::flat_hash_map<std::string, std::string> SchemaFingerprints(
    const v1::HandshakeResponse& handshake);
// The same for the texts those fingerprints hash (schema_description).
absl::flat_hash_map<std::string, std::string> SchemaDescriptions(
    const v1::HandshakeResponse& handshake);

// CheckSchema between this node (`store`'s backend) and a peer whose
// handshake gave `peer_fingerprints`. OK when the peer lacks the keyspace:
// it has no rows of it to compare, and the session creates it there. Fails
// with the backend's error when this node cannot tell its own fingerprint.
absl::Status CheckKeyspaceSchema(
    const storage::Store& store, absl::string_view keyspace,
    const absl::flat_hash_map<std::string, std::string>& peer_fingerprints,
    absl::string_view peer_name,
    const absl::flat_hash_map<std::string, std::string>& peer_descriptions =
        {});

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_SYNC_SCHEMA_CHECK_H_
