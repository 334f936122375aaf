#include "node/feed_subscriber.h"

#include <algorithm>
#include <random>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "node/log.h"
#include "node/wire.h"
#include "tree/status_macros.h"

namespace tally {
namespace node {

FeedSubscriber::FeedSubscriber(storage::Store* store, NodeClient* client,
                               std::function<void()> request_session)
    : store_(store),
      client_(client),
      request_session_(std::move(request_session)) {}

FeedSubscriber::~FeedSubscriber() { Stop(); }

void FeedSubscriber::Start() {
  thread_ = std::thread([this] { Run(); });
}

void FeedSubscriber::Stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
}

FeedCounters FeedSubscriber::counters() const {
  absl::MutexLock lock(&mu_);
  FeedCounters counters = counters_;
  if (counters.head > counters.position) {
    counters.lag_entries = counters.head - counters.position;
    counters.lag = absl::Now() - caught_up_at_;
  }
  return counters;
}

void FeedSubscriber::Run() {
  std::mt19937_64 rng(std::random_device{}());
  absl::Duration backoff = absl::Milliseconds(100);
  while (!stopping_.load()) {
    const absl::Time started = absl::Now();
    const absl::Status status = FollowOnce();
    if (stopping_.load()) break;
    // A link that lived a while resets the backoff.
    if (absl::Now() - started > absl::Seconds(10)) {
      backoff = absl::Milliseconds(100);
    }
    LogWarning(absl::StrFormat("feed from %s ended: %s; reconnecting in ~%d ms",
                               client_->address(), status.ToString(),
                               absl::ToInt64Milliseconds(backoff)));
    {
      absl::MutexLock lock(&mu_);
      ++counters_.reconnects;
    }
    // Sleep with jitter, in small steps so that Stop() is prompt.
    const absl::Time until =
        absl::Now() +
        backoff * (0.5 + std::uniform_real_distribution<>(0, 1)(rng));
    while (!stopping_.load() && absl::Now() < until) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    backoff = std::min(backoff * 2, absl::Seconds(5));
  }
}

absl::Status FeedSubscriber::FollowOnce() {
  // The peer's name keys its progress.
  TALLY_ASSIGN_OR_RETURN(v1::HandshakeResponse hello,
                         client_->Handshake({}, 0));
  const std::string upstream = hello.node_name();
  v1::SubscribeRequest request;
  request.set_subscriber(store_->node_name());
  absl::StatusOr<storage::UpstreamProgress> progress =
      store_->GetProgress(upstream);
  if (progress.ok() && progress->epoch == hello.epoch()) {
    request.set_epoch(progress->epoch);
    request.set_after(progress->sequence);
  } else if (progress.ok() || absl::IsNotFound(progress.status())) {
    // No position in the publisher's current log: start at its head and
    // let anti-entropy cover everything before it.
    request.set_from_head(true);
    request_session_();
  } else {
    return progress.status();
  }
  absl::Status status = client_->Subscribe(
      request,
      [&](const v1::FeedBatch& batch) { return Apply(upstream, batch); },
      stopping_);
  {
    absl::MutexLock lock(&mu_);
    counters_.connected = false;
  }
  if (absl::IsFailedPrecondition(status)) {
    // The publisher's epoch changed (or our position is past its log):
    // resynchronise by anti-entropy and follow from its head.
    request_session_();
    TALLY_RETURN_IF_ERROR(
        store_
            ->Write(storage::WriteRequest{
                {}, storage::UpstreamProgress{upstream, 0, 0}})
            .status());
  }
  return status;
}

absl::Status FeedSubscriber::Apply(const std::string& upstream,
                                   const v1::FeedBatch& batch) {
  FeedCounters seen;
  storage::WriteRequest write;
  for (const v1::FeedChange& change : batch.changes()) {
    ++seen.received;
    TALLY_ASSIGN_OR_RETURN(storage::Mutation m,
                           MutationFromProto(change.keyspace(), change.row()));
    TALLY_RETURN_IF_ERROR(storage::ValidateKeyspaceName(m.keyspace));
    if (absl::Status skew = store_->clock().Check(m.version->timestamp);
        !skew.ok()) {
      ++seen.refused_skew;
      LogWarning(absl::StrFormat("feed from %s: refused key '%s': %s", upstream,
                                 absl::CHexEscape(m.key), skew.message()));
      continue;
    }
    write.mutations.push_back(std::move(m));
  }
  {
    absl::MutexLock lock(&mu_);
    counters_.connected = true;
    counters_.head = std::max(batch.head(), batch.position());
    // Heartbeats that move nothing write nothing.
    if (write.mutations.empty() && position_stored_ &&
        batch.position() == counters_.position &&
        batch.epoch() == stored_epoch_) {
      return absl::OkStatus();
    }
  }
  write.progress =
      storage::UpstreamProgress{upstream, batch.epoch(), batch.position()};
  TALLY_ASSIGN_OR_RETURN(storage::WriteResult result,
                         store_->Write(std::move(write)));
  for (bool applied : result.applied) {
    applied ? ++seen.applied : ++seen.not_newer;
  }
  absl::MutexLock lock(&mu_);
  counters_.received += seen.received;
  counters_.applied += seen.applied;
  counters_.not_newer += seen.not_newer;
  counters_.refused_skew += seen.refused_skew;
  counters_.skipped_own += batch.skipped_own();
  counters_.skipped_superseded += batch.skipped_superseded();
  counters_.position = batch.position();
  if (counters_.position >= counters_.head) caught_up_at_ = absl::Now();
  stored_epoch_ = batch.epoch();
  position_stored_ = true;
  return absl::OkStatus();
}

}  // namespace node
}  // namespace tally
