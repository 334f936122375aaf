// ChunkStreamReactor: the server side of a stream of answers (Peer Scan,
// Peer FetchRows), one message of about kStreamChunkBytes per pool task.
//
// Nothing waits for the reader on a pool thread: while a message waits for
// its reader the stream holds no thread (and no snapshot), only that
// message.
//
// Steps, one at a time, so the state needs no lock:
//   Start (reaction): Validate() the request; admit the stream through the
//     limiter (the per-client limit); schedule the first chunk.
//   Chunk (pool): FillChunk() fills the message from where the last chunk
//     stopped; write it, or write it and finish when it is the last one (an
//     empty last chunk just finishes).
//   OnWriteDone (reaction): schedule the next chunk, or finish on a broken
//     or cancelled stream (the limiter cancels one whose reader stopped).
// An error from either virtual method finishes the call with its status.
#ifndef TALLY_NODE_RPC_INTERNAL_CHUNK_STREAM_H_
#define TALLY_NODE_RPC_INTERNAL_CHUNK_STREAM_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "node/client/grpc_status.h"
#include "node/rpc/internal/unary.h"
#include "node/rpc/stream_limiter.h"
#include "node/worker_pool.h"

namespace tally {
namespace node {
namespace internal {

template <typename Response>
class ChunkStreamReactor : public grpc::ServerWriteReactor<Response> {
 public:
  // Starts the stream: validates, admits, schedules the first chunk, or
  // finishes at once. Call once, after construction.
  void Start() {
    absl::Status status = Validate();
    if (status.ok() && limiter_ != nullptr) {
      absl::StatusOr<std::unique_ptr<StreamTicket>> ticket =
          limiter_->Admit(context_, what_);
      status = ticket.status();
      if (ticket.ok()) ticket_ = std::move(*ticket);
    }
    if (!status.ok()) {
      this->Finish(ToGrpcStatus(status));
      return;
    }
    ScheduleNextChunk();
  }

 protected:
  // `what` names the stream to the limiter and in messages ("scan",
  // "fetch"); `limiter` may be null (no limit).
  ChunkStreamReactor(WorkerPool* pool, StreamLimiter* limiter,
                     grpc::CallbackServerContext* context, const char* what)
      : pool_(pool), limiter_(limiter), context_(context), what_(what) {}

  // Checks the request, on the reaction thread, before anything is read.
  virtual absl::Status Validate() = 0;
  // Fills `message` (cleared by the caller) with the next chunk, on the
  // pool; sets `*last` when no chunk follows it.
  virtual absl::Status FillChunk(Response* message, bool* last) = 0;

 private:
  void OnWriteDone(bool ok) override {
    if (ticket_ != nullptr) ticket_->WriteDone();
    if (!ok) {
      this->Finish(grpc::Status(
          grpc::StatusCode::CANCELLED,
          absl::StrCat(what_,
                       " cancelled: the caller went away or stopped reading")));
      return;
    }
    ScheduleNextChunk();
  }

  void OnDone() override { delete this; }

  void ScheduleNextChunk() {
    if (!pool_->Schedule([this] { NextChunk(); }, WorkerPool::Lane::kBulk)) {
      this->Finish(Overloaded());
    }
  }

  void NextChunk() {
    message_.Clear();
    bool last = false;
    const absl::Status status = FillChunk(&message_, &last);
    if (!status.ok()) {
      this->Finish(ToGrpcStatus(status));
      return;
    }
    if (!last) {
      if (ticket_ != nullptr) ticket_->WriteStarted();
      this->StartWrite(&message_);
    } else if (message_.ByteSizeLong() > 0) {
      if (ticket_ != nullptr) ticket_->WriteStarted();
      this->StartWriteAndFinish(&message_, grpc::WriteOptions(),
                                grpc::Status::OK);
    } else {
      this->Finish(grpc::Status::OK);
    }
  }

  // Constant after construction.
  WorkerPool* const pool_;
  StreamLimiter* const limiter_;
  grpc::CallbackServerContext* const context_;
  const char* const what_;

  // Used by one step at a time (see above).
  std::unique_ptr<StreamTicket> ticket_;
  // Read by gRPC while a write is pending.
  Response message_;
};

}  // namespace internal
}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_RPC_INTERNAL_CHUNK_STREAM_H_
