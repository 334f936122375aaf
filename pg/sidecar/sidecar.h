// Sidecar: tally next to one PostgreSQL database — the one entry point node/
// uses to keep a set of tables.
//
// A sidecar owns everything PostgreSQL-side of a node: the preflight checks,
// the tables' schemas, the RowBackend the node's Store is opened with (rows
// live in the tables; the store keeps the index), and a thread that builds
// the index from the slot's exported snapshot (pg/sidecar/bootstrap.h) or
// resumes from the stored position, then follows the slot
// (pg/sidecar/capture.h), writing every captured change into the store and
// confirming it to PostgreSQL only once the store has it.
//
//   SidecarOptions o;
//   o.conninfo = "postgresql://tally@127.0.0.1:5432/app";
//   o.tables = {"public.users", "public.orders"};
//   o.node_name = "eu-west/db-3";
//   TALLY_ASSIGN_OR_RETURN(std::unique_ptr<Sidecar> sidecar,
//                          Sidecar::Prepare(o));
//   store_options.backend = sidecar->backend();
//   TALLY_ASSIGN_OR_RETURN(auto store, storage::Store::Open(dir,
//   store_options)); TALLY_RETURN_IF_ERROR(sidecar->Start(store.get()));
//   ...
//   sidecar->Stop();  // before the store is destroyed
//
// Names: the slot, the publication and the replication origin are all
// pg/schema/names.h's ReplicationBaseName(node name). Keyspaces are the tables'
// qualified names ("public.users").
//
// Lifecycle of the thread (its phases, events and transitions, with every
// backoff, are the state machine of pg/sidecar/lifecycle.h): build (no
// position stored, or a rebuild: the slot is missing or lost, the database
// has another system identifier, the stored LSN is below the slot's
// confirmed_flush_lsn, a table changed; the whole decision, with every
// reason, is pg/sidecar/index_decision.h) or resume, then follow. A
// connection failure never ends it: it retries with a backoff of
// 1 s doubling to 30 s, phase "reconnecting" with the reason; so do the
// other errors a later attempt may not meet (a dropped table, a refused
// store write). An error that retrying cannot help (kDataLoss: a malformed
// stream or stored position; kInvalidArgument, kOutOfRange) puts it in
// phase "failed" with the reason, and it stops. A schema change reloads the
// schemas and rebuilds at once (DDL is not decoded, and adding a column
// with a default changes every row's digest). Three things notice one: a
// Relation message that differs from the table's schema (at the table's
// next row change); the catalog check every `schema_check_interval` (and
// within a second when the backend met a table that does not exist: a
// peer's row refused, a read failed), which
// reads each table's schema from the catalog and compares its fingerprint
// with the one the index was built with (an `ADD COLUMN ... DEFAULT`
// changes every row's bytes and decodes no row change); and, at start or
// reconnect, the fingerprints the stored position recorded at the last
// build (a change made while tallyd was stopped). The check and the stored
// fingerprints also cover a partitioned table's leaves (their OIDs and
// relfilenodes, TableSchema::partition_layout()): an ATTACH, DETACH,
// CREATE ... PARTITION OF, DROP or TRUNCATE of one partition brings or
// removes rows that decoding never sends (a leaf's TRUNCATE is not
// published via the root), so it rebuilds the same way — also for a new
// empty partition or a rewrite (VACUUM FULL), where the rebuild finds
// nothing to change. Whichever notices first
// rebuilds; the rebuild takes the schemas it compares with afterwards, so
// the others then see no difference and the same change is never rebuilt
// twice.
//
//
// A kept table dropped from the database (the catalog check reads no such
// table: logical decoding sends nothing for a DROP, and the publication
// forgets the table) makes its keyspace "missing", through the same
// rebuild: its index rows are erased (no tombstone, nothing sent to peers:
// a DROP is not replicated, as PostgreSQL does not replicate it), it takes
// no rows (TakesRows: kNotFound) and shows peers kMissingFingerprint, so
// that their sessions refuse that keyspace alone. The stored position
// records it as missing (pg/sidecar/bootstrap.h kMissingTable) and each table's
// OID (TableSchema::stored_fingerprint): a table of that name that exists
// again, or another table under the name (a new OID), is rebuilt afresh,
// as at a first start (BuildOptions::afresh), so that anti-entropy brings
// the peers' rows back in rather than sending deletes out. Every kept
// table is a keyspace of the store from Start, even while it has no row.
//
// Thread-safety: every method may be called from any thread; status() is a
// value copy taken under a lock.
#ifndef TALLY_PG_SIDECAR_SIDECAR_H_
#define TALLY_PG_SIDECAR_SIDECAR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "pg/sidecar/apply/fault_points.h"
#include "pg/wire/lsn.h"
#include "storage/row_backend.h"
#include "storage/store.h"
#include "storage/store_options.h"
#include "tree/token.h"

