// PgBackend: the RowBackend that keeps rows in PostgreSQL tables, one
// keyspace per table ("public.users").
//
// The store keeps the index (token, key -> version, digest) and, in place
// of each row's value, the RowToken (pg/sidecar/apply/row_token.h) of the
// PostgreSQL row version it describes: the commit timestamp and replication
// origin of the transaction that wrote it. Values are the canonical bytes of
// pg/schema/row_codec.h; a tombstone keeps an empty payload.
//
// Apply. One connection per database holds the node's replication origin
// (`pg_replication_origin_session_setup`, created if missing) and runs, as
// PostgreSQL's own logical replication apply does, with
// session_replication_role = replica: ordinary triggers and the foreign
// keys' triggers (checks, ON DELETE CASCADE) do not fire on applied rows;
// what they did at the source arrives as row changes of its own (ENABLE
// ALWAYS and ENABLE REPLICA triggers still fire). Its lock_timeout is
// short (PgBackendOptions::lock_timeout). ApplyRows stages every row, then
// runs one or more transactions of at most max_rows_per_transaction rows,
// tables in the order of their names and each table's rows in key order:
//   BEGIN; SELECT pg_replication_origin_xact_setup(<stamp as LSN>, <stamp>);
//   SET CONSTRAINTS ALL IMMEDIATE;
//   per table, in a SAVEPOINT: binary COPY of the rows into a temp table,
//     then one statement (pg/sidecar/apply/apply_sql.h) that locks the rows it
//     updates or deletes with FOR UPDATE SKIP LOCKED (a row an application
//     holds is skipped: busy), UPDATEs and DELETEs rows whose
//     pg_xact_commit_timestamp_origin(xmin) still equals the expected
//     token, INSERTs rows the index says are absent with ON CONFLICT DO
//     NOTHING, checks that rows to be absent are, and returns the rows it
//     applied and the busy ones;
//   pg_logical_emit_message(true, 'tally.apply', <the changed rows>)
//     (pg/sidecar/apply/apply_message.h); COMMIT.
// Each transaction has its own stamp: a unique, increasing timestamp (µs
// since 2000, at least one above the last one the origin's progress
// recorded) used both as the transaction's commit timestamp and as its
// origin LSN, so that a restart continues above every stamp used before.
// xact_setup fixes the commit timestamp, so the token of every applied
// row, RowToken(stamp, the origin's roident), is known before COMMIT. A
// row the statement did not return was changed by an application since
// tallyd captured it: it is refused (RowOutcome::applied false) and the
// capture delivers the application's write, which wins.
//
// The application first. The apply never waits for a row lock an
// application holds (SKIP LOCKED); a wait it cannot skip ends at its
// lock_timeout; a superuser's apply session also has a deadlock_timeout
// below the applications'. Busy rows, and the rows of a statement that
// timed out, are tried again in later, smaller transactions for up to
// busy_retry_for, then left as not applied (the application's write is
// captured; anti-entropy covers the rest). So PostgreSQL never has to
// abort an application's transaction to break a deadlock with the apply,
// and the apply holds its row locks for one short transaction.
//
// Refused rows. A statement the database fails is rolled back to its
// savepoint and the rows it refuses are found by bisection
// (pg/sidecar/apply/row_isolation.h); each gets RowOutcome::rejected naming the
// table, the key and the database's message, and the others are applied. So do
// rows that are not the table's encoding (a column added on one side
// first) and rows of a keyspace that is no kept table. Only a lost
// connection or a failed COMMIT fails the whole call.
//
// Crash safety: PostgreSQL commits first, the store's WriteBatch second.
// If tallyd dies between the two, PostgreSQL holds rows the index does not
// describe. The capture resumes from the store's position, which is before
// that transaction, receives it (origin = this node's apply origin) with
// its 'tally.apply' message, and indexes the listed rows with the versions
// the message carries. When the store did commit, the same versions and
// digests change nothing: an idempotent replay. Every transaction of a
// call carries its own message, so the same holds when a call fails after
// some of its transactions committed: the failed one rolled back, the
// committed ones are replayed. An error during COMMIT (the connection lost)
// leaves that transaction's outcome unknown, which the same replay
// settles.
//
// Reads. ReadValues sends one `SELECT <canonical columns> ... WHERE (key)
// IN (unnest of key arrays)` per keyspace per call, in binary, on a reader
// connection, and answers a row only while its token still equals the
// payload the index holds. Otherwise it says which way the row differs
// (storage/row_backend.h, ReadValues): kAborted when the table holds a
// version committed after the indexed one (changed since: the capture
// will index the change, and a reader skips the row as superseded);
// kUnavailable when the read sees a version committed before it, or no
// row (the indexed commit not visible to this read yet, or a delete the
// capture has not indexed yet: read again shortly).
//
//   PgBackendOptions o;
//   o.conninfo = "postgresql://tally@127.0.0.1/app";
//   o.tables = {"public.users"};
//   o.origin_name = "tally_db_3";
//   TALLY_ASSIGN_OR_RETURN(std::unique_ptr<PgBackend> b, PgBackend::Open(o));
//
// Thread-safety: ApplyRows is called by one thread at a time (the store's
// commit leader); ReadValue(s) and SchemaFingerprint from any thread,
// concurrently with it. Each connection is guarded by its own mutex.
#ifndef TALLY_PG_SIDECAR_APPLY_PG_BACKEND_H_
#define TALLY_PG_SIDECAR_APPLY_PG_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "pg/schema/table_schema.h"
#include "pg/sidecar/apply/fault_points.h"
#include "pg/sidecar/apply/row_token.h"
#include "pg/wire/connection.h"
#include "storage/row_backend.h"

