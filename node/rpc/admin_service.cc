#include "node/rpc/admin_service.h"

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "node/client/grpc_status.h"
#include "node/client/wire.h"
#include "node/observe/log.h"
#include "node/observe/process_stats.h"
#include "node/rpc/internal/unary.h"
#include "node/rpc/internal/write_stream.h"
#include "storage/names.h"
#include "tree/status_macros.h"

namespace tally {
namespace node {
namespace {

using internal::FinishNow;
using internal::FinishOnPool;
using internal::Overloaded;

// Keyspace and key of a single-row call. Size limits are the store's: its
// errors name them.
absl::Status ValidateRowAddress(const std::string& keyspace,
                                const std::string& key) {
  TALLY_RETURN_IF_ERROR(storage::ValidateKeyspaceName(keyspace));
  if (key.empty()) {
    return absl::InvalidArgumentError("key is empty; keys need 1 byte");
  }
  return absl::OkStatus();
}

// The key of a Put/Get/Delete on a PostgreSQL table: its key_values (the
// primary key as text). An empty string is a valid text key value, so only
// their presence is checked here; TableRows checks their count against the
// table's key and their types.
absl::StatusOr<std::vector<std::string>> TableKey(
    const std::string& keyspace,
    const google::protobuf::RepeatedPtrField<std::string>& key_values) {
  if (key_values.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s is a PostgreSQL table: address its rows by their primary key "
        "values as text (key_values; tally get %s KEY...)",
        keyspace, keyspace));
  }
  return std::vector<std::string>(key_values.begin(), key_values.end());
}

// Several key values address a PostgreSQL table's key columns; a keyspace
// of the store takes one key.
absl::Status CheckOneKey(
    const std::string& keyspace,
    const google::protobuf::RepeatedPtrField<std::string>& key_values) {
  if (key_values.size() <= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "keyspace '%s' takes one KEY, not %d: several key values are for the "
      "primary key of a PostgreSQL table (tallyd --table)",
      keyspace, key_values.size()));
}

// A local write of one mutation; returns the version the store gave it.
absl::Status WriteOne(storage::Store& store, storage::Mutation mutation,
                      v1::Version* version) {
  storage::WriteRequest write;
  write.mutations.push_back(std::move(mutation));
  TALLY_ASSIGN_OR_RETURN(storage::WriteResult result,
                         store.Write(std::move(write)));
  // The backend did not take it (a keyspace being built, a row its
  // database refused): the client learns why.
  TALLY_RETURN_IF_ERROR(storage::RejectionError(result));
  if (result.versions.empty()) {
    return absl::InternalError("the store returned no version for a write");
  }
  ToProto(result.versions[0], version);
  return absl::OkStatus();
}

// ------------------------------------------------------------------ Load

// Bulk local writes: each message is one atomic store write of plain
// key/value rows (internal/write_stream.h has the steps).
class LoadReactor final
    : public internal::WriteStreamReactor<v1::LoadRequest, v1::LoadResponse> {
 public:
  LoadReactor(storage::Store* store, CopyWriteGuard* write_guard,
              WorkerPool* pool, StreamLimiter* limiter,
              grpc::CallbackServerContext* context, grpc::ByteBuffer* out)
      : WriteStreamReactor(pool, "load", out),
        store_(store),
        write_guard_(write_guard) {
    Start(limiter, context);
  }

 private:
  absl::Status CheckMessage(const v1::LoadRequest& request) override {
    if (static_cast<size_t>(request.rows_size()) > kMaxRowsPerMessage) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("load message has %d rows; the limit is %d per "
                          "message",
                          request.rows_size(), kMaxRowsPerMessage));
    }
    for (const v1::Row& row : request.rows()) {
      if (row.has_version() || row.deleted()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "row '%s' carries a version or a delete flag; load takes plain "
            "key/value rows",
            absl::CHexEscape(row.key().substr(0, 64))));
      }
    }
    return absl::OkStatus();
  }

  absl::Status WriteMessage(v1::LoadRequest& request) override {
    if (request.rows_size() == 0) return absl::OkStatus();
    if (write_guard_ != nullptr) {
      TALLY_RETURN_IF_ERROR(write_guard_->Admit(request.rows_size()));
    }
    storage::WriteRequest write;
    write.mutations.reserve(request.rows_size());
    for (v1::Row& row : *request.mutable_rows()) {
      write.mutations.push_back(
          storage::Mutation::Put(keyspace(), std::move(*row.mutable_key()),
                                 std::move(*row.mutable_value())));
    }
    TALLY_ASSIGN_OR_RETURN(storage::WriteResult result,
                           store_->Write(std::move(write)));
    TALLY_RETURN_IF_ERROR(storage::RejectionError(result));
    response().set_rows(response().rows() + result.applied.size());
    return absl::OkStatus();
  }

  std::string DescribeCommitted() const override {
    return absl::StrFormat("%d rows", response().rows());
  }

  storage::Store* const store_;
  CopyWriteGuard* const write_guard_;
};

}  // namespace

