#include "node/schema_check.h"

#include "absl/strings/str_format.h"
#include "storage/row_backend.h"
#include "tree/status_macros.h"

namespace tally {
namespace node {

absl::Status CheckSchema(absl::string_view keyspace, const SchemaOf& a,
                         const SchemaOf& b) {
  // An empty fingerprint: a node from before the field; the embedded
  // backend's: opaque values, any shape (see the header).
  if (a.fingerprint.empty() || b.fingerprint.empty() ||
      a.fingerprint == storage::kEmbeddedFingerprint ||
      b.fingerprint == storage::kEmbeddedFingerprint ||
      a.fingerprint == b.fingerprint) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrFormat(
      "keyspace '%s' has schema fingerprint '%s' on %s and '%s' on %s: its "
      "rows are not exchanged between them until their backends give it the "
      "same schema",
      keyspace, a.fingerprint, a.node, b.fingerprint, b.node));
}

absl::flat_hash_map<std::string, std::string> SchemaFingerprints(
    const v1::HandshakeResponse& handshake) {
  absl::flat_hash_map<std::string, std::string> fingerprints;
  for (const v1::KeyspaceSummary& ks : handshake.keyspaces()) {
    fingerprints[ks.name()] = ks.schema_fingerprint();
  }
  return fingerprints;
}

absl::Status CheckKeyspaceSchema(
    const storage::Store& store, absl::string_view keyspace,
    const absl::flat_hash_map<std::string, std::string>& peer_fingerprints,
    absl::string_view peer_name) {
  auto theirs = peer_fingerprints.find(keyspace);
  if (theirs == peer_fingerprints.end()) return absl::OkStatus();
  TALLY_ASSIGN_OR_RETURN(const std::string ours,
                         store.SchemaFingerprint(keyspace));
  const std::string self = absl::StrFormat("this node (%s)", store.node_name());
  return CheckSchema(keyspace, SchemaOf{self, ours},
                     SchemaOf{peer_name, theirs->second});
}

}  // namespace node
}  // namespace tally
