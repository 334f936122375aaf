// DatabaseSource: a sidecar kept equal to a database it may only query
// (`peer = postgresql://reader@master/app,role=source`, or a MariaDB one:
// `peer = mariadb://reader:pw@master/shop,role=source`).
//
// The master belongs to someone else: no slot, no tallyd, no trigger there,
// only a role that may SELECT. Every sync interval (jittered by ±20%) a
// session runs, for each kept table:
//
//  1. A block-hash diff of the node's own database against the master's
//     (pg/table_diff/block_hashes.h): each database hashes its rows into
//     key buckets itself, and only the rows of the buckets that differ
//     cross the link, so a session over a table that changed little reads
//     about 1% of the table's bytes from the master.
//  2. The master's rows at the differing keys are read again (the newest
//     rows, not the diff's snapshot) and written through the node's store
//     as one-way copies (storage::ApplyMode::kSourceOverride), in batches:
//     the store's commit hands them to the sidecar's apply, with its
//     compare-and-swap against the index (a row an application changed on
//     the replica that tallyd has not captured yet is never overwritten:
//     refused, and taken again next session) and its replication origin
//     (the capture knows the rows as tally's own). Each copied row gets a
//     fresh version of the node's clock whose origin is the source's name,
//     so the store's change log holds it and it reaches every node that
//     follows this one. A key the master lacks is deleted (a tombstone).
//
// When either database is MariaDB (mariadb/table.h: no fast hash to compute
// block hashes with), step 1 reads both tables whole instead and compares
// the two scans in the canonical form; step 2 is the same. The node's own
// database may be MariaDB (a MariaDB sidecar: `replica_conninfo` a
// mariadb:// URL) and the master either engine. A MariaDB master's table is
// `DB.TABLE`, DB being its URL's database and TABLE the kept table's name
// without its schema; a PostgreSQL master's has the kept table's name. The
// schemas must match as mapped (mariadb/column_mapping.h).
//
// A table that fails (a privilege missing on the master, a schema that
// differs, a table gone) is reported with the reason and the others go on;
// a master that goes away mid-session leaves the batches written so far
// (each one commits whole) and the next session finishes the rest. Reads
// from the master: one connection, one query at a time, and the rows
// fetched paced by the bandwidth limits.
//
//   DatabaseSourceOptions o;
//   o.source_conninfo = "postgresql://reader@master.example/app";
//   o.replica_conninfo = config.postgres;
//   o.tables = config.tables;
//   DatabaseSource source(store, o);
//   source.Start();
//   ...
//   source.Stop();  // before the store closes
//
// Thread-safe: FillStatus from any thread while sessions run.
#ifndef TALLY_NODE_SIDECAR_DATABASE_SOURCE_H_
#define TALLY_NODE_SIDECAR_DATABASE_SOURCE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "node/observe/status_source.h"
#include "node/sync/bandwidth_limiter.h"
#include "storage/store.h"
#include "tally/v1/tally.pb.h"

namespace tally {
namespace node {

struct DatabaseSourceOptions {
  // The master's URL (its role needs SELECT on the tables, and TEMP on
  // the database, which PostgreSQL grants to every role by default).
  std::string source_conninfo;
  // The node's own database (tallyd --postgres, or --mariadb's URL).
  std::string replica_conninfo;
  // The kept tables, qualified ("public.users"); each has the same name on
  // the master.
  std::vector<std::string> tables;
  // Between sessions, jittered by ±20%; the first one starts within a
  // second.
  absl::Duration interval = absl::Seconds(30);
  // Rows read from the master and written per batch.
  size_t batch_rows = 1000;
  // Rows fetched from the master are paced by these: bytes per second for
  // this source (0: unlimited), and the node's limit over all its repairs
  // (null: none; it must outlive the source).
  double bandwidth_bytes_per_second = 0;
  BandwidthLimiter* node_bandwidth = nullptr;
  // Whether the sidecar takes rows now (it follows its database): a session
  // due while it builds or reconnects waits for it (its rows would all be
  // refused). Unset: always.
  std::function<bool()> sidecar_ready;
};

// What one session did, over all tables.
struct SourceSessionResult {
  uint64_t differences = 0;    // keys that differed
  uint64_t rows_copied = 0;    // rows written from the master
  uint64_t rows_deleted = 0;   // rows the master lacks, deleted here
  uint64_t rows_refused = 0;   // left: the application changed them here
  uint64_t rows_rejected = 0;  // refused by the database or the store
  uint64_t bytes_from_source = 0;
  // One entry per table that failed: "public.t: <reason>".
  std::vector<std::string> table_errors;
};

// Runs one session (see the file comment) against `store`, which must be
// the node's store opened on the replica's sidecar backend. Returns the
// result; table failures are in it, not the status. Returns an error only
// when neither database can be reached at all, or `cancelled` becomes true
// (kCancelled).
absl::StatusOr<SourceSessionResult> RunSourceSession(
    storage::Store* store, const DatabaseSourceOptions& options,
    const std::atomic<bool>* cancelled);

class DatabaseSource final : public StatusSource {
 public:
  // `store` must outlive the source.
  DatabaseSource(storage::Store* store, DatabaseSourceOptions options);
  ~DatabaseSource() override;
  DatabaseSource(const DatabaseSource&) = delete;
  DatabaseSource& operator=(const DatabaseSource&) = delete;

  // Starts the session thread.
  void Start();
  // Stops it (a running session stops at its next batch) and joins it.
  // Idempotent.
  void Stop();

  // StatusResponse.database_source.
  void FillStatus(::tally::v1::StatusResponse* response) override
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop();

  storage::Store* const store_;
  const DatabaseSourceOptions options_;
  const std::string masked_url_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;

  mutable absl::Mutex mu_;
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  ::tally::v1::DatabaseSourceStatus status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_SIDECAR_DATABASE_SOURCE_H_