namespace tally {
namespace pg {

struct PgBackendOptions {
  // libpq connection string or URL of the database.
  std::string conninfo;
  // The tables kept, as qualified names; each is a keyspace.
  std::vector<std::string> tables;
  // Of `tables`, those not in the database at Open (dropped while tallyd
  // was stopped): no schema until ReloadSchema finds one; until then their
  // rows are refused (kNotFound) and reads of them fail kNotFound.
  absl::flat_hash_set<std::string> missing;
  // The node's replication origin ("tally_<slot>"); created if missing.
  std::string origin_name;
  ConnectOptions connect;
  // How long Open waits for the origin when another session still holds
  // it (briefly, after a previous process's connection closed).
  absl::Duration origin_busy_wait = absl::Seconds(10);
  // The apply session's lock_timeout: the longest the apply waits for a
  // lock it cannot skip (an insert whose key an application's open
  // transaction writes); the statement is then rolled back and its rows
  // tried again later.
  absl::Duration lock_timeout = absl::Milliseconds(200);
  // The apply session's deadlock_timeout when the role may set it
  // (superuser): below the applications' (1 s by default), so that a
  // deadlock between the apply and an application is found by the apply's
  // session, which is then the one aborted.
  absl::Duration deadlock_timeout = absl::Milliseconds(50);
  // How long ApplyRows keeps trying rows that applications hold locked
  // (in later transactions, with growing pauses) before it leaves them as
  // not applied.
  absl::Duration busy_retry_for = absl::Milliseconds(500);
  // The most rows one apply transaction writes: the locks it takes are
  // held until its COMMIT.
  size_t max_rows_per_transaction = 2500;
  // The most statements one table's part of a transaction may take to
  // isolate the rows the database refuses (pg/sidecar/apply/row_isolation.h).
  int max_isolation_attempts = 64;
  // Crash tests only: the apply reaches apply-before-db-commit and
  // apply-after-db-commit (pg/sidecar/apply/fault_points.h). Null: none.
  std::shared_ptr<FaultPoints> fault_points;
};

class PgBackend final : public storage::RowBackend {
 public:
  // Connects (apply and reader connections), creates and sets up the
  // origin, reads the tables' schemas. Returns the connection's error, the
  // schema's (kNotFound, kFailedPrecondition without a primary key), or
  // kFailedPrecondition when another session holds the origin past
  // `origin_busy_wait`.
  static absl::StatusOr<std::unique_ptr<PgBackend>> Open(
      const PgBackendOptions& options);

  ~PgBackend() override;
  PgBackend(const PgBackend&) = delete;
  PgBackend& operator=(const PgBackend&) = delete;

  absl::string_view name() const override { return "postgresql"; }

  // See the header comment. A row the database refuses, of a keyspace
  // that is not a kept table, or that is not the table's encoding gets
  // RowOutcome::rejected. Returns an error (every outcome not applied) only
  // when the connection fails or a COMMIT does: transactions of the call
  // that committed before are then settled by the capture (their
  // 'tally.apply' messages), as after a crash.
  absl::Status ApplyRows(absl::Span<const storage::RowChange> rows,
                         std::vector<storage::RowOutcome>* outcomes) override
      ABSL_LOCKS_EXCLUDED(apply_mu_);

  absl::StatusOr<std::string> ReadValue(const storage::RowLocation& row,
                                        absl::string_view stored_payload)
      const override ABSL_LOCKS_EXCLUDED(read_mu_);

  absl::StatusOr<std::vector<absl::StatusOr<std::string>>> ReadValues(
      absl::Span<const storage::RowLocation> rows,
      absl::Span<const absl::string_view> stored_payloads) const override
      ABSL_LOCKS_EXCLUDED(read_mu_);

  // The table's fingerprint (pg/schema/table_schema.h) for a kept table, as
  // last read (at Open or by ReloadSchema); for any other keyspace
  // "postgresql/1:not-kept", which matches no table, so no peer sends this
  // node rows it has no table for.
  absl::StatusOr<std::string> SchemaFingerprint(absl::string_view keyspace)
      const override ABSL_LOCKS_EXCLUDED(tables_mu_);
  // The table's TableSchema::description() ("" for a keyspace not kept).
  std::string SchemaDescription(absl::string_view keyspace) const override
      ABSL_LOCKS_EXCLUDED(tables_mu_);

