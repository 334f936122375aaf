#include "node/sidecar/postgres_sidecar.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "node/config/postgres_settings.h"
#include "node/observe/log.h"
#include "node/sidecar/mariadb_sidecar.h"
#include "node/sidecar/verify_tables.h"
#include "pg/sidecar/sidecar.h"
#include "pg/wire/lsn.h"
#include "storage/names.h"
#include "tree/status_macros.h"

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

namespace {

// The production sidecar: pg::Sidecar, its status in the Status RPC's
// words.
class PgSidecar final : public PostgresSidecar {
 public:
  explicit PgSidecar(std::unique_ptr<pg::Sidecar> sidecar)
      : sidecar_(std::move(sidecar)) {}
  ~PgSidecar() override { sidecar_->Stop(); }

  std::shared_ptr<storage::RowBackend> backend() override {
    return sidecar_->backend();
  }
  absl::Status Start(storage::Store* store) override {
    return sidecar_->Start(store);
  }
  void Stop() override { sidecar_->Stop(); }

  v1::PostgresStatus status() const override {
    const pg::SidecarStatus s = sidecar_->status();
    v1::PostgresStatus out;
    out.set_engine("postgresql");
    out.set_slot(s.slot);
    out.set_publication(s.publication);
    out.set_origin(s.origin);
    out.set_phase(s.phase);
    out.set_last_error(s.last_error);
    out.set_system_identifier(s.system_id == 0 ? ""
                                               : absl::StrCat(s.system_id));
    out.set_received_lsn(pg::FormatLsn(s.received_lsn));
    out.set_confirmed_lsn(pg::FormatLsn(s.confirmed_lsn));
    out.set_confirmed_lsn_bytes(s.confirmed_lsn);
    out.set_slot_lag_bytes(s.slot_lag_bytes);
    out.set_slot_wal_status(s.slot_wal_status);
    out.set_capture_lag_seconds(absl::ToDoubleSeconds(s.capture_lag));
    for (const pg::SidecarKeyspaceStatus& k : s.keyspaces) {
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
    if (s.build_remaining.has_value()) {
      out.set_build_eta_seconds(absl::ToDoubleSeconds(*s.build_remaining));
    }
    out.set_build_seconds(absl::ToDoubleSeconds(s.build_elapsed));
    out.set_transactions_captured(s.transactions_captured);
    out.set_rows_captured(s.rows_captured);
    out.set_own_transactions_replayed(s.own_transactions_replayed);
    out.set_rows_applied(s.rows_applied);
    out.set_rows_refused(s.rows_refused);
    out.set_index_lost(s.index_lost);
    out.set_index_loss_fresh_rows(s.index_loss_fresh_rows);
    return out;
  }

  absl::StatusOr<v1::VerifyTablesResponse> VerifyTables(
      const v1::VerifyTablesRequest& request) override {
    std::vector<std::string> kept;
    for (const pg::SidecarKeyspaceStatus& k : sidecar_->status().keyspaces) {
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
  const std::unique_ptr<pg::Sidecar> sidecar_;
};

}  // namespace

absl::Status ValidateVerifyTablesRequest(
    const v1::VerifyTablesRequest& request) {
  if (!request.keyspace().empty()) {
    if (absl::Status s = storage::ValidateKeyspaceName(request.keyspace());
        !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("verify: bad keyspace: ", s.message()));
    }
  }
  if (request.max_keys() > 100000) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "verify: max_keys is %d; the limit is 100000", request.max_keys()));
  }
  if (request.catch_up_ms() > 3600 * 1000) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "verify: catch_up_ms is %d; the limit is an hour (3600000)",
        request.catch_up_ms()));
  }
  return absl::OkStatus();
}

PostgresSidecarFactory DefaultPostgresSidecarFactory() {
  return [](const NodeConfig& config)
             -> absl::StatusOr<std::unique_ptr<PostgresSidecar>> {
    if (!config.mariadb.empty()) return MakeMariaDbSidecar(config);
    pg::SidecarOptions options;
    options.conninfo = config.postgres;
    options.tables = config.tables;
    options.node_name = config.name;
    options.schema_check_interval = config.pg_schema_check_interval;
    options.keyspace_depth = config.default_depth;
    if (!config.test_fault_point.empty()) {
      absl::StatusOr<std::shared_ptr<pg::FaultPoints>> faults =
          pg::FaultPoints::Parse(config.test_fault_point);
      if (!faults.ok()) return faults.status();
      options.fault_points = *std::move(faults);
    }
    // The sidecar's events (build progress, rebuild reasons, reconnects)
    // go to the node's log.
    options.log = [name = config.name](absl::string_view line) {
      LogInfo(absl::StrCat("postgres: ", line), {{"name", name}});
    };
    absl::StatusOr<std::unique_ptr<pg::Sidecar>> sidecar =
        pg::Sidecar::Prepare(options);
    if (!sidecar.ok()) return sidecar.status();
    return std::unique_ptr<PostgresSidecar>(new PgSidecar(*std::move(sidecar)));
  };
}

}  // namespace node
}  // namespace tally
