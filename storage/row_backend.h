// RowBackend: where row payloads (values) live — the backend seam.
//
// The store always keeps, in its own LevelDB, everything the tree and the
// change feed need: per row (keyspace, token, key) -> (version, deleted flag,
// row digest), the leaves, the change log, origins and progress. The backend
// decides where the value itself is kept:
//
//  - EmbeddedBackend (the default) keeps it in the same LevelDB record, so a
//    commit is one WriteBatch and needs nothing else.
//  - A PostgreSQL backend (a later issue) keeps rows in a table. It stores no
//    payload in the record, applies rows through libpq under the change's
//    replication origin, and records its own position (a WAL LSN) in the
//    store's WriteBatch through StageCommit.
//
// The store calls the backend from its single commit leader, never
// concurrently for writes; ReadValue may be called from any thread.
#ifndef TALLY_STORAGE_ROW_BACKEND_H_
#define TALLY_STORAGE_ROW_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tree/token.h"

namespace leveldb {
class WriteBatch;
}  // namespace leveldb

namespace tally {
namespace storage {

// Identifies one row to the backend.
struct RowLocation {
  absl::string_view keyspace;
  tree::Token token = 0;
  absl::string_view key;
};

class RowBackend {
 public:
  virtual ~RowBackend() = default;

  // A short name for status output ("embedded", "postgresql").
  virtual absl::string_view name() const = 0;

  // Returns the bytes to keep in the row's index record for a new value:
  // the value itself for the embedded backend, or nothing when the value
  // lives elsewhere (the backend then writes it before returning OK).
  virtual absl::StatusOr<std::string> StageValue(const RowLocation& row,
                                                 absl::string_view value) = 0;

  // Adds the backend's own records (its position, for one) to the batch
  // that commits a group of rows. Called once per commit, last.
  virtual absl::Status StageCommit(leveldb::WriteBatch* batch) = 0;

  // Returns the value of a row given the payload StageValue returned for it.
  // Returns kDataLoss when the payload cannot be the backend's.
  virtual absl::StatusOr<std::string> ReadValue(
      const RowLocation& row, absl::string_view stored_payload) const = 0;

  // Reads by batch and the schema: what reads of many rows at once
  // (Store::MultiGet) and the handshake between nodes ask of a backend.

  // Returns the values of a batch of rows given the payloads StageValue
  // returned for them, one result per row in the order given: the value, or
  // kDataLoss when that row's payload cannot be the backend's. One call is
  // one read of the backend (one round trip for a database), whatever the
  // number of rows. The call itself fails (kUnavailable, say) only when the
  // backend cannot be read at all. The values are not checked against the
  // rows' digests: the store does that. Like ReadValue, may be called from
  // any thread.
  // REQUIRES: rows.size() == stored_payloads.size().
  virtual absl::StatusOr<std::vector<absl::StatusOr<std::string>>> ReadValues(
      absl::Span<const RowLocation> rows,
      absl::Span<const absl::string_view> stored_payloads) const = 0;

  // A fingerprint of the form the rows of `keyspace` take in this backend,
  // for any keyspace name, whether the store holds it yet or not. Two nodes
  // exchange the rows of a keyspace only when their fingerprints for it are
  // equal (node/schema_check.h), so that no row is applied to a table of
  // another shape. The embedded backend keeps values as opaque bytes and
  // answers its format's name ("embedded/1") for every keyspace; a
  // PostgreSQL backend hashes the table's columns, types and key. Never
  // empty: on the wire an empty fingerprint is a node from before the
  // field. kUnavailable when the backend cannot tell now. May be called
  // from any thread.
  virtual absl::StatusOr<std::string> SchemaFingerprint(
      absl::string_view keyspace) const = 0;
};

// Values kept in the store's own LevelDB, inside the row record.
std::unique_ptr<RowBackend> NewEmbeddedBackend();

}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_ROW_BACKEND_H_
