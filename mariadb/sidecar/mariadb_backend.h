// MariaDbBackend: the RowBackend that keeps rows in MariaDB (or MySQL)
// tables, one keyspace per table, named "database.table".
//
// The store keeps the index (token, key -> version, digest). Values are the
// canonical bytes of pg/schema/row_codec.h, made from MariaDB's values by
// mariadb/column_mapping.h, so a MariaDB node and a PostgreSQL node digest,
// fingerprint and exchange the same rows. MariaDB has no per-row commit
// stamp, so the compare-and-swap compares content: the payload kept for an
// applied row is a digest of its canonical value (kPayloadSize bytes), and
// IndexedRow::digest is recomputed from the row the table holds.
//
// Apply. One connection holds the session settings: `server_id` =
// apply_server_id (every binlog event of tally's writes carries it, so a
// capture tells them from the applications' writes, and a native replica
// chain keeps the mark; this needs the BINLOG REPLAY privilege),
// READ COMMITTED, innodb_lock_wait_timeout = lock_wait_timeout (whole
// seconds, at least 1), a strict sql_mode with NO_AUTO_VALUE_ON_ZERO (a
// key 0 is kept, a value out of range is refused, not clamped) and
// foreign_key_checks = 0 (as a replica applies: what a cascade did at the
// source arrives as rows of its own; triggers still fire, MariaDB has no
// switch for them). ApplyRows runs transactions of at most
// max_rows_per_transaction rows, tables in name order and each table's rows
// in key order:
//   BEGIN;
//   per table: SELECT <columns> ... WHERE key IN (...) FOR UPDATE SKIP LOCKED
//     (a row an application holds is skipped), then a plain read of the keys
//     it did not return (present there = busy; absent = absent);
//     each locked row's content is digested with the expected version and
//     compared with IndexedRow::digest; a row to be absent must be absent;
//     the keys to insert are probed with FOR UPDATE NOWAIT (an
//     application's uncommitted INSERT, invisible to both reads, fails it
//     at once: busy);
//     matching rows are written: INSERT .. ON DUPLICATE KEY UPDATE of the
//     locked rows (nobody can change them before COMMIT), DELETE by key,
//     plain INSERT of the absent ones (an INSERT meeting a row an
//     application inserted meanwhile fails with a duplicate key on PRIMARY:
//     that row is refused and the application's row stays);
//   INSERT INTO tally.apply_log ... ON DUPLICATE KEY UPDATE (apply_log.h);
//   COMMIT.
// A row whose content differs is refused (RowOutcome::applied false): the
// application's write wins and its capture indexes it.
//
// The application first. The apply never waits for a row lock an
// application holds (SKIP LOCKED, NOWAIT); the waits it cannot skip (an
// INSERT meeting a row an application inserted between the probe and the
// INSERT) end at lock_wait_timeout: the
// rows of that statement are busy and the others apply (a deadlock, or a
// timeout under innodb_rollback_on_timeout, rolls the whole transaction
// back and all its rows are busy). Busy rows are tried again
// in later transactions half as large, for up to busy_retry_for, then left
// as not applied (the application's write is captured; anti-entropy covers
// the rest). So the application's transaction never fails because of the
// apply, and the apply holds its locks for one short transaction.
//
// Refused rows. A statement the database refuses (a CHECK, a value out of
// range, a duplicate on another unique key) changed nothing (InnoDB rolls
// back the statement); its rows are split in halves and tried again until
// each refused row is alone: it gets RowOutcome::rejected naming the table,
// the key and the server's message, and the others are applied. So do rows
// whose canonical bytes MariaDB cannot take (a NaN from PostgreSQL, a
// timestamp past 2038), rows that are not the table's encoding and rows of
// a keyspace that is no kept table. Only a lost connection or a failed
// COMMIT fails the whole call.
//
// Crash safety: MariaDB commits first, the store's WriteBatch second. Each
// transaction writes its applied rows and their versions into
// `tally`.`apply_log` (apply_log.h), in the same transaction: a capture that
// resumes before that transaction re-indexes the rows from its binlog
// events; when the store did commit, the same versions change nothing. The
// table holds one row per node (each transaction replaces it), so it needs
// no cleanup. Open creates the schema and table when missing, which needs
// CREATE on `tally`; the apply needs SELECT, INSERT and UPDATE on it.
//
// Reads. ReadValues sends one `SELECT <columns> ... WHERE key IN (...)` per
// keyspace per call (per 1,000 keys) on a reader connection (consistent,
// non-locking reads) and answers a row only while its content still digests to
// the payload: kAborted when the table holds another value (changed since: its
// capture indexes the change), kUnavailable when it holds no row (a delete not
// indexed yet).
//
//   MariaDbBackendOptions o;
//   o.url = "mariadb://tally@127.0.0.1/app";
//   o.tables = {"app.users"};
//   o.apply_server_id = 4242;
//   o.node = "db-3";
//   TALLY_ASSIGN_OR_RETURN(std::unique_ptr<MariaDbBackend> b,
//                          MariaDbBackend::Open(o));
//
// Thread-safety: ApplyRows is called by one thread at a time (the store's
// commit leader); ReadValue(s), SchemaFingerprint and SchemaDescription
// from any thread, concurrently with it. Each connection is guarded by its
// own mutex; the schemas are immutable after Open.
#ifndef TALLY_MARIADB_SIDECAR_MARIADB_BACKEND_H_
#define TALLY_MARIADB_SIDECAR_MARIADB_BACKEND_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "mariadb/connection.h"
#include "mariadb/table.h"
#include "mariadb/url.h"
#include "pg/sidecar/apply/fault_points.h"
#include "storage/row_backend.h"

