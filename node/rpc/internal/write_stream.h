// WriteStreamReactor: the server side of a client stream of writes (Admin
// Load, Peer PushRows).
//
// The stream is served raw (the services register these methods with
// gRPC's WithRawCallbackMethod_*): each message arrives as bytes and is
// parsed here. gRPC's own parsing reports a message that does not parse
// exactly like the end of the stream, so a corrupt or truncated message in
// the middle used to end the call with OK and silently drop every message
// after it.
//
// Steps, one at a time, so the state needs no lock:
//   Read (reaction): OnReadDone parses message N, checks it — its keyspace
//     (required in the first message; later ones leave it empty or repeat
//     it) and whatever CheckMessage() adds — and schedules the write; at
//     the end of the stream it finishes OK with the subclass's response.
//   Write (pool): WriteMessage() writes the message as one atomic store
//     write, then the next message is read.
// The first error finishes the call: messages written before it stay
// written, the failed one is not written at all. Its status names the
// message ("message 2 of the load: ...") and what the messages before it
// committed, since a failed call carries no response.
#ifndef TALLY_NODE_RPC_INTERNAL_WRITE_STREAM_H_
#define TALLY_NODE_RPC_INTERNAL_WRITE_STREAM_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "node/client/grpc_status.h"
#include "node/rpc/internal/unary.h"
#include "node/rpc/stream_limiter.h"
#include "node/worker_pool.h"
#include "storage/store.h"

namespace tally {
namespace node {
namespace internal {

template <typename Request, typename Response>
class WriteStreamReactor : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 protected:
  // `what` names the stream in error messages ("load", "push"); the call's
  // answer is serialized into `out` when the stream ends well.
  WriteStreamReactor(WorkerPool* pool, const char* what, grpc::ByteBuffer* out)
      : pool_(pool), what_(what), out_(out) {}

  // Subclasses call this last in their constructor: reading may call the
  // virtual methods below from another thread at once. Admits the stream
  // through `limiter` (null: no limit) or finishes it at once.
  void Start(StreamLimiter* limiter, grpc::CallbackServerContext* context) {
    if (limiter != nullptr) {
      absl::StatusOr<std::unique_ptr<StreamTicket>> ticket =
          limiter->Admit(context, what_);
      if (!ticket.ok()) {
        Finish(ToGrpcStatus(ticket.status()));
        return;
      }
      ticket_ = std::move(*ticket);
    }
    StartRead(&buffer_);
  }

  // Checks a message beyond its keyspace, on the reaction thread.
  virtual absl::Status CheckMessage(const Request& request) = 0;
  // Writes a message on the pool; may move out of it. Adds what it
  // committed to response().
  virtual absl::Status WriteMessage(Request& request) = 0;
  // What the messages written so far committed, for an error message
  // ("20000 rows").
  virtual std::string DescribeCommitted() const = 0;

  // The stream's keyspace, from its first message.
  const std::string& keyspace() const { return keyspace_; }
  Response& response() { return response_; }
  const Response& response() const { return response_; }

 private:
  void OnReadDone(bool ok) override {
    if (!ok) {
      // End of the stream (or a cancelled call, which ignores the status).
      FinishWithResponse();
      return;
    }
    ++message_number_;
    absl::Status status = Parse();
    if (status.ok()) status = CheckKeyspace();
    if (status.ok()) status = CheckMessage(request_);
    if (!status.ok()) {
      FinishWithError(status);
      return;
    }
    if (!pool_->Schedule([this] { Write(); }, WorkerPool::Lane::kBulk)) {
      FinishWithError(absl::ResourceExhaustedError(
          std::string(Overloaded().error_message())));
    }
  }

  void OnDone() override { delete this; }

  absl::Status Parse() {
    request_.Clear();
    const grpc::Status parsed =
        grpc::SerializationTraits<Request>::Deserialize(&buffer_, &request_);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "it is not a valid %s (truncated or corrupt protobuf)",
          Request::descriptor()->full_name()));
    }
    return absl::OkStatus();
  }

  absl::Status CheckKeyspace() {
    if (keyspace_.empty()) {
      if (request_.keyspace().empty()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "the first message of a %s must name the keyspace", what_));
      }
      absl::Status valid = storage::ValidateKeyspaceName(request_.keyspace());
      if (!valid.ok()) return valid;
      keyspace_ = request_.keyspace();
    } else if (!request_.keyspace().empty() &&
               request_.keyspace() != keyspace_) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "a %s carries one keyspace: it began with '%s' and a later "
          "message names '%s'",
          what_, keyspace_, absl::CHexEscape(request_.keyspace())));
    }
    return absl::OkStatus();
  }

  void Write() {
    absl::Status status = WriteMessage(request_);
    if (!status.ok()) {
      FinishWithError(status);
      return;
    }
    StartRead(&buffer_);
  }

  void FinishWithResponse() {
    bool own_buffer = false;
    const grpc::Status serialized =
        grpc::SerializationTraits<Response>::Serialize(response_, out_,
                                                       &own_buffer);
    Finish(serialized);
  }

  // The error, with which message failed and what was committed before it.
  void FinishWithError(const absl::Status& status) {
    const int64_t before = message_number_ - 1;
    const std::string committed =
        before == 0
            ? std::string("nothing was committed")
            : absl::StrFormat("the %d message%s before it committed %s", before,
                              before == 1 ? "" : "s", DescribeCommitted());
    Finish(ToGrpcStatus(absl::Status(
        status.code(),
        absl::StrFormat("message %d of the %s: %s; %s", message_number_, what_,
                        status.message(), committed))));
  }

  // Constant after construction.
  WorkerPool* const pool_;
  const char* const what_;
  grpc::ByteBuffer* const out_;
  // Used by one step at a time.
  std::unique_ptr<StreamTicket> ticket_;
  int64_t message_number_ = 0;  // of the message being handled, from 1
  std::string keyspace_;
  grpc::ByteBuffer buffer_;
  Request request_;
  Response response_;
};

}  // namespace internal
}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_RPC_INTERNAL_WRITE_STREAM_H_
