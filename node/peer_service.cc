#include "node/peer_service.h"

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "node/grpc_status.h"
#include "node/internal/unary.h"
#include "node/internal/write_stream.h"
#include "node/wire.h"
#include "tree/status_macros.h"

namespace tally {
namespace node {
namespace {

using internal::FinishNow;
using internal::FinishOnPool;
using internal::Overloaded;

// The store's kNotFound does not say which node answered; a person reading
// the error on the other side of a session needs to know.
absl::Status KeyspaceNotFound(const storage::Store& store,
                              absl::string_view keyspace) {
  return absl::NotFoundError(
      absl::StrFormat("keyspace '%s' does not exist on node '%s'", keyspace,
                      store.node_name()));
}

absl::StatusOr<std::unique_ptr<tree::TreeView>> OpenView(
    storage::Store& store, absl::string_view keyspace) {
  absl::StatusOr<std::unique_ptr<tree::TreeView>> view =
      store.NewTreeView(keyspace);
  if (absl::IsNotFound(view.status())) {
    return KeyspaceNotFound(store, keyspace);
  }
  return view;
}

absl::Status HandshakeOnPool(storage::Store& store,
                             const HandshakeObserver& observer,
                             const std::string& peer_address,
                             const v1::HandshakeRequest& request,
                             v1::HandshakeResponse* response) {
  const int top_levels = static_cast<int>(request.top_levels());
  std::vector<std::string> names;
  if (request.keyspaces().empty()) {
    for (const storage::KeyspaceInfo& info : store.ListKeyspaces()) {
      names.push_back(info.name);
    }
  } else {
    names.assign(request.keyspaces().begin(), request.keyspaces().end());
  }
  response->set_protocol_version(kProtocolVersion);
  response->set_node_name(store.node_name());
  response->set_epoch(store.epoch());
  response->set_clock_unix_ms(store.clock().PhysicalMillis());
  for (const std::string& name : names) {
    absl::StatusOr<std::unique_ptr<tree::TreeView>> view =
        store.NewTreeView(name);
    // A keyspace the caller asks about and this node lacks is left out of
    // the answer rather than failing the handshake.
    if (absl::IsNotFound(view.status())) continue;
    TALLY_RETURN_IF_ERROR(view.status());
    TALLY_RETURN_IF_ERROR(
        SummaryToProto(**view, name, top_levels, response->add_keyspaces()));
  }
  if (observer != nullptr && !request.node_name().empty()) {
    observer(peer_address, request.node_name(), request.epoch());
  }
  return absl::OkStatus();
}

absl::Status ExchangeOnPool(storage::Store& store, absl::string_view keyspace,
                            const tree::ViewRequest& query,
                            v1::ExchangeResponse* response) {
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<tree::TreeView> view,
                         OpenView(store, keyspace));
  TALLY_ASSIGN_OR_RETURN(tree::ViewResponse answer, view->Exchange(query));
  ToProto(answer, response);
  return absl::OkStatus();
}

absl::Status ValidateHandshake(const v1::HandshakeRequest& request) {
  if (request.protocol_version() != kProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "peer speaks protocol version %d; this node speaks version %d",
        request.protocol_version(), kProtocolVersion));
  }
  if (request.top_levels() >
      static_cast<uint32_t>(tree::kMaxSummaryTopLevels)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "handshake asks for %d levels below the root; the limit is %d",
        request.top_levels(), tree::kMaxSummaryTopLevels));
  }
  if (!request.node_name().empty()) {
    TALLY_RETURN_IF_ERROR(storage::ValidateNodeName(request.node_name()));
  }
  for (const std::string& name : request.keyspaces()) {
    TALLY_RETURN_IF_ERROR(storage::ValidateKeyspaceName(name));
  }
  return absl::OkStatus();
}

// ------------------------------------------------------------------ Scan

// Streams the entries of a set of token ranges from one snapshot.
//
// Steps:
//   Start (reaction): validate the request; schedule Run.
//   Run (one pool task for the whole scan): the view's Scan fills message_;
//     each time it reaches kStreamChunkBytes, Send writes it and waits for
//     OnWriteDone. The scan holds its snapshot, so it cannot be paused and
//     resumed on another task; it blocks its pool thread instead, and a
//     cancelled call wakes it and ends the scan.
//   Finish: the last partial message goes out with the status.
class ScanReactor final : public grpc::ServerWriteReactor<v1::ScanResponse> {
 public:
  ScanReactor(storage::Store* store, WorkerPool* pool,
              const v1::ScanRequest* request)
      : store_(store), pool_(pool), request_(request) {}

