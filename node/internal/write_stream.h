// WriteStreamReactor: the server side of a client stream of writes (Admin
// Load, Peer PushRows).
//
// Steps, one at a time, so the state needs no lock:
//   Read (reaction): OnReadDone checks the message — its keyspace (required
//     in the first message; later ones leave it empty or repeat it) and
//     whatever CheckMessage() adds — and schedules the write; at the end of
//     the stream it finishes OK with whatever the subclass put in its
//     response.
//   Write (pool): WriteMessage() writes the message as one atomic store
//     write, then the next message is read.
// The first error finishes the call: messages written before it stay
// written, the failed one is not written at all.
#ifndef TALLY_NODE_INTERNAL_WRITE_STREAM_H_
#define TALLY_NODE_INTERNAL_WRITE_STREAM_H_

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "node/grpc_status.h"
#include "node/internal/unary.h"
#include "node/worker_pool.h"
#include "storage/store.h"

namespace tally {
namespace node {
namespace internal {

template <typename Request>
class WriteStreamReactor : public grpc::ServerReadReactor<Request> {
 protected:
  // `what` names the stream in error messages ("load", "push").
  WriteStreamReactor(WorkerPool* pool, const char* what)
      : pool_(pool), what_(what) {}

  // Subclasses call this last in their constructor: reading may call the
  // virtual methods below from another thread at once.
  void Start() { this->StartRead(&request_); }

  // Checks a message beyond its keyspace, on the reaction thread.
  virtual absl::Status CheckMessage(const Request& request) = 0;
  // Writes a message on the pool; may move out of it.
  virtual absl::Status WriteMessage(Request& request) = 0;

  // The stream's keyspace, from its first message.
  const std::string& keyspace() const { return keyspace_; }

 private:
  void OnReadDone(bool ok) override {
    if (!ok) {
      // End of the stream (or a cancelled call, which ignores the status).
      this->Finish(grpc::Status::OK);
      return;
    }
    absl::Status status = CheckKeyspace();
    if (status.ok()) status = CheckMessage(request_);
    if (!status.ok()) {
      this->Finish(ToGrpcStatus(status));
      return;
    }
    if (!pool_->Schedule([this] { Write(); })) this->Finish(Overloaded());
  }

  void OnDone() override { delete this; }

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
      this->Finish(ToGrpcStatus(status));
      return;
    }
    request_.Clear();
    this->StartRead(&request_);
  }

  // Constant after construction.
  WorkerPool* const pool_;
  const char* const what_;
  // Used by one step at a time.
  std::string keyspace_;
  Request request_;
};

}  // namespace internal
}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_INTERNAL_WRITE_STREAM_H_
