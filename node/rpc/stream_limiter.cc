#include "node/rpc/stream_limiter.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "node/observe/log.h"

namespace tally {
namespace node {

StreamTicket::~StreamTicket() { limiter_->Release(id_); }

void StreamTicket::WriteStarted() {
  limiter_->SetWriteStarted(id_, absl::Now());
}

void StreamTicket::WriteDone() {
  limiter_->SetWriteStarted(id_, absl::InfiniteFuture());
}

StreamLimiter::StreamLimiter(StreamLimits limits)
    : limits_(limits), watchdog_([this] { Watch(); }) {}

StreamLimiter::~StreamLimiter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  watchdog_.join();
}

std::string StreamLimiter::ClientHost(absl::string_view peer) {
  // "ipv4:HOST:PORT", "ipv6:[HOST]:PORT", "unix:PATH".
  const size_t scheme = peer.find(':');
  if (scheme != absl::string_view::npos &&
      (absl::StartsWith(peer, "ipv4:") || absl::StartsWith(peer, "ipv6:"))) {
    peer.remove_prefix(scheme + 1);
    const size_t port = peer.rfind(':');
    if (port != absl::string_view::npos) peer = peer.substr(0, port);
    absl::ConsumePrefix(&peer, "[");
    absl::ConsumeSuffix(&peer, "]");
  }
  return std::string(peer);
}

absl::StatusOr<std::unique_ptr<StreamTicket>> StreamLimiter::Admit(
    grpc::CallbackServerContext* context, absl::string_view what) {
  std::string client = ClientHost(context->peer());
  absl::MutexLock lock(&mu_);
  int& open = per_client_[client];
  if (open >= limits_.max_per_client) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "client %s has %d bulk streams open (scan, fetch, push, load); the "
        "limit is %d per client (max-streams-per-client): finish some first",
        client, open, limits_.max_per_client));
  }
  ++open;
  const int id = next_id_++;
  Stream& stream = streams_[id];
  stream.client = std::move(client);
  stream.what = std::string(what);
  stream.context = context;
  return std::unique_ptr<StreamTicket>(new StreamTicket(this, id));
}

int StreamLimiter::open_streams() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(streams_.size());
}

uint64_t StreamLimiter::idle_cancels() const {
  absl::MutexLock lock(&mu_);
  return idle_cancels_;
}

void StreamLimiter::SetWriteStarted(int id, absl::Time when) {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(id);
  if (it != streams_.end()) it->second.write_started = when;
}

void StreamLimiter::Release(int id) {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  // The watchdog may be cancelling this call outside the lock: its context
  // must live until it is done. (gRPC may end the call, and destroy this
  // ticket, inside that very TryCancel on the watchdog thread: no wait
  // there, the watchdog is past its use of the context.)
  if (std::this_thread::get_id() != watchdog_.get_id()) {
    mu_.Await(absl::Condition(
        +[](Stream* s) { return !s->cancelling; }, &it->second));
  }
  auto client = per_client_.find(it->second.client);
  if (client != per_client_.end() && --client->second <= 0) {
    per_client_.erase(client);
  }
  streams_.erase(it);
}

void StreamLimiter::Watch() {
  const absl::Duration tick = std::clamp(
      limits_.idle_timeout / 4, absl::Milliseconds(10), absl::Seconds(1));
  while (true) {
    std::vector<std::pair<int, grpc::CallbackServerContext*>> idle;
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), tick);
      if (stopping_) return;
      const absl::Time now = absl::Now();
      for (auto& [id, stream] : streams_) {
        if (stream.cancelled ||
            stream.write_started == absl::InfiniteFuture() ||
            now - stream.write_started < limits_.idle_timeout) {
          continue;
        }
        stream.cancelling = true;
        idle.emplace_back(id, stream.context);
        LogWarning(
            "cancelled a stream: its reader took no message (stream idle "
            "timeout)",
            {{"stream", stream.what},
             {"client", stream.client},
             {"idle", now - stream.write_started}});
      }
    }
    // Not under mu_: cancelling may run the call's reactions, which may
    // destroy their tickets, at once.
    for (const auto& [id, context] : idle) context->TryCancel();
    absl::MutexLock lock(&mu_);
    for (const auto& [id, context] : idle) {
      ++idle_cancels_;
      auto it = streams_.find(id);
      if (it == streams_.end()) continue;
      it->second.cancelling = false;
      it->second.cancelled = true;
    }
  }
}

}  // namespace node
}  // namespace tally