  // Reads the table of `keyspace` from the catalog again (after DDL: a
  // Relation message, the periodic catalog check). Later applies, reads
  // and fingerprints use the new schema. Returns kNotFound for a keyspace
  // that is not a kept table, or TableSchema::Read's error (the old schema
  // stays then).
  absl::Status ReloadSchema(absl::string_view keyspace)
      ABSL_LOCKS_EXCLUDED(tables_mu_, read_mu_);

  // The apply origin's id (roident): the origin of every row ApplyRows
  // writes.
  OriginId origin_id() const { return origin_id_; }
  // The schema of a kept table as last read, or null.
  std::shared_ptr<const TableSchema> schema(absl::string_view keyspace) const
      ABSL_LOCKS_EXCLUDED(tables_mu_);
  // The stamp of the last apply transaction this backend committed (or
  // found recorded as the origin's progress at Open).
  int64_t last_stamp() const ABSL_LOCKS_EXCLUDED(apply_mu_);

 private:
  struct Table {
    TableSchema schema;
    // pg_temp.<temp_name>: the apply's staging table for it.
    std::string temp_name;
    // The apply's statement for the staged rows (see the .cc).
    std::string merge_sql;
    // The reader's SELECT of rows by key.
    std::string read_sql;
  };

  using TablePtr = std::shared_ptr<const Table>;

  PgBackend(PgBackendOptions options, OriginId origin_id,
            std::vector<TablePtr> tables, std::unique_ptr<Connection> apply,
            std::unique_ptr<Connection> reader, int64_t last_stamp);

  static absl::StatusOr<TablePtr> ReadTableSchema(Connection& conn,
                                                  absl::string_view name,
                                                  size_t index);
  // Opens the apply connection with the origin set up.
  static absl::StatusOr<std::unique_ptr<Connection>> OpenApply(
      const PgBackendOptions& options);
  // The tables as they are now (a reload swaps one in while others use
  // the previous one).
  std::vector<TablePtr> Tables() const ABSL_LOCKS_EXCLUDED(tables_mu_);
  // Creates (or, after a schema change, re-creates) `table`'s staging
  // table on the apply connection.
  absl::Status EnsureStage(const Table& table)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  // The rows of one call, staged (defined in the .cc).
  struct StagedCall;
  // The apply; on error the caller rolls back what is open.
  absl::Status ApplyLocked(absl::Span<const storage::RowChange> rows,
                           std::vector<storage::RowOutcome>* outcomes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_) ABSL_LOCKS_EXCLUDED(tables_mu_);
  // Encodes each row for its table's staging table; a row that cannot be
  // (another encoding, a keyspace not kept) gets its rejection.
  absl::Status StageRows(absl::Span<const storage::RowChange> rows,
                         std::vector<storage::RowOutcome>* outcomes,
                         StagedCall* call)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  // One PostgreSQL transaction over `group` (rows of `call`, in its lock
  // order): each table's part in a savepoint, refused rows isolated, busy
  // ones appended to `*busy`, its own 'tally.apply' message, COMMIT. Sets
  // the outcomes of the rows it committed or refused. Returns an error only
  // when the connection or the COMMIT fails.
  absl::Status ApplyTransaction(const StagedCall& call,
                                absl::Span<const storage::RowChange> rows,
                                absl::Span<const uint32_t> group,
                                std::vector<storage::RowOutcome>* outcomes,
                                std::vector<uint32_t>* busy)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  // One statement's worth: stages `part` (rows of table `t`) and merges
  // them, appending the rows applied and busy. `stage_used`: the staging
  // table may hold an earlier attempt's rows.
  absl::Status ApplyPart(const StagedCall& call, const Table& table, uint32_t t,
                         absl::Span<const uint32_t> part, bool stage_used,
                         std::vector<uint32_t>* applied,
                         std::vector<uint32_t>* busy)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  absl::Status ReadTable(const Table& table,
                         absl::Span<const storage::RowLocation> rows,
                         absl::Span<const absl::string_view> payloads,
                         absl::Span<const size_t> indexes,
                         std::vector<absl::StatusOr<std::string>>* values) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(read_mu_);

  // Constant after construction.
  const PgBackendOptions options_;
  const OriginId origin_id_;
  // Keyspace -> index in tables_ (the set of tables never changes).
  const absl::flat_hash_map<std::string, size_t> table_index_;

  mutable absl::Mutex tables_mu_;
  std::vector<TablePtr> tables_ ABSL_GUARDED_BY(tables_mu_);

  mutable absl::Mutex apply_mu_;
  std::unique_ptr<Connection> apply_ ABSL_GUARDED_BY(apply_mu_);
  int64_t last_stamp_ ABSL_GUARDED_BY(apply_mu_);
  // Staging table name -> the fingerprint of the schema it was created
  // for, on the current apply connection.
  absl::flat_hash_map<std::string, std::string> staged_
      ABSL_GUARDED_BY(apply_mu_);

  mutable absl::Mutex read_mu_;
  // Reopened by the const reads when broken.
  mutable std::unique_ptr<Connection> reader_ ABSL_GUARDED_BY(read_mu_);
};

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_SIDECAR_APPLY_PG_BACKEND_H_