AdminService::AdminService(storage::Store* store, WorkerPool* pool,
                           std::vector<StatusSource*> status_sources,
                           StreamLimiter* limiter, DiffRunner* diff_runner,
                           const TableRows* table_rows,
                           PostgresSidecar* sidecar, PeerControl* peer_control,
                           SyncRunner* sync_runner, CopyWriteGuard* write_guard)
    : store_(store),
      pool_(pool),
      limiter_(limiter),
      diff_runner_(diff_runner),
      table_rows_(table_rows),
      sidecar_(sidecar),
      write_guard_(write_guard),
      peer_control_(peer_control),
      sync_runner_(sync_runner),
      status_sources_(std::move(status_sources)) {}

grpc::ServerUnaryReactor* AdminService::Put(
    grpc::CallbackServerContext* context, const v1::PutRequest* request,
    v1::PutResponse* response) {
  if (table_rows_ != nullptr && table_rows_->Holds(request->keyspace())) {
    absl::StatusOr<std::vector<std::string>> key =
        TableKey(request->keyspace(), request->key_values());
    if (!key.ok()) return FinishNow(context, key.status());
    if (write_guard_ != nullptr) {
      if (absl::Status admitted = write_guard_->Admit(1); !admitted.ok()) {
        return FinishNow(context, admitted);
      }
    }
    return FinishOnPool(
        context, pool_, [this, request, response, key = *std::move(key)] {
          response->set_postgres(true);
          return table_rows_->Put(request->keyspace(), key, request->value());
        });
  }
  absl::Status status = ValidateRowAddress(request->keyspace(), request->key());
  if (status.ok())
    status = CheckOneKey(request->keyspace(), request->key_values());
  if (status.ok() && write_guard_ != nullptr) status = write_guard_->Admit(1);
  if (!status.ok()) return FinishNow(context, status);
  return FinishOnPool(context, pool_, [this, request, response] {
    return WriteOne(*store_,
                    storage::Mutation::Put(request->keyspace(), request->key(),
                                           request->value()),
                    response->mutable_version());
  });
}