  void Start() {
    absl::Status status = Validate();
    if (!status.ok()) {
      Finish(ToGrpcStatus(status));
      return;
    }
    if (!pool_->Schedule([this] { Run(); })) Finish(Overloaded());
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    write_pending_ = false;
    write_ok_ = ok;
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
  }

  void OnDone() override { delete this; }

 private:
  absl::Status Validate() {
    TALLY_RETURN_IF_ERROR(storage::ValidateKeyspaceName(request_->keyspace()));
    if (static_cast<size_t>(request_->ranges_size()) > kMaxScanRanges) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("scan names %d ranges; the limit is %d",
                          request_->ranges_size(), kMaxScanRanges));
    }
    ranges_.reserve(request_->ranges_size());
    for (const v1::NodeRef& range : request_->ranges()) {
      TALLY_ASSIGN_OR_RETURN(tree::NodeRef ref, FromProto(range));
      ranges_.push_back(ref);
    }
    return absl::OkStatus();
  }

  void Run() {
    absl::StatusOr<std::unique_ptr<tree::TreeView>> view =
        OpenView(*store_, request_->keyspace());
    if (!view.ok()) {
      Finish(ToGrpcStatus(view.status()));
      return;
    }
    OriginDictionary origins;
    size_t bytes = 0;
    const absl::Status status = (*view)->Scan(
        ranges_, [&](const tree::RowEntry& entry) -> absl::Status {
          ToProto(entry, &origins, message_.add_entries());
          bytes += tree::WireSize(entry);
          if (bytes < kStreamChunkBytes) return absl::OkStatus();
          origins.MoveTo(message_.mutable_origins());
          bytes = 0;
          return Send();
        });
    view->reset();
    if (!status.ok()) {
      Finish(ToGrpcStatus(status));
      return;
    }
    if (message_.entries_size() == 0) {
      Finish(grpc::Status::OK);
      return;
    }
    origins.MoveTo(message_.mutable_origins());
    StartWriteAndFinish(&message_, grpc::WriteOptions(), grpc::Status::OK);
  }

  // Writes message_ and waits until the write completes or the call is
  // cancelled. Returns kCancelled when the message could not be delivered;
  // message_ must then be left alone, as the write may still be outstanding.
  absl::Status Send() ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      write_pending_ = true;
    }
    StartWrite(&message_);
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](ScanReactor* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) {
          return !r->write_pending_ || r->cancelled_;
        },
        this));
    if (cancelled_ || !write_ok_) {
      return absl::CancelledError("scan cancelled: the caller went away");
    }
    message_.Clear();
    return absl::OkStatus();
  }

  // Constant after construction.
  storage::Store* const store_;
  WorkerPool* const pool_;
  const v1::ScanRequest* const request_;

  // Set by Validate, then read by the one Run task.
  std::vector<tree::NodeRef> ranges_;
  // Owned by the Run task; read by gRPC while a write is pending.
  v1::ScanResponse message_;

  absl::Mutex mu_;
  bool write_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool write_ok_ ABSL_GUARDED_BY(mu_) = true;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

// ------------------------------------------------------------- FetchRows

