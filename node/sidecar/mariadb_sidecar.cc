#include "node/sidecar/mariadb_sidecar.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mariadb/sidecar/sidecar.h"
#include "node/observe/log.h"
#include "node/sidecar/verify_tables.h"
#include "tree/status_macros.h"

namespace tally {
namespace node {
namespace {

class MariaDbNodeSidecar final : public PostgresSidecar {
 public:
  explicit MariaDbNodeSidecar(std::unique_ptr<mariadb::Sidecar> sidecar)
      : sidecar_(std::move(sidecar)) {}
  ~MariaDbNodeSidecar() override { sidecar_->Stop(); }

  std::shared_ptr<storage::RowBackend> backend() override {
    return sidecar_->backend();
  }
  absl::Status Start(storage::Store* store) override {
    return sidecar_->Start(store);
  }
  void Stop() override { sidecar_->Stop(); }

  v1::PostgresStatus status() const override {
    const mariadb::SidecarStatus s = sidecar_->status();
    v1::PostgresStatus out;
    out.set_engine("mariadb");
    out.set_phase(s.phase);
    out.set_last_error(s.last_error);
    out.set_server_id(s.server_id);
    out.set_indexed_gtid(s.indexed_gtid);
    out.set_server_gtid(s.server_gtid);
    out.set_capture_lag_seconds(absl::ToDoubleSeconds(s.capture_lag));
    for (const mariadb::SidecarKeyspaceStatus& k : s.keyspaces) {
      v1::PostgresTable* t = out.add_tables();
      t->set_keyspace(k.name);
      t->set_state(k.state);
      t->set_schema_fingerprint(k.fingerprint);
      t->set_rows(k.rows);
      if (!k.trouble.empty()) t->set_trouble(k.trouble);
    }
    out.set_build_rows_done(s.build_rows_done);
    out.set_build_rows_estimated(s.build_rows_estimated);
    out.set_build_rows_per_second(s.build_rows_per_second);
    out.set_build_seconds(absl::ToDoubleSeconds(s.build_elapsed));
    out.set_builds(s.builds);
    out.set_last_rebuild_reason(s.last_rebuild_reason);
    out.set_index_lost(s.index_lost);
    out.set_index_loss_fresh_rows(s.index_loss_fresh_rows);
    out.set_transactions_captured(s.transactions_captured);
    out.set_rows_captured(s.rows_captured);
    out.set_own_transactions_replayed(s.own_transactions_replayed);
    out.set_rows_applied(s.rows_applied);
    out.set_rows_refused(s.rows_refused);
    return out;
  }

  absl::StatusOr<v1::VerifyTablesResponse> VerifyTables(
      const v1::VerifyTablesRequest& request) override {
    std::vector<std::string> kept;
    for (const mariadb::SidecarKeyspaceStatus& k :
         sidecar_->status().keyspaces) {
      kept.push_back(k.name);
    }
    return VerifyKeyspaces(
        request, kept,
        [&](absl::Duration timeout) {
          return sidecar_->AwaitCaughtUp(timeout);
        },
        [&](const std::string& keyspace) {
          return sidecar_->Verify(keyspace);
        });
  }

 private:
  const std::unique_ptr<mariadb::Sidecar> sidecar_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PostgresSidecar>> MakeMariaDbSidecar(
    const NodeConfig& config) {
  mariadb::SidecarOptions options;
  options.url = config.mariadb;
  options.tables = config.tables;
  options.node_name = config.name;
  options.server_id = MariaDbServerId(config);
  options.keyspace_depth = config.default_depth;
  if (!config.test_fault_point.empty()) {
    TALLY_ASSIGN_OR_RETURN(options.fault_points,
                           pg::FaultPoints::Parse(config.test_fault_point));
  }
  options.log = [name = config.name](absl::string_view line) {
    LogInfo(absl::StrCat("mariadb: ", line), {{"name", name}});
  };
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<mariadb::Sidecar> sidecar,
                         mariadb::Sidecar::Prepare(options));
  return std::unique_ptr<PostgresSidecar>(
      new MariaDbNodeSidecar(std::move(sidecar)));
}

}  // namespace node
}  // namespace tally