grpc::ServerUnaryReactor* AdminService::Get(
    grpc::CallbackServerContext* context, const v1::GetRequest* request,
    v1::GetResponse* response) {
  if (table_rows_ != nullptr && table_rows_->Holds(request->keyspace())) {
    absl::StatusOr<std::vector<std::string>> key =
        TableKey(request->keyspace(), request->key_values());
    if (!key.ok()) return FinishNow(context, key.status());
    return FinishOnPool(
        context, pool_,
        [this, request, response, key = *std::move(key)]() -> absl::Status {
          TALLY_ASSIGN_OR_RETURN(*response->mutable_row_json(),
                                 table_rows_->Get(request->keyspace(), key));
          return absl::OkStatus();
        });
  }
  absl::Status status = ValidateRowAddress(request->keyspace(), request->key());
  if (status.ok())
    status = CheckOneKey(request->keyspace(), request->key_values());
  if (!status.ok()) return FinishNow(context, status);
  return FinishOnPool(
      context, pool_, [this, request, response]() -> absl::Status {
        // kNotFound names the missing keyspace or key.
        TALLY_ASSIGN_OR_RETURN(
            storage::Row row, store_->Get(request->keyspace(), request->key()));
        ToProto(row, response->mutable_row());
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* AdminService::Delete(
    grpc::CallbackServerContext* context, const v1::DeleteRequest* request,
    v1::DeleteResponse* response) {
  if (table_rows_ != nullptr && table_rows_->Holds(request->keyspace())) {
    absl::StatusOr<std::vector<std::string>> key =
        TableKey(request->keyspace(), request->key_values());
    if (!key.ok()) return FinishNow(context, key.status());
    if (write_guard_ != nullptr) {
      if (absl::Status admitted = write_guard_->Admit(1); !admitted.ok()) {
        return FinishNow(context, admitted);
      }
    }
    return FinishOnPool(context, pool_,
                        [this, request, response, key = *std::move(key)] {
                          response->set_postgres(true);
                          return table_rows_->Delete(request->keyspace(), key);
                        });
  }
  absl::Status status = ValidateRowAddress(request->keyspace(), request->key());
  if (status.ok())
    status = CheckOneKey(request->keyspace(), request->key_values());
  if (status.ok() && write_guard_ != nullptr) status = write_guard_->Admit(1);
  if (!status.ok()) return FinishNow(context, status);
  return FinishOnPool(context, pool_, [this, request, response] {
    return WriteOne(
        *store_, storage::Mutation::Delete(request->keyspace(), request->key()),
        response->mutable_version());
  });
}

grpc::ServerReadReactor<grpc::ByteBuffer>* AdminService::Load(
    grpc::CallbackServerContext* context, grpc::ByteBuffer* response) {
  return new LoadReactor(store_, write_guard_, pool_, limiter_, context,
                         response);
}

grpc::ServerUnaryReactor* AdminService::Status(
    grpc::CallbackServerContext* context, const v1::StatusRequest* /*request*/,
    v1::StatusResponse* response) {
  return FinishOnPool(context, pool_, [this, response]() -> absl::Status {
    TALLY_RETURN_IF_ERROR(CollectNodeStatus(store_, status_sources_, response));
    const absl::Status size =
        CheckAnswerSize(response->ByteSizeLong(), "status",
                        "the node holds more keyspaces, peers and "
                        "subscriptions than one answer carries");
    if (!size.ok()) response->Clear();
    return size;
  });
}

grpc::ServerWriteReactor<v1::RunDiffEvent>* AdminService::RunDiff(
    grpc::CallbackServerContext* context, const v1::RunDiffRequest* request) {
  if (diff_runner_ == nullptr) {
    // The generated default: UNIMPLEMENTED.
    return v1::Admin::CallbackService::RunDiff(context, request);
  }
  return diff_runner_->Start(context, request);
}

grpc::ServerUnaryReactor* AdminService::VerifyTables(
    grpc::CallbackServerContext* context,
    const v1::VerifyTablesRequest* request,
    v1::VerifyTablesResponse* response) {
  return FinishOnPool(
      context, pool_, [this, request, response]() -> absl::Status {
        TALLY_RETURN_IF_ERROR(ValidateVerifyTablesRequest(*request));
        if (sidecar_ == nullptr) {
          return absl::FailedPreconditionError(
              "verify: this node keeps its own rows, not a PostgreSQL "
              "database's; "
              "verify its store with `tally verify --data-dir DIR` while it is "
              "stopped");
        }
        TALLY_ASSIGN_OR_RETURN(*response, sidecar_->VerifyTables(*request));
        return CheckAnswerSize(response->ByteSizeLong(), "verify",
                               "ask for fewer keys (max_keys)");
      });
}

grpc::ServerUnaryReactor* AdminService::PausePeer(
    grpc::CallbackServerContext* context, const v1::PeerControlRequest* request,
    v1::PeerControlResponse* response) {
  return SetPaused(context, request, response, /*paused=*/true);
}

grpc::ServerUnaryReactor* AdminService::ResumePeer(
    grpc::CallbackServerContext* context, const v1::PeerControlRequest* request,
    v1::PeerControlResponse* response) {
  return SetPaused(context, request, response, /*paused=*/false);
}

grpc::ServerUnaryReactor* AdminService::SetPaused(
    grpc::CallbackServerContext* context, const v1::PeerControlRequest* request,
    v1::PeerControlResponse* response, bool paused) {
  if (peer_control_ == nullptr) {
    return FinishNow(context, absl::UnimplementedError(
                                  "this node runs no sessions with peers"));
  }
  // Cheap (a lookup under the scheduler's lock): answered in the reaction.
  absl::StatusOr<v1::PeerControlResponse> done =
      peer_control_->SetPaused(request->peer(), paused);
  if (done.ok()) *response = *std::move(done);
  return FinishNow(context, done.status());
}

grpc::ServerUnaryReactor* AdminService::DropKeyspace(
    grpc::CallbackServerContext* context,
    const v1::DropKeyspaceRequest* request,
    v1::DropKeyspaceResponse* response) {
  absl::Status status = storage::ValidateKeyspaceName(request->keyspace());
  if (status.ok() && table_rows_ != nullptr) {
    status = absl::FailedPreconditionError(absl::StrFormat(
        "node %s is a sidecar to PostgreSQL: its keyspaces are the tables "
        "its configuration names; to stop keeping '%s', remove its table "
        "from `tables` and restart the node",
        store_->node_name(), request->keyspace()));
  }
  if (status.ok() && write_guard_ != nullptr) status = write_guard_->Admit(1);
  if (!status.ok()) return FinishNow(context, status);
  return FinishOnPool(context, pool_, [this, request, response] {
    absl::StatusOr<uint64_t> removed =
        store_->DropKeyspace(request->keyspace());
    if (!removed.ok()) return removed.status();
    response->set_rows_removed(*removed);
    LogInfo("keyspace dropped",
            {{"keyspace", request->keyspace()}, {"rows_removed", *removed}});
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AdminService::UndropKeyspace(
    grpc::CallbackServerContext* context,
    const v1::UndropKeyspaceRequest* request, v1::UndropKeyspaceResponse*) {
  absl::Status status = storage::ValidateKeyspaceName(request->keyspace());
  if (status.ok() && write_guard_ != nullptr) status = write_guard_->Admit(1);
  if (!status.ok()) return FinishNow(context, status);
  return FinishOnPool(context, pool_, [this, request] {
    TALLY_RETURN_IF_ERROR(store_->UndropKeyspace(request->keyspace()));
    LogInfo("keyspace drop undone", {{"keyspace", request->keyspace()}});
    return absl::OkStatus();
  });
}

grpc::ServerWriteReactor<v1::SyncEvent>* AdminService::Sync(
    grpc::CallbackServerContext* context, const v1::SyncRequest* request) {
  if (sync_runner_ == nullptr) {
    // The generated default: UNIMPLEMENTED.
    return v1::Admin::CallbackService::Sync(context, request);
  }
  return sync_runner_->Start(context, request);
}

absl::Status CollectNodeStatus(storage::Store* store,
                               const std::vector<StatusSource*>& status_sources,
                               v1::StatusResponse* response) {
  response->set_node_name(store->node_name());
  response->set_epoch(store->epoch());
  response->set_last_sequence(store->last_sequence());
  response->set_ties_resolved(store->ties_resolved());
  // Best effort: a /proc that cannot be read leaves the process empty
  // rather than failing the status.
  ReadProcessStats("/proc/self", response->mutable_process()).IgnoreError();
  {
    const storage::RowFilterStats stats = store->row_filter_stats();
    v1::RowFilterStatus* filter = response->mutable_row_filter();
    filter->set_rows_read(stats.rows_read);
    filter->set_reads_skipped(stats.reads_skipped);
    filter->set_keyspaces(stats.keyspaces);
    filter->set_built(stats.built);
    filter->set_memory_bytes(stats.memory_bytes);
  }
  if (const absl::Status writable = store->write_status(); !writable.ok()) {
    response->set_store_write_error(std::string(writable.message()));
  }
  for (const storage::KeyspaceInfo& info : store->ListKeyspaces()) {
    absl::StatusOr<std::unique_ptr<tree::TreeView>> listed =
        store->NewTreeView(info.name);
    // Dropped since it was listed.
    if (absl::IsNotFound(listed.status())) continue;
    TALLY_ASSIGN_OR_RETURN(std::unique_ptr<tree::TreeView> view,
                           std::move(listed));
    v1::KeyspaceSummary* summary = response->add_keyspaces();
    TALLY_RETURN_IF_ERROR(
        SummaryToProto(*view, info.name, /*top_levels=*/0, summary));
    summary->set_root_changes(info.root_changes);
  }
  for (const storage::DroppedKeyspaceInfo& dropped :
       store->ListDroppedKeyspaces()) {
    v1::DroppedKeyspace* out = response->add_dropped_keyspaces();
    out->set_name(dropped.name);
    out->set_dropped_unix_ms(static_cast<uint64_t>(dropped.dropped_unix_ms));
  }
  for (const storage::OriginRowCount& origin : store->OriginRowCounts()) {
    v1::OriginRows* row = response->add_origins();
    row->set_origin(origin.origin);
    row->set_rows(origin.rows);
  }
  for (StatusSource* source : status_sources) source->FillStatus(response);
  return absl::OkStatus();
}

}  // namespace node
}  // namespace tally