// Streams the rows of a list of keys, one message of about kStreamChunkBytes
// per pool task.
//
// Steps:
//   Start (reaction): validate; schedule NextChunk.
//   NextChunk (pool): on the first chunk, check the keyspace exists; read
//     keys from next_key_ until the message is full; write it, or write it
//     and finish when the keys are exhausted.
//   OnWriteDone (reaction): schedule the next chunk, or finish on a broken
//     stream.
// Steps never overlap, so the fields below need no lock.
class FetchRowsReactor final
    : public grpc::ServerWriteReactor<v1::FetchRowsResponse> {
 public:
  FetchRowsReactor(storage::Store* store, WorkerPool* pool,
                   const v1::FetchRowsRequest* request)
      : store_(store), pool_(pool), request_(request) {}

  void Start() {
    absl::Status status = Validate();
    if (!status.ok()) {
      Finish(ToGrpcStatus(status));
      return;
    }
    ScheduleNextChunk();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                          "fetch cancelled: the caller went away"));
      return;
    }
    ScheduleNextChunk();
  }

  void OnDone() override { delete this; }

 private:
  absl::Status Validate() const {
    TALLY_RETURN_IF_ERROR(storage::ValidateKeyspaceName(request_->keyspace()));
    if (static_cast<size_t>(request_->keys_size()) > kMaxKeysPerFetch) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("fetch names %d keys; the limit is %d per request",
                          request_->keys_size(), kMaxKeysPerFetch));
    }
    for (int i = 0; i < request_->keys_size(); ++i) {
      if (request_->keys(i).empty()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "key %d of the fetch is empty; keys need 1 byte", i));
      }
    }
    return absl::OkStatus();
  }

  void ScheduleNextChunk() {
    if (!pool_->Schedule([this] { NextChunk(); })) Finish(Overloaded());
  }

  void NextChunk() {
    absl::Status status = FillChunk();
    if (!status.ok()) {
      Finish(ToGrpcStatus(status));
      return;
    }
    if (next_key_ < request_->keys_size()) {
      StartWrite(&message_);
    } else if (message_.rows_size() > 0 || message_.missing_size() > 0) {
      StartWriteAndFinish(&message_, grpc::WriteOptions(), grpc::Status::OK);
    } else {
      Finish(grpc::Status::OK);
    }
  }

  absl::Status FillChunk() {
    if (next_key_ == 0) {
      absl::StatusOr<storage::KeyspaceInfo> info =
          store_->GetKeyspace(request_->keyspace());
      if (absl::IsNotFound(info.status())) {
        return KeyspaceNotFound(*store_, request_->keyspace());
      }
      TALLY_RETURN_IF_ERROR(info.status());
    }
    message_.Clear();
    size_t bytes = 0;
    while (next_key_ < request_->keys_size() && bytes < kStreamChunkBytes) {
      const std::string& key = request_->keys(next_key_++);
      absl::StatusOr<storage::Row> row = store_->Get(request_->keyspace(), key);
      // A damaged row (DATA_LOSS, now marked for repair) is not sent: to
      // the fetcher it is missing here, as it is from this node's tree.
      if (absl::IsNotFound(row.status()) || absl::IsDataLoss(row.status())) {
        message_.add_missing(key);
        bytes += key.size() + 8;
        continue;
      }
      TALLY_RETURN_IF_ERROR(row.status());
      ToProto(*row, message_.add_rows());
      bytes +=
          row->key.size() + row->value.size() + row->version.origin.size() + 32;
    }
    return absl::OkStatus();
  }

  // Constant after construction.
  storage::Store* const store_;
  WorkerPool* const pool_;
  const v1::FetchRowsRequest* const request_;

  // Used by one step at a time (see above).
  int next_key_ = 0;
  v1::FetchRowsResponse message_;
};

// -------------------------------------------------------------- PushRows

