// Sidecar: tally next to one MariaDB (or MySQL-protocol) server — what
// node/ uses to keep a set of its tables, as pg/sidecar/sidecar.h does for
// PostgreSQL.
//
// A sidecar owns the MariaDB side of a node: the server's checks
// (mariadb/capture/preflight.h, and each table's columns,
// mariadb/column_mapping.h), the RowBackend the node's Store is opened with
// (mariadb_backend.h: rows live in the tables, the store keeps the index),
// and a thread that builds the index from a consistent snapshot
// (mariadb/capture/snapshot.h) or resumes from the stored position
// (mariadb/capture/capture_position.h), then follows the binary log from
// there (mariadb/binlog/binlog_stream.h), writing every transaction of a
// kept table into the store as captured changes, with the position in the
// same write.
//
//   SidecarOptions o;
//   o.url = "mariadb://tally:secret@127.0.0.1:3306/app";
//   o.tables = {"app.users"};
//   o.node_name = "eu-west/db-3";
//   o.server_id = 4242;
//   TALLY_ASSIGN_OR_RETURN(std::unique_ptr<Sidecar> sidecar,
//                          Sidecar::Prepare(o));
//   store_options.backend = sidecar->backend();
//   ... Store::Open ...; sidecar->Start(store.get()); ...; sidecar->Stop();
//
// Versions. A first build gives every row the bootstrap version (the same
// on every replica: identical tables give identical trees) and loads it
// unlogged: the feed does not re-send a first build. A captured
// transaction's rows get its commit stamp (commit_stamps.h: the commit
// second and the log order) and this node as origin. A rebuild keeps the
// version of every row the index already describes; a row it finds changed,
// added or gone gets one fresh local version (the store clock, this node).
//
// Own writes. The apply runs with session server_id = `server_id`; the
// binlog reader registers as `server_id + 1`. Transactions carrying
// `server_id` are this node's applies: their rows are indexed with the
// versions the apply log lists (apply_log.h), never as local changes — so
// a change that came from a peer is never sent back as this node's. Rows
// such a transaction changed that the log does not list (a trigger's) are
// the database's own doing and are captured as local changes.
//
// Index lost. A start with no stored position whose server holds this
// node's index marker (index_marker.h: an index was built here before) is
// a loss, not a first start: rows the server's applications wrote since the
// first build (read from the binary log, local_writes.h) may not have
// reached the peers, so they get fresh versions, and keys deleted here get
// tombstones; the others keep the bootstrap version, so that the peers'
// rows win over them. Logged per table, and in the status.
//
// Rebuilds. The whole index (every kept table, from one snapshot, each
// reconciled against what the index holds) is rebuilt when: no position is
// stored (a first start, or a build that did not finish); a table's
// schema fingerprint differs from the one the position recorded (changed
// while tallyd was stopped); the server no longer holds the binary log from
// the stored position (error 1236: purged, or another server); a statement
// in the log changed or emptied a kept table (ALTER, DROP, TRUNCATE,
// RENAME, ...: transaction_reader.h); or a row image of a kept table could
// not be read. Each rebuild is logged with its reason and counted. While a
// table builds its keyspace takes no rows from outside (TakesRows:
// kUnavailable). A kept table the server does not hold is "missing": its
// index rows are erased (nothing sent to peers, as a DROP is not
// replicated), it takes no rows (kNotFound), and it shows peers a
// fingerprint no table has, so that their sessions refuse that keyspace
// alone; it is built afresh once a table of that name exists again.
//
// Refused keyspaces. The same holds, state "refused" with the reason in
// the status's `trouble`, for a kept table changed into one tally cannot
// keep (no primary key, a column it cannot map, a cascading foreign key:
// mariadb/capture/preflight.h), built afresh once it can be kept again; and
// for a keyspace with rows over the value limit (not indexed; the position
// records the refusal, so a start rebuilds and looks again), until none is.
// One keyspace refused never stops the others.
//
// Errors. A connection failure never ends the thread: it retries with a
// backoff of 1 s doubling to 30 s, phase "reconnecting" with the reason.
// An error no retry can help (a refused preflight, kInvalidArgument,
// kDataLoss: a stored position another sidecar wrote) puts it in phase
// "failed" with the reason, and it stops.
//
// Thread-safety: every method may be called from any thread.
#ifndef TALLY_MARIADB_SIDECAR_SIDECAR_H_
#define TALLY_MARIADB_SIDECAR_SIDECAR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "pg/sidecar/apply/fault_points.h"
#include "storage/row_backend.h"
#include "storage/store.h"
#include "storage/store_options.h"
#include "tree/token.h"