namespace tally {
namespace pg {

struct SidecarOptions {
  // libpq connection string or URL of the database.
  std::string conninfo;
  // Qualified table names ("public.users"), each a keyspace. Each must
  // satisfy storage's keyspace name rule ([A-Za-z0-9_.-]).
  std::vector<std::string> tables;
  // The node's name (the origin of captured versions; the PostgreSQL
  // object names derive from it).
  std::string node_name;
  // Where the sidecar's log lines go (one event each: build progress,
  // rebuild reasons, reconnects). Unset: stderr.
  std::function<void(absl::string_view line)> log;
  // How often the catalog is compared with the schemas the index was built
  // with (tallyd --pg-schema-check-interval). Must be positive.
  absl::Duration schema_check_interval = absl::Seconds(60);
  // The depth of the keyspaces the sidecar creates for its tables (the
  // store's default_depth: tallyd --default-depth).
  int keyspace_depth = tree::kDefaultDepth;
  // Crash tests only (tallyd --test-fault-point): the points of
  // pg/sidecar/apply/fault_points.h, passed to the apply and the capture; the
  // sidecar itself reaches apply-after-store-commit. Null: none.
  std::shared_ptr<FaultPoints> fault_points;
  // The store's value limit (StoreOptions::max_value_bytes). A row whose
  // canonical value is longer is not indexed: its keyspace is refused
  // (takes and shows no rows, state "refused") until no row of it is.
  size_t max_value_bytes = storage::StoreOptions().max_value_bytes;
};

// One kept table.
struct SidecarKeyspaceStatus {
  std::string name;         // "public.users"
  std::string fingerprint;  // the table's schema fingerprint
  // "building" (first build), "ready", "rebuilding" (a schema change or a
  // lost slot: sessions for it are refused until it is rebuilt), "missing"
  // (the table was dropped: the keyspace takes no rows, peers' sessions
  // refuse it, its index holds none; fingerprint empty).
  // Also "refused": rows of it are over the value limit (`trouble` says
  // which); it takes and sends no rows until none is.
  std::string state;
  uint64_t rows = 0;  // rows in the index (tombstones included)
  std::string trouble;
};

struct SidecarStatus {
  // "preparing" (before Start), "building", "following", "reconnecting",
  // "failed", "stopped".
  std::string phase;
  // The last error (the reason for "reconnecting" or "failed"); empty when
  // none since the last success.
  std::string last_error;

  std::string slot;
  std::string publication;
  std::string origin;
  uint64_t system_id = 0;

  // The end of WAL the server last reported, and what the store holds and
  // was confirmed to the slot.
  Lsn received_lsn = kInvalidLsn;
  Lsn confirmed_lsn = kInvalidLsn;
  // Polled from pg_replication_slots: pg_current_wal_lsn() -
  // confirmed_flush_lsn (WAL the slot retains), and wal_status ("reserved",
  // "extended", "unreserved", "lost"; empty if unknown).
  uint64_t slot_lag_bytes = 0;
  std::string slot_wal_status;
  // now - commit time of the last transaction indexed while behind; zero
  // once caught up.
  absl::Duration capture_lag = absl::ZeroDuration();

  std::vector<SidecarKeyspaceStatus> keyspaces;

