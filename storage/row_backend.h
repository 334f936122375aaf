// RowBackend: where row payloads (values) live — the backend seam.
//
// The store always keeps, in its own LevelDB, everything the tree and the
// change feed need: per row (keyspace, token, key) -> (version, deleted flag,
// row digest), the leaves, the change log, origins and progress. The backend
// decides where the value itself is kept:
//
//  - EmbeddedBackend (the default) keeps it in the same LevelDB record, so a
//    commit is one WriteBatch and needs nothing else.
//  - The PostgreSQL backend (pg::PgBackend) keeps rows in a table. It keeps a
//    CAS token in the record instead of the value, applies a commit group's
//    rows in one transaction under a compare-and-swap on that token, and
//    reports the changes applications make as captured writes
//    (ApplyMode::kCaptured) carrying its WAL position (BackendPosition on
//    the WriteRequest), which the store commits in the same WriteBatch.
//
// A commit goes: the commit rules decide each mutation against the index
// (storage/internal/commit_rules.h); the leader calls ApplyRows ONCE with
// the rows that are to change; the store then stages, in one WriteBatch,
// the index records of the rows the backend applied (and only those), their
// leaves, change-log entries and counts. Captured writes skip ApplyRows:
// the backend has them already. The backend never sees the store's
// LevelDB: its position travels typed, on the request.
//
//   std::vector<RowOutcome> outcomes;
//   absl::Status s = backend->ApplyRows(rows, &outcomes);
//   // outcomes[i].applied: keep outcomes[i].payload in the index record.
//
// Thread-safety: the store calls ApplyRows from its single commit leader,
// never concurrently with itself; ReadValue may be called from any thread,
// concurrently with ApplyRows.
#ifndef TALLY_STORAGE_ROW_BACKEND_H_
#define TALLY_STORAGE_ROW_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tree/digest.h"
#include "tree/token.h"
#include "tree/version.h"

namespace tally {
namespace storage {

// Identifies one row to the backend.
struct RowLocation {
  absl::string_view keyspace;
  tree::Token token = 0;
  absl::string_view key;
};

// What the index holds for a row: the version the commit's decision was
// made against, and the backend's own token for it. It is the row's
// compare-and-swap token: the backend applies a change only while its row
// is still the one described here.
struct IndexedRow {
  // False when the index holds no row: the backend must not hold one either
  // (an insert that finds a row refuses).
  bool exists = false;
  // Meaningful when `exists`. `version` is never null then.
  const tree::Version* version = nullptr;
  bool deleted = false;
  tree::Digest128 digest;
  // What ApplyRows returned for this row version (for a PostgreSQL backend
  // the row's commit timestamp and origin); empty for a row the store has
  // not read (damaged and unreadable).
  absl::string_view payload;
};

// One row a commit changes.
struct RowChange {
  enum class Kind {
    kPut,     // insert or replace the row with `value`
    kDelete,  // the row becomes a tombstone (the backend deletes its row)
    kErase,   // the row goes with no tombstone (source override, purge)
  };
  RowLocation row;
  Kind kind = Kind::kPut;
  absl::string_view value;  // kPut only
  // The version the row gets (kept in the index; the backend may record it
  // for its own use). Never null.
  const tree::Version* version = nullptr;
  // The compare-and-swap token.
  IndexedRow expected;
};

// What the backend did with one RowChange.
struct RowOutcome {
  // False: the backend's row is no longer `expected` (an application wrote
  // it meanwhile). The store then leaves the index, leaves and log as they
  // are for that row and reports the mutation as refused.
  bool applied = false;
  // When applied (and not kErase): the bytes to keep in the row's index
  // record, handed back to ReadValue and as IndexedRow::payload.
  std::string payload;
  // Not OK when the backend's database refused the row itself (a
  // constraint, a type, a table that is gone): `applied` is false, the row
  // is left as it was, as for a refused one, and the reason travels with
  // the result so that the trouble is reported with the row. The other rows
  // of the call are unaffected: a backend isolates a refused row instead of
  // failing the whole call.
  absl::Status rejected;
};

class RowBackend {
 public:
  virtual ~RowBackend() = default;

