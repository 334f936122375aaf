// The MariaDB sidecar (mariadb/sidecar/sidecar.h) behind the node's sidecar
// interface (node/sidecar/postgres_sidecar.h), so that NodeServer starts,
// reports and stops a sidecar to MariaDB exactly as one to PostgreSQL. Its
// status goes into the same PostgresStatus message, with engine "mariadb"
// and its GTID positions in the fields of their own.
#ifndef TALLY_NODE_SIDECAR_MARIADB_SIDECAR_H_
#define TALLY_NODE_SIDECAR_MARIADB_SIDECAR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "node/config/config.h"
#include "node/sidecar/postgres_sidecar.h"

namespace tally {
namespace node {

// Prepares the sidecar for `config` (config.mariadb and config.tables
// set): checks the server and the tables. Errors name the fix.
absl::StatusOr<std::unique_ptr<PostgresSidecar>> MakeMariaDbSidecar(
    const NodeConfig& config);

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_SIDECAR_MARIADB_SIDECAR_H_