  // The current (or last) build: rows indexed and the estimate from
  // pg_class.reltuples.
  uint64_t build_rows_done = 0;
  uint64_t build_rows_estimated = 0;
  // While building: rows read per second over the last 30 s, the time left
  // at that rate to the estimate (nullopt without one, while nothing moves,
  // or past it: tree/progress_meter.h), and the time since it started.
  double build_rows_per_second = 0;
  std::optional<absl::Duration> build_remaining;
  absl::Duration build_elapsed;
  // The last build found the index lost (pg/sidecar/build_marker.h), and gave
  // this many rows the application last wrote here fresh local versions
  // (pg/sidecar/bootstrap.h).
  bool index_lost = false;
  uint64_t index_loss_fresh_rows = 0;

  uint64_t transactions_captured = 0;
  uint64_t rows_captured = 0;
  // Transactions applied by this node (its own origin) whose rows were
  // indexed from their 'tally.apply' message.
  uint64_t own_transactions_replayed = 0;
  // Rows the backend applied to / refused from PostgreSQL (the CAS).
  uint64_t rows_applied = 0;
  uint64_t rows_refused = 0;
};

// What Verify found for one keyspace.
struct VerifyResult {
  std::string keyspace;
  uint64_t table_rows = 0;  // rows in the table
  uint64_t index_rows = 0;  // live rows in the index (tombstones apart)
  // Index rows whose digest, recomputed from the table's value with the
  // index's version, differs.
  std::vector<std::string> mismatched_keys;
  // Table rows the index does not hold live.
  std::vector<std::string> missing_from_index;
  // Live index rows the table does not hold.
  std::vector<std::string> missing_from_table;
  bool ok() const {
    return mismatched_keys.empty() && missing_from_index.empty() &&
           missing_from_table.empty();
  }
};

class Sidecar {
 public:
  // Connects, runs the preflight checks (pg/schema/preflight.h), reads the
  // table schemas and opens the backend. Errors name the fix: the preflight's
  // (kFailedPrecondition, kPermissionDenied, kNotFound, kResourceExhausted),
  // kInvalidArgument for a table whose name is not a keyspace name, an
  // empty option or a schema_check_interval that is not positive, the
  // connection's kUnauthenticated. A database that cannot be reached (the
  // connection's kUnavailable: down, or not listening yet) is no error: the
  // sidecar is returned unreached, its backend answers kUnavailable, and once
  // started its thread retries with the backoff above (phase "reconnecting",
  // the reason in last_error) until the database answers; the preflight then
  // runs there, and its refusal puts the sidecar in phase "failed".
  static absl::StatusOr<std::unique_ptr<Sidecar>> Prepare(
      const SidecarOptions& options);

  // Stops the thread if it runs.
  ~Sidecar();
  Sidecar(const Sidecar&) = delete;
  Sidecar& operator=(const Sidecar&) = delete;

  // The backend to open the Store with (StoreOptions::backend).
  std::shared_ptr<storage::RowBackend> backend();

  // Builds or resumes, then follows the slot, in a thread of its own;
  // returns at once. kFailedPrecondition when already started.
  // REQUIRES: `store` was opened with backend() and outlives Stop().
  absl::Status Start(storage::Store* store);

  // Blocks until every keyspace is built and the capture has indexed and
  // confirmed everything up to the server's WAL position at the time of the
  // call, or `timeout` passes (kDeadlineExceeded, naming where it stands).
  // kFailedPrecondition when not started or failed.
  absl::Status AwaitCaughtUp(absl::Duration timeout);

  // Scans the table of `keyspace` and compares it with the index: every
  // live index row's digest recomputed from the table's value with the
  // index's version, rows missing from either. Reads the table on its own
  // connection; run it once caught up (AwaitCaughtUp) for an exact answer:
  // changes not yet captured show as differences. A missing (dropped)
  // table has no row: its index must have none live. kNotFound for a
  // keyspace that is not kept. REQUIRES: started.
  absl::StatusOr<VerifyResult> Verify(absl::string_view keyspace);

  // Stops the thread and joins it; idempotent.
  void Stop();

  SidecarStatus status() const;

 private:
  class Impl;
  explicit Sidecar(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_SIDECAR_SIDECAR_H_