// Rows from a peer or a repair: each message is one atomic store write
// under last writer wins or source override (internal/write_stream.h has
// the steps).
class PushRowsReactor final
    : public internal::WriteStreamReactor<v1::PushRowsRequest> {
 public:
  PushRowsReactor(storage::Store* store, WorkerPool* pool,
                  v1::PushRowsResponse* response)
      : WriteStreamReactor(pool, "push"), store_(store), response_(response) {
    Start();
  }

 private:
  absl::Status CheckMessage(const v1::PushRowsRequest& request) override {
    const size_t mutations =
        static_cast<size_t>(request.rows_size() + request.erase_size());
    if (mutations > kMaxRowsPerMessage) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "push message has %d rows and %d erases; the limit is %d per "
          "message",
          request.rows_size(), request.erase_size(), kMaxRowsPerMessage));
    }
    if (request.erase_size() > 0 &&
        request.mode() != v1::APPLY_MODE_SOURCE_OVERRIDE) {
      return absl::InvalidArgumentError(
          "erase is only allowed with APPLY_MODE_SOURCE_OVERRIDE; under last "
          "writer wins, send tombstones");
    }
    return absl::OkStatus();
  }

  absl::Status WriteMessage(v1::PushRowsRequest& request) override {
    storage::WriteRequest write;
    write.mode = request.mode() == v1::APPLY_MODE_SOURCE_OVERRIDE
                     ? storage::ApplyMode::kSourceOverride
                     : storage::ApplyMode::kLastWriterWins;
    write.mutations.reserve(request.rows_size() + request.erase_size());
    for (const v1::Row& row : request.rows()) {
      TALLY_ASSIGN_OR_RETURN(storage::Mutation m,
                             MutationFromProto(keyspace(), row));
      write.mutations.push_back(std::move(m));
    }
    for (const std::string& key : request.erase()) {
      write.mutations.push_back(storage::Mutation::Erase(keyspace(), key));
    }
    if (write.mutations.empty()) return absl::OkStatus();
    TALLY_ASSIGN_OR_RETURN(storage::WriteResult result,
                           store_->Write(std::move(write)));
    const size_t rows = static_cast<size_t>(request.rows_size());
    for (size_t i = 0; i < result.applied.size(); ++i) {
      if (!result.applied[i]) {
        response_->set_ignored(response_->ignored() + 1);
      } else if (i < rows) {
        response_->set_applied(response_->applied() + 1);
      } else {
        response_->set_erased(response_->erased() + 1);
      }
    }
    return absl::OkStatus();
  }

  storage::Store* const store_;
  v1::PushRowsResponse* const response_;
};

}  // namespace

PeerService::PeerService(storage::Store* store, WorkerPool* pool,
                         HandshakeObserver observer, FeedOptions feed_options)
    : store_(store),
      pool_(pool),
      observer_(std::move(observer)),
      feed_(store, feed_options) {}

grpc::ServerWriteReactor<v1::FeedBatch>* PeerService::Subscribe(
    grpc::CallbackServerContext* context, const v1::SubscribeRequest* request) {
  return feed_.Subscribe(context, request);
}

grpc::ServerUnaryReactor* PeerService::Handshake(
    grpc::CallbackServerContext* context, const v1::HandshakeRequest* request,
    v1::HandshakeResponse* response) {
  absl::Status status = ValidateHandshake(*request);
  if (!status.ok()) return FinishNow(context, status);
  std::string peer_address;
  if (observer_ != nullptr && !request->node_name().empty()) {
    peer_address = context->peer();
  }
  return FinishOnPool(
      context, pool_,
      [this, peer_address = std::move(peer_address), request, response] {
        return HandshakeOnPool(*store_, observer_, peer_address, *request,
                               response);
      });
}

grpc::ServerUnaryReactor* PeerService::Exchange(
    grpc::CallbackServerContext* context, const v1::ExchangeRequest* request,
    v1::ExchangeResponse* response) {
  absl::Status status = storage::ValidateKeyspaceName(request->keyspace());
  if (!status.ok()) return FinishNow(context, status);
  absl::StatusOr<tree::ViewRequest> view_request = FromProto(*request);
  if (!view_request.ok()) return FinishNow(context, view_request.status());
  return FinishOnPool(
      context, pool_,
      [this, request, response, query = std::move(*view_request)] {
        return ExchangeOnPool(*store_, request->keyspace(), query, response);
      });
}

grpc::ServerWriteReactor<v1::ScanResponse>* PeerService::Scan(
    grpc::CallbackServerContext* /*context*/, const v1::ScanRequest* request) {
  auto* reactor = new ScanReactor(store_, pool_, request);
  reactor->Start();
  return reactor;
}

grpc::ServerWriteReactor<v1::FetchRowsResponse>* PeerService::FetchRows(
    grpc::CallbackServerContext* /*context*/,
    const v1::FetchRowsRequest* request) {
  auto* reactor = new FetchRowsReactor(store_, pool_, request);
  reactor->Start();
  return reactor;
}

grpc::ServerReadReactor<v1::PushRowsRequest>* PeerService::PushRows(
    grpc::CallbackServerContext* /*context*/, v1::PushRowsResponse* response) {
  return new PushRowsReactor(store_, pool_, response);
}

}  // namespace node
}  // namespace tally
