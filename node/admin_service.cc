#include "node/admin_service.h"

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "node/grpc_status.h"
#include "node/internal/unary.h"
#include "node/wire.h"
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

// A local write of one mutation; returns the version the store gave it.
absl::Status WriteOne(storage::Store& store, storage::Mutation mutation,
                      v1::Version* version) {
  storage::WriteRequest write;
  write.mutations.push_back(std::move(mutation));
  TALLY_ASSIGN_OR_RETURN(storage::WriteResult result,
                         store.Write(std::move(write)));
  if (result.versions.empty()) {
    return absl::InternalError("the store returned no version for a write");
  }
  ToProto(result.versions[0], version);
  return absl::OkStatus();
}

// ------------------------------------------------------------------ Load

// Bulk local writes: each message is one atomic store write.
//
// Steps:
//   Read (reaction): OnReadDone checks the message (keyspace, count, plain
//     key/value rows) and schedules Apply; at the end of the stream it
//     finishes with the number of rows written.
//   Apply (pool): writes the rows and starts the next read. The first error
//     finishes the call; earlier messages stay written, the failed one is
//     not written at all.
// Steps never overlap, so the fields below need no lock.
class LoadReactor final : public grpc::ServerReadReactor<v1::LoadRequest> {
 public:
  LoadReactor(storage::Store* store, WorkerPool* pool,
              v1::LoadResponse* response)
      : store_(store), pool_(pool), response_(response) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // End of the stream (or a cancelled call, which ignores the status).
      Finish(grpc::Status::OK);
      return;
    }
    absl::Status status = Check();
    if (!status.ok()) {
      Finish(ToGrpcStatus(status));
      return;
    }
    if (!pool_->Schedule([this] { Apply(); })) Finish(Overloaded());
  }

  void OnDone() override { delete this; }

 private:
  absl::Status Check() {
    if (keyspace_.empty()) {
      if (request_.keyspace().empty()) {
        return absl::InvalidArgumentError(
            "the first message of a load must name the keyspace");
      }
      TALLY_RETURN_IF_ERROR(storage::ValidateKeyspaceName(request_.keyspace()));
      keyspace_ = request_.keyspace();
    } else if (!request_.keyspace().empty() &&
               request_.keyspace() != keyspace_) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "a load carries one keyspace: it began with '%s' and a later "
          "message names '%s'",
          keyspace_, absl::CHexEscape(request_.keyspace())));
    }
    if (static_cast<size_t>(request_.rows_size()) > kMaxRowsPerMessage) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("load message has %d rows; the limit is %d per "
                          "message",
                          request_.rows_size(), kMaxRowsPerMessage));
    }
    for (const v1::Row& row : request_.rows()) {
      if (row.has_version() || row.deleted()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "row '%s' carries a version or a delete flag; load takes plain "
            "key/value rows",
            absl::CHexEscape(row.key().substr(0, 64))));
      }
    }
    return absl::OkStatus();
  }

  void Apply() {
    absl::Status status = Write();
    if (!status.ok()) {
      Finish(ToGrpcStatus(status));
      return;
    }
    request_.Clear();
    StartRead(&request_);
  }

  absl::Status Write() {
    if (request_.rows_size() == 0) return absl::OkStatus();
    storage::WriteRequest write;
    write.mutations.reserve(request_.rows_size());
    for (v1::Row& row : *request_.mutable_rows()) {
      write.mutations.push_back(
          storage::Mutation::Put(keyspace_, std::move(*row.mutable_key()),
                                 std::move(*row.mutable_value())));
    }
    TALLY_ASSIGN_OR_RETURN(storage::WriteResult result,
                           store_->Write(std::move(write)));
    response_->set_rows(response_->rows() + result.applied.size());
    return absl::OkStatus();
  }

  // Constant after construction.
  storage::Store* const store_;
  WorkerPool* const pool_;
  v1::LoadResponse* const response_;

  // Used by one step at a time (see above).
  std::string keyspace_;  // from the first message
  v1::LoadRequest request_;
};

}  // namespace

AdminService::AdminService(storage::Store* store, WorkerPool* pool,
                           StatusSource* status_source)
    : store_(store), pool_(pool), status_source_(status_source) {}

grpc::ServerUnaryReactor* AdminService::Put(
    grpc::CallbackServerContext* context, const v1::PutRequest* request,
    v1::PutResponse* response) {
  absl::Status status = ValidateRowAddress(request->keyspace(), request->key());
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
  absl::Status status = ValidateRowAddress(request->keyspace(), request->key());
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
  absl::Status status = ValidateRowAddress(request->keyspace(), request->key());
  if (!status.ok()) return FinishNow(context, status);
  return FinishOnPool(context, pool_, [this, request, response] {
    return WriteOne(
        *store_, storage::Mutation::Delete(request->keyspace(), request->key()),
        response->mutable_version());
  });
}

grpc::ServerReadReactor<v1::LoadRequest>* AdminService::Load(
    grpc::CallbackServerContext* /*context*/, v1::LoadResponse* response) {
  return new LoadReactor(store_, pool_, response);
}

grpc::ServerUnaryReactor* AdminService::Status(
    grpc::CallbackServerContext* context, const v1::StatusRequest* /*request*/,
    v1::StatusResponse* response) {
  return FinishOnPool(context, pool_, [this, response]() -> absl::Status {
    response->set_node_name(store_->node_name());
    response->set_epoch(store_->epoch());
    response->set_last_sequence(store_->last_sequence());
    for (const storage::KeyspaceInfo& info : store_->ListKeyspaces()) {
      TALLY_ASSIGN_OR_RETURN(std::unique_ptr<tree::TreeView> view,
                             store_->NewTreeView(info.name));
      TALLY_RETURN_IF_ERROR(SummaryToProto(*view, info.name, /*top_levels=*/0,
                                           response->add_keyspaces()));
    }
    if (status_source_ != nullptr) status_source_->FillStatus(response);
    return absl::OkStatus();
  });
}

}  // namespace node
}  // namespace tally
