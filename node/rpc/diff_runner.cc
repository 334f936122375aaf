#include "node/rpc/diff_runner.h"

#include <atomic>
#include <chrono>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "node/client/grpc_status.h"
#include "node/client/wire.h"
#include "node/observe/log.h"
#include "node/sync/diff_run.h"

namespace tally {
namespace node {
namespace {

// The marks a tool reads from a refused or failed RunDiff, as trailing
// metadata (before Finish): "A cannot reach B" (the tool may diff from
// where it is) and "B is A itself" (the tool compares A with itself).
void AddMarkTrailers(const absl::Status& status,
                     grpc::CallbackServerContext* context) {
  if (std::optional<std::string> peer = UnreachablePeer(status)) {
    context->AddTrailingMetadata(kUnreachablePeerMetadata, *peer);
  }
  if (PeerIsSelf(status)) {
    context->AddTrailingMetadata(kPeerIsSelfMetadata, "1");
  }
}

}  // namespace

// One RunDiff call: the state its run (a pool thread) and its reactor
// (gRPC's reactions) share.
//
// Steps:
//   The run hands over events (Difference, Progress); they collect in
//     next_. When no write is in flight, next_ becomes the message in
//     flight and is written. A run that has collected a full message waits
//     until the one in flight is written (or the call is cancelled).
//   OnWriteDone (reaction): the next message, if any, is written; when the
//     run is done and nothing is left, the call finishes.
//   Done (the run's end): the summary joins next_ (or the error becomes the
//     final status) and the call finishes once everything before it is
//     written. Nothing touches the reactor after Finish: gRPC deletes it
//     after OnDone.
//   OnCancel (reaction) and Cancel (shutdown): the run's next step stops.
class RunDiffCall final : public DiffRunEvents {
 public:
  RunDiffCall(grpc::CallbackServerContext* context,
              const v1::RunDiffRequest* request,
              grpc::ServerWriteReactor<v1::RunDiffEvent>* reactor,
              std::unique_ptr<StreamTicket> ticket)
      : context_(context),
        request_(request),
        reactor_(reactor),
        ticket_(std::move(ticket)) {}

  // Valid until the call finishes, which only Done() can make it do.
  const v1::RunDiffRequest& request() const { return *request_; }
  // The tool's address ("ipv4:127.0.0.1:51234"), for the log.
  std::string tool() const { return context_->peer(); }

  const std::atomic<bool>* cancelled() const { return &cancelled_; }

  // The tool's deadline; InfiniteFuture when it set none.
  absl::Time deadline() const {
    const auto deadline = context_->deadline();
    if (deadline == std::chrono::system_clock::time_point::max()) {
      return absl::InfiniteFuture();
    }
    return absl::FromChrono(deadline);
  }

  void Cancel() ABSL_LOCKS_EXCLUDED(mu_) {
    cancelled_.store(true);
    absl::MutexLock lock(&mu_);
    space_.SignalAll();
  }

  absl::Status Difference(v1::DiffDifference difference) override
      ABSL_LOCKS_EXCLUDED(mu_) {
    const size_t bytes = difference.ByteSizeLong();
    {
      absl::MutexLock lock(&mu_);
      while (!cancelled_.load() && writing_ &&
             (next_.differences_size() >= kMaxDifferencesPerEvent ||
              next_bytes_ + bytes > kStreamChunkBytes)) {
        space_.Wait(&mu_);
      }
      if (cancelled_.load()) return Cancelled();
      *next_.add_differences() = std::move(difference);
      next_bytes_ += bytes;
    }
    WriteNext();
    return absl::OkStatus();
  }

  absl::Status Progress(const v1::RunDiffProgress& progress) override
      ABSL_LOCKS_EXCLUDED(mu_) {
    if (cancelled_.load()) return Cancelled();
    {
      absl::MutexLock lock(&mu_);
      *next_.mutable_progress() = progress;  // only the latest counts
    }
    WriteNext();
    return absl::OkStatus();
  }

