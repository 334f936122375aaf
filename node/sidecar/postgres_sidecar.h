// PostgresSidecar: what a node needs of its sidecar to a PostgreSQL database
// (tallyd --postgres), as an interface, so that NodeServer's start and stop
// order is written (and tested) once, whatever runs the capture behind it.
//
// The one production implementation wraps pg::Sidecar (pg/sidecar/sidecar.h:
// preflight, build, capture, apply); tests give a fake to check the order.
// A node with `postgres` set runs, in this order:
//
//   sidecar = factory(config)        // connects, preflight, table schemas
//   Store::Open(..., backend = sidecar->backend())
//   sidecar->Start(store)            // builds or resumes, then follows
//   ...
//   sidecar->Stop()                  // before the store closes
//
// A factory failure ends the node's start with the sidecar's message (it
// names the fix: wal_level, track_commit_timestamp, REPLICATION, a primary
// key, a free slot), so tallyd exits 1 with it in one line.
//
// Thread-safe: status() is called from any thread while the sidecar runs.
#ifndef TALLY_NODE_SIDECAR_POSTGRES_SIDECAR_H_
#define TALLY_NODE_SIDECAR_POSTGRES_SIDECAR_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "node/config/config.h"
#include "node/observe/status_source.h"
#include "storage/row_backend.h"
#include "tally/v1/tally.pb.h"

namespace tally {
namespace storage {
class Store;
}  // namespace storage

namespace node {

class PostgresSidecar {
 public:
  virtual ~PostgresSidecar() = default;

  // The backend the store opens with: the rows live in the database.
  virtual std::shared_ptr<storage::RowBackend> backend() = 0;
  // Builds or resumes, then follows the database, in threads of its own;
  // returns at once. Connection failures are retried and shown in status,
  // never returned. REQUIRES: `store` was opened with backend() and
  // outlives Stop().
  virtual absl::Status Start(storage::Store* store) = 0;
  // Stops and joins what Start began. Idempotent.
  virtual void Stop() = 0;
  // The sidecar's status, a copy; `database` may be left empty (the node
  // fills it, masked).
  virtual ::tally::v1::PostgresStatus status() const = 0;
  // Admin.VerifyTables (tally/v1/tally.proto): catches up with the
  // database, then compares each requested table with the index. Blocks
  // for the scans. kFailedPrecondition when not caught up in time (or the
  // sidecar failed), kNotFound for a keyspace that is not a kept table.
  // REQUIRES: `request` validated (ValidateVerifyTablesRequest).
  virtual absl::StatusOr<::tally::v1::VerifyTablesResponse> VerifyTables(
      const ::tally::v1::VerifyTablesRequest& request) = 0;
};

// kInvalidArgument naming the field for a keyspace that is no keyspace
// name, over 100,000 keys, or a catch-up over an hour.
absl::Status ValidateVerifyTablesRequest(
    const ::tally::v1::VerifyTablesRequest& request);

// Reports a sidecar in Admin.Status and on the metrics page: its status,
// with the database's connection string (password masked).
class PostgresStatusSource final : public StatusSource {
 public:
  // `sidecar` must outlive this.
  PostgresStatusSource(const PostgresSidecar* sidecar,
                       const std::string& conninfo);
  void FillStatus(::tally::v1::StatusResponse* response) override;

 private:
  const PostgresSidecar* const sidecar_;
  const std::string masked_conninfo_;
};

// Prepares the sidecar for `config` (config.postgres and config.tables set):
// connects, checks the database, reads the tables' schemas. Errors name the
// fix.
using PostgresSidecarFactory =
    std::function<absl::StatusOr<std::unique_ptr<PostgresSidecar>>(
        const NodeConfig& config)>;

// The factory tallyd uses; null when this build has no sidecar to give
// (NodeServer then refuses `postgres` with a message saying so).
PostgresSidecarFactory DefaultPostgresSidecarFactory();

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_SIDECAR_POSTGRES_SIDECAR_H_