  // A short name for status output ("embedded", "postgresql").
  virtual absl::string_view name() const = 0;

  // Applies one commit group's rows, all or none on error, and says per row
  // whether it was applied. A key appears at most once in `rows` (the
  // store sends the group's last change of a key, against the state the
  // index held before the group). Sets `outcomes` to one entry per row, in
  // order. An error fails the whole commit: the store writes nothing, so a
  // backend must then have applied nothing (or apply idempotently when the
  // commit is retried).
  virtual absl::Status ApplyRows(absl::Span<const RowChange> rows,
                                 std::vector<RowOutcome>* outcomes) = 0;

  // Whether the backend takes rows of `keyspace` from outside now (the
  // rows of a request that is not ApplyMode::kCaptured: a peer's, a
  // client's, a purge's). The store asks it for each such request's
  // keyspaces inside its commit, just before deciding the request's rows,
  // and on an error rejects that keyspace's mutations alone with the
  // status (WriteResult::rejected): the request's other keyspaces, its
  // progress and the other requests of the commit group, captured ones
  // among them, commit as usual. A PostgreSQL sidecar answers kUnavailable
  // while a keyspace's index is being built: rows decided against an index that
  // does not yet describe the table would be wrong (a key deleted in the table
  // while the index was lost looks absent, and a peer's copy would put it
  // back). Called from the commit leader.
  virtual absl::Status TakesRows(absl::string_view keyspace) const {
    (void)keyspace;
    return absl::OkStatus();
  }

  // Returns the value of a row given the payload ApplyRows returned for it.
  // Returns kDataLoss when the payload cannot be the backend's.
  virtual absl::StatusOr<std::string> ReadValue(
      const RowLocation& row, absl::string_view stored_payload) const = 0;

  // Reads by batch and the schema: what reads of many rows at once
  // (Store::MultiGet) and the handshake between nodes ask of a backend.

  // Returns the values of a batch of rows given the payloads ApplyRows
  // returned for them, one result per row in the order given: the value, or
  // kDataLoss when that row's payload cannot be the backend's. A backend
  // whose rows applications also write (a PostgreSQL table) answers, for a
  // row whose current version is not the one the payload describes,
  // kAborted when it changed since (a later write its capture indexes:
  // the reader skips the row as superseded, and that write reaches the
  // index and the feed in turn) and kUnavailable when the read cannot tell
  // yet (it sees an older version, the write not visible to it yet, or no
  // row: reading again shortly answers). Both are per-row, never fatal to
  // the call. One call is
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
  // equal (node/sync/schema_check.h), so that no row is applied to a table of
  // another shape. The embedded backend keeps values as opaque bytes and
  // answers its format's name ("embedded/1") for every keyspace; a
  // PostgreSQL backend hashes the table's columns, types and key. Never
  // empty: on the wire an empty fingerprint is a node from before the
  // field. kUnavailable when the backend cannot tell now. May be called
  // from any thread.
  virtual absl::StatusOr<std::string> SchemaFingerprint(
      absl::string_view keyspace) const = 0;

  // The text SchemaFingerprint hashes, for messages that name what differs
  // between two nodes' schemas (a PostgreSQL table's columns and key); ""
  // when the backend has none to show (the embedded backend). May be called
  // from any thread.
  virtual std::string SchemaDescription(absl::string_view keyspace) const {
    (void)keyspace;
    return "";
  }
};

// The embedded backend's fingerprint for every keyspace: values are opaque
// bytes, so a node keeping them takes the rows of any shape, and its
// fingerprint matches every other one (node/sync/schema_check.h). An embedded
// node peering with a PostgreSQL node keeps that table's canonical bytes
// (pg/schema/row_codec.h) and diffs equal with it.
inline constexpr absl::string_view kEmbeddedFingerprint = "embedded/1";

// Values kept in the store's own LevelDB, inside the row record.
std::unique_ptr<RowBackend> NewEmbeddedBackend();

}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_ROW_BACKEND_H_