  void Done(const absl::StatusOr<v1::RunDiffSummary>& result)
      ABSL_LOCKS_EXCLUDED(mu_) {
    grpc::Status final_status = grpc::Status::OK;
    if (!result.ok()) {
      final_status = ToGrpcStatus(result.status());
      AddMarkTrailers(result.status(), context_);
    }
    {
      absl::MutexLock lock(&mu_);
      if (result.ok()) *next_.mutable_summary() = *result;
      final_ = std::move(final_status);
    }
    WriteNext();
  }

  // Reactions.
  void OnWriteDone(bool ok) ABSL_LOCKS_EXCLUDED(mu_) {
    if (ticket_ != nullptr) ticket_->WriteDone();
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) {
        // The tool went away or stopped reading: what is left is dropped.
        cancelled_.store(true);
        next_.Clear();
        next_bytes_ = 0;
      }
      space_.SignalAll();
    }
    WriteNext();
  }

  void OnCancel() { Cancel(); }

  // The reactor is going away (after Finish): the ticket goes with it,
  // before the call's context.
  std::unique_ptr<StreamTicket> TakeTicket() { return std::move(ticket_); }

 private:
  static absl::Status Cancelled() {
    return absl::CancelledError(
        "run diff: the tool went away or stopped reading");
  }

  // Writes next_ if no write is in flight, or finishes the call when the run
  // is done and nothing is left to write.
  void WriteNext() ABSL_LOCKS_EXCLUDED(mu_) {
    enum class Action { kNothing, kWrite, kFinish } action = Action::kNothing;
    grpc::Status final_status;
    {
      absl::MutexLock lock(&mu_);
      if (writing_ || finished_) return;
      const bool has_message = next_.differences_size() > 0 ||
                               next_.has_progress() || next_.has_summary();
      if (has_message && !cancelled_.load()) {
        in_flight_ = std::move(next_);
        next_.Clear();
        next_bytes_ = 0;
        writing_ = true;
        action = Action::kWrite;
      } else if (final_.has_value()) {
        finished_ = true;
        final_status = cancelled_.load() && final_->ok()
                           ? grpc::Status(grpc::StatusCode::CANCELLED,
                                          "run diff cancelled")
                           : *final_;
        action = Action::kFinish;
      }
      space_.SignalAll();
    }
    // Outside mu_: a reaction may run inline.
    if (action == Action::kWrite) {
      if (ticket_ != nullptr) ticket_->WriteStarted();
      reactor_->StartWrite(&in_flight_);
    } else if (action == Action::kFinish) {
      reactor_->Finish(final_status);
    }
  }

  grpc::CallbackServerContext* const context_;
  const v1::RunDiffRequest* const request_;
  grpc::ServerWriteReactor<v1::RunDiffEvent>* const reactor_;
  std::unique_ptr<StreamTicket> ticket_;
  std::atomic<bool> cancelled_{false};

  absl::Mutex mu_;
  absl::CondVar space_;  // a write ended, or the call was cancelled
  v1::RunDiffEvent next_ ABSL_GUARDED_BY(mu_);
  size_t next_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> final_ ABSL_GUARDED_BY(mu_);
  // Read by gRPC while writing_.
  v1::RunDiffEvent in_flight_;
};

namespace {

// The reactor gRPC drives; its reactions go to the call.
class RunDiffReactor final : public grpc::ServerWriteReactor<v1::RunDiffEvent> {
 public:
  void set_call(std::shared_ptr<RunDiffCall> call) { call_ = std::move(call); }

  void OnWriteDone(bool ok) override { call_->OnWriteDone(ok); }
  void OnCancel() override { call_->OnCancel(); }
  void OnDone() override {
    // The ticket must go before the context; the call may outlive both
    // (the run drops its reference as it ends).
    std::unique_ptr<StreamTicket> ticket = call_->TakeTicket();
    ticket.reset();
    delete this;
  }

 private:
  std::shared_ptr<RunDiffCall> call_;
};

// A reactor that only finishes (a refused call).
class RefusedReactor final : public grpc::ServerWriteReactor<v1::RunDiffEvent> {
 public:
  RefusedReactor(const absl::Status& status,
                 grpc::CallbackServerContext* context) {
    AddMarkTrailers(status, context);
    Finish(ToGrpcStatus(status));
  }
  void OnDone() override { delete this; }
};

}  // namespace

