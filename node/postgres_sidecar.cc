#include "node/postgres_sidecar.h"

#include "node/postgres_settings.h"

namespace tally {
namespace node {

PostgresStatusSource::PostgresStatusSource(const PostgresSidecar* sidecar,
                                           const std::string& conninfo)
    : sidecar_(sidecar), masked_conninfo_(MaskConninfo(conninfo)) {}

void PostgresStatusSource::FillStatus(v1::StatusResponse* response) {
  v1::PostgresStatus* status = response->mutable_postgres();
  *status = sidecar_->status();
  // Whatever the sidecar put there, the node shows its own masked copy: a
  // password must not reach a status reader by any path.
  status->set_database(masked_conninfo_);
}

PostgresSidecarFactory DefaultPostgresSidecarFactory() {
  // pg::Sidecar (pg/sidecar.h) is not in this build yet: a node asked for
  // --postgres refuses to start, saying so (node_server.cc).
  return nullptr;
}

}  // namespace node
}  // namespace tally