namespace tally {
namespace mariadb {

struct SidecarOptions {
  // mariadb://user[:password]@host[:port][/database] (or mysql://).
  std::string url;
  // Qualified table names ("db.t"), each a keyspace of that name.
  std::vector<std::string> tables;
  // The node's name: the origin of captured versions, and its row in the
  // apply log.
  std::string node_name;
  // The session server_id of the apply (its transactions carry it in the
  // binary log); the binlog reader registers as server_id + 1. Both must
  // differ from every server's and other reader's in the topology. Not 0,
  // below 2^32 - 1.
  uint32_t server_id = 0;
  // Where the sidecar's log lines go (one event each). Unset: stderr.
  std::function<void(absl::string_view line)> log;
  // The depth of the keyspaces the sidecar creates (the store's
  // default_depth).
  int keyspace_depth = tree::kDefaultDepth;
  // How often an idle server sends a heartbeat; bounds how long a captured
  // transaction can wait for the next event before it is stored.
  absl::Duration heartbeat_period = absl::Milliseconds(100);
  // Rows per store write, for the build and for the capture.
  size_t batch_rows = 10000;
  // The store's value limit (StoreOptions::max_value_bytes). A row whose
  // canonical value is longer is not indexed: its keyspace is refused
  // (takes and shows no rows, state "refused") until no row of it is.
  size_t max_value_bytes = storage::StoreOptions().max_value_bytes;
  // Crash tests only: the points of pg/sidecar/apply/fault_points.h this
  // sidecar reaches (all four). Null: none.
  std::shared_ptr<pg::FaultPoints> fault_points;
};

struct SidecarKeyspaceStatus {
  std::string name;         // "db.t"
  std::string fingerprint;  // the mapped schema's; empty while missing
  // "building", "ready", "rebuilding", "missing" (as pg/sidecar/sidecar.h),
  // "refused" (a row over the value limit: `trouble` says which).
  std::string state;
  std::string trouble;
  uint64_t rows = 0;  // rows in the index (tombstones included)
};

struct SidecarStatus {
  // "preparing", "building", "following", "reconnecting", "failed",
  // "stopped".
  std::string phase;
  std::string last_error;  // the reason for reconnecting or failed
  uint32_t server_id = 0;  // the apply's
  // The GTID state the store holds everything up to, and the server's
  // last (@@gtid_binlog_pos, read when following starts, every few
  // seconds while idle, and by AwaitCaughtUp).
  std::string indexed_gtid;
  std::string server_gtid;
  // now - commit second of the last transaction indexed while behind;
  // zero once caught up.
  absl::Duration capture_lag = absl::ZeroDuration();
  std::vector<SidecarKeyspaceStatus> keyspaces;
  // The current (or last) build.
  uint64_t build_rows_done = 0;
  uint64_t build_rows_estimated = 0;  // information_schema's estimate
  double build_rows_per_second = 0;
  absl::Duration build_elapsed;
  uint64_t builds = 0;  // builds and rebuilds since start
  std::string last_rebuild_reason;
  // The last build found the index lost (index_marker.h), and gave this
  // many rows written here since the first build fresh versions.
  bool index_lost = false;
  uint64_t index_loss_fresh_rows = 0;
  uint64_t transactions_captured = 0;
  uint64_t rows_captured = 0;
  uint64_t own_transactions_replayed = 0;
  uint64_t rows_applied = 0;
  uint64_t rows_refused = 0;
};

// What Verify found for one keyspace.
struct VerifyResult {
  std::string keyspace;
  uint64_t table_rows = 0;
  uint64_t index_rows = 0;  // live rows
  std::vector<std::string> mismatched_keys;
  std::vector<std::string> missing_from_index;
  std::vector<std::string> missing_from_table;
};

class Sidecar {
 public:
  // Checks the options (kInvalidArgument), connects and runs the server's
  // checks and each table's, so that a refusal (kFailedPrecondition,
  // kPermissionDenied, kNotFound: they name the fix) stops tallyd at
  // start. A server that cannot be reached (kUnavailable) is no error: the
  // thread retries once started.
  static absl::StatusOr<std::unique_ptr<Sidecar>> Prepare(
      const SidecarOptions& options);

  ~Sidecar();
  Sidecar(const Sidecar&) = delete;
  Sidecar& operator=(const Sidecar&) = delete;

  std::shared_ptr<storage::RowBackend> backend();

  // Builds or resumes, then follows, in a thread of its own; returns at
  // once. kFailedPrecondition when already started. REQUIRES: `store` was
  // opened with backend() and outlives Stop().
  absl::Status Start(storage::Store* store);

  // Blocks until the index holds every transaction the server had logged
  // at the time of the call (per replication domain), or `timeout` passes
  // (kDeadlineExceeded). kFailedPrecondition when not started or failed.
  absl::Status AwaitCaughtUp(absl::Duration timeout);

  // Reads the table of `keyspace` (a consistent snapshot) and compares it
  // with the index: every live index row's digest recomputed from the
  // table's value with the index's version, rows missing from either.
  // kNotFound for a keyspace that is not kept.
  absl::StatusOr<VerifyResult> Verify(absl::string_view keyspace);

  // Stops the thread and joins it; idempotent.
  void Stop();

  SidecarStatus status() const;

 private:
  class Impl;
  explicit Sidecar(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mariadb
}  // namespace tally

#endif  // TALLY_MARIADB_SIDECAR_SIDECAR_H_
