#include "node/sync/schema_check.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "pg/schema/schema_difference.h"
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
  // Both PostgreSQL tables described: name the columns, in the words of
  // the message ("column a: integer on A, bigint on B").
  std::string columns;
  if (absl::StartsWith(a.fingerprint, pg::kFingerprintPrefix) &&
      absl::StartsWith(b.fingerprint, pg::kFingerprintPrefix) &&
      !a.description.empty() && !b.description.empty()) {
    const std::string differ =
        pg::DescribeSchemaDifference(a.description, b.description);
    if (!differ.empty()) {
      columns =
          absl::StrCat(" (",
                       absl::StrReplaceAll(
                           differ, {{" here", absl::StrCat(" on ", a.node)},
                                    {" there", absl::StrCat(" on ", b.node)}}),
                       ")");
    }
  }
  return absl::FailedPreconditionError(absl::StrFormat(
      "keyspace '%s' has schema fingerprint '%s' on %s and '%s' on %s%s: its "
      "rows are not exchanged between them until their backends give it the "
      "same schema",
      keyspace, a.fingerprint, a.node, b.fingerprint, b.node, columns));
}

absl::flat_hash_map<std::string, std::string> SchemaFingerprints(
    const v1::HandshakeResponse& handshake) {
  absl::flat_hash_map<std::string, std::string> fingerprints;
  for (const v1::KeyspaceSummary& ks : handshake.keyspaces()) {
    fingerprints[ks.name()] = ks.schema_fingerprint();
  }
  return fingerprints;
}

absl::flat_hash_map<std::string, std::string> SchemaDescriptions(
    const v1::HandshakeResponse& handshake) {
  absl::flat_hash_map<std::string, std::string> descriptions;
  for (const v1::KeyspaceSummary& ks : handshake.keyspaces()) {
    descriptions[ks.name()] = ks.schema_description();
  }
  return descriptions;
}

absl::Status CheckKeyspaceSchema(
    const storage::Store& store, absl::string_view keyspace,
    const absl::flat_hash_map<std::string, std::string>& peer_fingerprints,
    absl::string_view peer_name,
    const absl::flat_hash_map<std::string, std::string>& peer_descriptions) {
  auto theirs = peer_fingerprints.find(keyspace);
  if (theirs == peer_fingerprints.end()) return absl::OkStatus();
  TALLY_ASSIGN_OR_RETURN(const std::string ours,
                         store.SchemaFingerprint(keyspace));
  const std::string self = absl::StrFormat("this node (%s)", store.node_name());
  const std::string our_text = store.SchemaDescription(keyspace);
  auto their_text = peer_descriptions.find(keyspace);
  return CheckSchema(
      keyspace, SchemaOf{self, ours, our_text},
      SchemaOf{peer_name, theirs->second,
               their_text == peer_descriptions.end() ? absl::string_view()
                                                     : their_text->second});
}

}  // namespace node
}  // namespace tally
