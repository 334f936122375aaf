#include "node/rpc/sync_runner.h"

#include <atomic>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "node/client/grpc_status.h"
#include "node/observe/log.h"

namespace tally {
namespace node {
namespace {

// How often a call's stream gets the sessions' state while they run.
constexpr absl::Duration kEventInterval = absl::Milliseconds(500);

const char* StateName(SessionRequest::State state) {
  switch (state) {
    case SessionRequest::State::kWaiting:
      return "waiting";
    case SessionRequest::State::kRunning:
      return "running";
    case SessionRequest::State::kDone:
      return "done";
  }
  return "unknown";
}

}  // namespace

// One Sync call: the state its follower (a pool thread) and its reactor
// (gRPC's reactions) share.
//
// Every event is the whole state of the call's sessions, so only the latest
// one waiting to be written matters: Offer replaces it. When no write is in
// flight the waiting event is written; once the follower is done (Done) and
// nothing is left, the call finishes. OnCancel and Cancel (shutdown) set
// cancelled(), which the follower reads to stop the sessions.
class SyncCall {
 public:
  SyncCall(grpc::CallbackServerContext* context, const v1::SyncRequest* request,
           grpc::ServerWriteReactor<v1::SyncEvent>* reactor,
           std::unique_ptr<StreamTicket> ticket)
      : context_(context),
        request_(request),
        reactor_(reactor),
        ticket_(std::move(ticket)) {}

  // Valid until the call finishes, which only Done() can make it do.
  const v1::SyncRequest& request() const { return *request_; }
  std::string tool() const { return context_->peer(); }
  bool cancelled() const { return cancelled_.load(); }

  void Cancel() { cancelled_.store(true); }

  void Offer(v1::SyncEvent event) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      next_ = std::move(event);
    }
    WriteNext();
  }

  void Done(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      final_ = ToGrpcStatus(status);
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
        cancelled_.store(true);  // the tool went away
        next_.reset();
      }
    }
    WriteNext();
  }
  void OnCancel() { Cancel(); }

  std::unique_ptr<StreamTicket> TakeTicket() { return std::move(ticket_); }

 private:
  void WriteNext() ABSL_LOCKS_EXCLUDED(mu_) {
    enum class Action { kNothing, kWrite, kFinish } action = Action::kNothing;
    grpc::Status final_status;
    {
      absl::MutexLock lock(&mu_);
      if (writing_ || finished_) return;
      if (next_.has_value() && !cancelled_.load()) {
        in_flight_ = *std::move(next_);
        next_.reset();
        writing_ = true;
        action = Action::kWrite;
      } else if (final_.has_value()) {
        finished_ = true;
        final_status =
            cancelled_.load() && final_->ok()
                ? grpc::Status(grpc::StatusCode::CANCELLED, "sync cancelled")
                : *final_;
        action = Action::kFinish;
      }
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
  const v1::SyncRequest* const request_;
  grpc::ServerWriteReactor<v1::SyncEvent>* const reactor_;
  std::unique_ptr<StreamTicket> ticket_;
  std::atomic<bool> cancelled_{false};

  absl::Mutex mu_;
  std::optional<v1::SyncEvent> next_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> final_ ABSL_GUARDED_BY(mu_);
  // Read by gRPC while writing_.
  v1::SyncEvent in_flight_;
};

namespace {

class SyncReactor final : public grpc::ServerWriteReactor<v1::SyncEvent> {
 public:
  void set_call(std::shared_ptr<SyncCall> call) { call_ = std::move(call); }

  void OnWriteDone(bool ok) override { call_->OnWriteDone(ok); }
  void OnCancel() override { call_->OnCancel(); }
  void OnDone() override {
    // The ticket must go before the context; the call may outlive both.
    std::unique_ptr<StreamTicket> ticket = call_->TakeTicket();
    ticket.reset();
    delete this;
  }

 private:
  std::shared_ptr<SyncCall> call_;
};

class RefusedReactor final : public grpc::ServerWriteReactor<v1::SyncEvent> {
 public:
  explicit RefusedReactor(const absl::Status& status) {
    Finish(ToGrpcStatus(status));
  }
  void OnDone() override { delete this; }
};

}  // namespace

SyncRunner::SyncRunner(PeerControl* control, int max_running,
                       StreamLimiter* limiter)
    : control_(control),
      max_running_(max_running),
      limiter_(limiter),
      pool_(std::make_unique<WorkerPool>(max_running,
                                         static_cast<size_t>(max_running))) {}

SyncRunner::~SyncRunner() { Shutdown(); }

grpc::ServerWriteReactor<v1::SyncEvent>* SyncRunner::Start(
    grpc::CallbackServerContext* context, const v1::SyncRequest* request) {
  std::unique_ptr<StreamTicket> ticket;
  if (limiter_ != nullptr) {
    absl::StatusOr<std::unique_ptr<StreamTicket>> admitted =
        limiter_->Admit(context, "sync");
    if (!admitted.ok()) return new RefusedReactor(admitted.status());
    ticket = *std::move(admitted);
  }
  auto* reactor = new SyncReactor();
  auto call =
      std::make_shared<SyncCall>(context, request, reactor, std::move(ticket));
  reactor->set_call(call);
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      refused = absl::UnavailableError("the node is shutting down");
    } else if (static_cast<int>(running_.size()) >= max_running_) {
      refused = absl::ResourceExhaustedError(absl::StrFormat(
          "sync: this node follows %d syncs already; the limit is %d "
          "(--max-sessions)",
          running_.size(), max_running_));
    } else if (!pool_->Schedule([this, call] { Run(call); })) {
      refused = absl::ResourceExhaustedError("sync: the node is busy");
    } else {
      running_.insert(call);
    }
  }
  if (!refused.ok()) call->Done(refused);
  return reactor;
}