namespace tally {
namespace mariadb {

struct MariaDbBackendOptions {
  // mariadb://user[:password]@host[:port][/database].
  std::string url;
  // The kept tables, "database.table"; each is the keyspace of that name.
  std::vector<std::string> tables;
  // The session server_id of the apply connection, marking tally's own
  // writes in the binary log. Must be unique among the servers and tally
  // nodes of the replication topology. Required (not 0).
  uint32_t apply_server_id = 0;
  // This node's name in the apply log. Required.
  std::string node;
  // How long the apply waits for a row lock it cannot skip. MariaDB counts
  // whole seconds: rounded up, at least 1 s.
  absl::Duration lock_wait_timeout = absl::Seconds(1);
  // How long busy rows are tried again before they are left not applied.
  absl::Duration busy_retry_for = absl::Seconds(2);
  // Rows per apply transaction (the first try; retries are smaller).
  size_t max_rows_per_transaction = 10000;
  // Connecting, and each read or write on a connection.
  absl::Duration io_timeout = absl::Seconds(30);
  // Crash tests only: the apply reaches apply-before-db-commit and
  // apply-after-db-commit (pg/sidecar/apply/fault_points.h). Null: none.
  std::shared_ptr<pg::FaultPoints> fault_points;
};

class MariaDbBackend : public storage::RowBackend {
 public:
  // The payload of an applied row: a format byte and a 16-byte digest of
  // the row's canonical value.
  static constexpr size_t kPayloadSize = 17;

  // Connects (an apply and a reader connection), sets the apply session up
  // and reads every kept table's schema. Returns kInvalidArgument for
  // missing options, kPermissionDenied naming BINLOG REPLAY when the user
  // may not set the session server_id (and naming CREATE when the apply
  // log cannot be created), a table's error from MariaDbTable::Read
  // (kNotFound, kFailedPrecondition for columns that do not map), or the
  // connection's.
  static absl::StatusOr<std::unique_ptr<MariaDbBackend>> Open(
      const MariaDbBackendOptions& options);
  ~MariaDbBackend() override;

  absl::string_view name() const override { return "mariadb"; }

  absl::Status ApplyRows(absl::Span<const storage::RowChange> rows,
                         std::vector<storage::RowOutcome>* outcomes) override;

  absl::StatusOr<std::string> ReadValue(
      const storage::RowLocation& row,
      absl::string_view stored_payload) const override;

  absl::StatusOr<std::vector<absl::StatusOr<std::string>>> ReadValues(
      absl::Span<const storage::RowLocation> rows,
      absl::Span<const absl::string_view> stored_payloads) const override;

  // The mapped PostgreSQL table's fingerprint (mariadb/table.h), equal to
  // a PostgreSQL node's for the same columns; "postgresql/1:not-kept" for
  // a keyspace that is no kept table.
  absl::StatusOr<std::string> SchemaFingerprint(
      absl::string_view keyspace) const override;
  std::string SchemaDescription(absl::string_view keyspace) const override;

  // The payload ApplyRows returns for a row whose canonical value is
  // `value`.
  static std::string PayloadOf(absl::string_view value);

 private:
  struct Table {
    std::string keyspace;
    MariaDbTable table;
  };
  struct Staged;
  struct Attempt;

  MariaDbBackend(MariaDbBackendOptions options, MariaDbTarget target,
                 std::map<std::string, Table, std::less<>> tables);

  // (Re)connects the apply session when it is lost.
  absl::Status EnsureApplyConnection() ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  // One transaction over `attempt`'s rows; fills their outcomes or puts
  // them back as busy. Returns an error only for a lost connection or a
  // failed COMMIT.
  absl::Status RunTransaction(Attempt& attempt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  const Table* FindTable(absl::string_view keyspace) const;

  const MariaDbBackendOptions options_;
  const MariaDbTarget target_;
  // Immutable after Open.
  const std::map<std::string, Table, std::less<>> tables_;

  absl::Mutex apply_mu_;
  std::unique_ptr<Connection> apply_ ABSL_GUARDED_BY(apply_mu_);
  uint64_t sequence_ ABSL_GUARDED_BY(apply_mu_) = 0;

  mutable absl::Mutex read_mu_;
  mutable std::unique_ptr<Connection> reader_ ABSL_GUARDED_BY(read_mu_);
};

}  // namespace mariadb
}  // namespace tally

#endif  // TALLY_MARIADB_SIDECAR_MARIADB_BACKEND_H_