DiffRunner::DiffRunner(storage::Store* store, ClientOptions peer_client,
                       int max_running, StreamLimiter* limiter,
                       BandwidthLimiter* node_bandwidth)
    : store_(store),
      peer_client_(std::move(peer_client)),
      max_running_(max_running),
      limiter_(limiter),
      node_bandwidth_(node_bandwidth),
      pool_(std::make_unique<WorkerPool>(max_running,
                                         static_cast<size_t>(max_running))) {}

DiffRunner::~DiffRunner() { Shutdown(); }

void DiffRunner::SetListenAddress(std::string address) {
  absl::MutexLock lock(&mu_);
  self_address_ = std::move(address);
}

grpc::ServerWriteReactor<v1::RunDiffEvent>* DiffRunner::Start(
    grpc::CallbackServerContext* context, const v1::RunDiffRequest* request) {
  std::string self;
  {
    absl::MutexLock lock(&mu_);
    self = self_address_;
  }
  // Cheap checks in the reaction; the run repeats them.
  if (absl::Status valid = ValidateRunDiffRequest(*request, self);
      !valid.ok()) {
    return new RefusedReactor(valid, context);
  }
  std::unique_ptr<StreamTicket> ticket;
  if (limiter_ != nullptr) {
    absl::StatusOr<std::unique_ptr<StreamTicket>> admitted =
        limiter_->Admit(context, "run diff");
    if (!admitted.ok()) {
      return new RefusedReactor(admitted.status(), context);
    }
    ticket = *std::move(admitted);
  }
  auto* reactor = new RunDiffReactor();
  auto call = std::make_shared<RunDiffCall>(context, request, reactor,
                                            std::move(ticket));
  reactor->set_call(call);
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      refused = absl::UnavailableError("the node is shutting down");
    } else if (static_cast<int>(running_.size()) >= max_running_) {
      refused = absl::ResourceExhaustedError(absl::StrFormat(
          "run diff: this node runs %d diffs already; the limit is %d "
          "(--max-sessions)",
          running_.size(), max_running_));
    } else if (!pool_->Schedule([this, call] { Run(call); })) {
      refused = absl::ResourceExhaustedError("run diff: the node is busy");
    } else {
      running_.insert(call);
    }
  }
  if (!refused.ok()) call->Done(refused);
  return reactor;
}

void DiffRunner::Run(std::shared_ptr<RunDiffCall> call) {
  DiffRunOptions options;
  options.peer_client = peer_client_;
  options.cancelled = call->cancelled();
  options.deadline = call->deadline();
  options.node_bandwidth = node_bandwidth_;
  {
    absl::MutexLock lock(&mu_);
    options.self_address = self_address_;
  }
  const absl::Time start = absl::Now();
  const absl::StatusOr<v1::RunDiffSummary> result =
      RunDiffAgainstPeer(store_, call->request(), options, call.get());
  // One line per run, as a session's: what the tool asked, and its outcome.
  const v1::RunDiffSummary done = result.ok() ? *result : v1::RunDiffSummary();
  LogInfo("run diff",
          {{"tool", call->tool()},
           {"peer", call->request().peer()},
           {"keyspace", call->request().keyspace()},
           {"mode", v1::RunDiffMode_Name(call->request().mode())},
           {"dry_run", call->request().dry_run()},
           {"outcome",
            result.ok() ? std::string("ok") : result.status().ToString()},
           {"differences", done.differences()},
           {"rounds", done.rounds()},
           {"bytes_sent", done.bytes_sent()},
           {"bytes_received", done.bytes_received()},
           {"rows_to_a", done.rows_to_a()},
           {"rows_to_b", done.rows_to_b()},
           {"erased", done.erased()},
           {"duration_ms", absl::ToInt64Milliseconds(absl::Now() - start)}});
  call->Done(result);
  absl::MutexLock lock(&mu_);
  running_.erase(call);
}

void DiffRunner::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    for (const std::shared_ptr<RunDiffCall>& call : running_) call->Cancel();
  }
  pool_.reset();  // runs every queued run (each stops at once) and joins
}

int DiffRunner::running() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(running_.size());
}

void DiffRunner::FillStatus(v1::StatusResponse* response) {
  response->set_diffs_running(static_cast<uint32_t>(running()));
}

}  // namespace node
}  // namespace tally