void SyncRunner::Run(std::shared_ptr<SyncCall> call) {
  const v1::SyncRequest& request = call->request();
  absl::StatusOr<std::vector<PeerControl::Asked>> asked =
      control_->RequestSessions(request.peer(), request.keyspace());
  LogInfo("sync requested",
          {{"tool", call->tool()},
           {"peer", request.peer().empty() ? "*" : request.peer()},
           {"keyspace", request.keyspace().empty() ? "*" : request.keyspace()},
           {"outcome", asked.ok() ? "started" : asked.status().ToString()}});
  if (asked.ok()) {
    bool cancel_sent = false;
    while (true) {
      const absl::Time now = absl::Now();
      v1::SyncEvent event;
      const SessionRequest* waiting_for = nullptr;
      for (const PeerControl::Asked& one : *asked) {
        v1::SyncPeerState* state = event.add_peers();
        state->set_address(one.address);
        state->set_name(one.name);
        if (one.request == nullptr) {
          state->set_state("skipped");
          continue;
        }
        const SessionRequest::Snapshot snapshot = one.request->snapshot();
        state->set_state(StateName(snapshot.state));
        if (snapshot.state != SessionRequest::State::kWaiting) {
          SessionProgressToProto(snapshot.progress, now,
                                 state->mutable_progress());
        }
        if (snapshot.state == SessionRequest::State::kDone) {
          SessionRecordToProto(snapshot.record, state->mutable_record());
          for (const std::string& keyspace : snapshot.differing_after) {
            state->add_differing_after(keyspace);
          }
        } else if (waiting_for == nullptr) {
          waiting_for = one.request.get();
        }
      }
      call->Offer(std::move(event));
      if (waiting_for == nullptr) break;  // every session ended
      if (call->cancelled() && !cancel_sent) {
        // The tool went away (or the node shuts down): its sessions stop;
        // the loop ends once they have.
        cancel_sent = true;
        for (const PeerControl::Asked& one : *asked) {
          if (one.request != nullptr) control_->CancelRequest(one.request);
        }
      }
      waiting_for->WaitUntilDone(kEventInterval);
    }
  }
  call->Done(asked.status());
  absl::MutexLock lock(&mu_);
  running_.erase(call);
}

void SyncRunner::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    for (const std::shared_ptr<SyncCall>& call : running_) call->Cancel();
  }
  pool_.reset();  // each call ends once its sessions have
}

}  // namespace node
}  // namespace tally
