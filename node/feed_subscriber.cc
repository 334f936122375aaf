#include "node/feed_subscriber.h"

#include <algorithm>
#include <iterator>
#include <random>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "node/log.h"
#include "node/wire.h"
#include "tree/status_macros.h"

namespace tally {
namespace node {

// How many changes a subscriber asks for per batch (the publisher's limit);
// the publisher also bounds a batch to about kStreamChunkBytes.
constexpr uint32_t kMaxBatch = 10'000;
// Batches up to this size are committed by the receiving thread when the
// committer is idle and the stream has no backlog (see Hand).
constexpr size_t kInlineCommitMaxChanges = 256;
// A batch that took less than this to receive and decode was already
// waiting: the stream has a backlog, so the batch goes to the committer,
// and the receiver goes on reading and merging what waits behind it.
constexpr absl::Duration kBacklogGap = absl::Milliseconds(1);
// Bounds of the batches merged into one commit (one backend transaction).
constexpr size_t kMaxMergedChanges = 10'000;
constexpr size_t kMaxMergedBytes = 4 << 20;

struct FeedSubscriber::DecodedBatch {
  storage::WriteRequest write;
  uint64_t epoch = 0;
  uint64_t position = 0;
  uint64_t received = 0;
  uint64_t refused_skew = 0;
  uint64_t skipped_own = 0;
  uint64_t skipped_superseded = 0;
  // The size of the mutations' keyspaces, keys and values.
  size_t bytes = 0;
  // Not OK when a change of the batch is malformed.
  absl::Status bad;

  // Whether `next`, received after this batch, may join it in one commit.
  bool CanMerge(const DecodedBatch& next) const {
    return next.bad.ok() && next.epoch == epoch &&
           write.mutations.size() + next.write.mutations.size() <=
               kMaxMergedChanges &&
           bytes + next.bytes <= kMaxMergedBytes;
  }
  // Appends `next`: its changes follow this batch's (the store applies a
  // request's mutations of one key in order, last writer wins), and its
  // position covers both.
  void Merge(DecodedBatch next) {
    write.mutations.insert(
        write.mutations.end(),
        std::make_move_iterator(next.write.mutations.begin()),
        std::make_move_iterator(next.write.mutations.end()));
    position = next.position;
    received += next.received;
    refused_skew += next.refused_skew;
    skipped_own += next.skipped_own;
    skipped_superseded += next.skipped_superseded;
    bytes += next.bytes;
  }
};

FeedSubscriber::FeedSubscriber(
    storage::Store* store, NodeClient* client,
    std::function<void()> request_session,
    std::function<absl::Status(const std::string&)> check_upstream)
    : store_(store),
      client_(client),
      request_session_(std::move(request_session)),
      check_upstream_(std::move(check_upstream)),
      outage_(client->address(), "feed") {}

FeedSubscriber::~FeedSubscriber() { Stop(); }

void FeedSubscriber::Start() {
  thread_ = std::thread([this] { Run(); });
}

void FeedSubscriber::RequestStop() {
  stopping_ = true;
  {
    absl::MutexLock lock(&queue_mu_);
    halted_ = true;
  }
  canceller_.Cancel();
}

void FeedSubscriber::Stop() {
  RequestStop();
  if (thread_.joinable()) thread_.join();
}

FeedCounters FeedSubscriber::counters() const {
  absl::MutexLock lock(&mu_);
  FeedCounters counters = counters_;
  if (counters.head > counters.position) {
    counters.lag_entries = counters.head - counters.position;
  }
  // Behind as of the last message, or cut off from the upstream: the age
  // of what is here. A down link must make the lag grow (or `lag_seconds
  // > 30` would never fire when it matters most); while connected,
  // heartbeats and applied changes renew fresh_as_of_.
  if (counters.head > counters.position || !counters.connected) {
    counters.lag = std::max(absl::ZeroDuration(), absl::Now() - fresh_as_of_);
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
    // Every end at debug level; at info, one line when the link goes down,
    // a summary while it stays down, one when it is back (outage_).
    LogDebug("feed ended; reconnecting", {{"upstream", client_->address()},
                                          {"error", status},
                                          {"backoff", backoff}});
    outage_.Failure(absl::Now(), status);
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
  if (check_upstream_) TALLY_RETURN_IF_ERROR(check_upstream_(upstream));
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
  request.set_max_batch(kMaxBatch);
  {
    absl::MutexLock lock(&queue_mu_);
    handed_.reset();
    stream_ended_ = false;
    commit_error_ = absl::OkStatus();
  }
  last_hand_end_ = absl::InfinitePast();
  std::thread committer([this, &upstream] { CommitLoop(upstream); });
  absl::Status status = client_->Subscribe(
      request,
      [&](v1::FeedBatch& batch) {
        return Hand(upstream,
                    std::make_unique<DecodedBatch>(Decode(upstream, batch)));
      },
      stopping_, &canceller_);
  {
    absl::MutexLock lock(&queue_mu_);
    stream_ended_ = true;
  }
  committer.join();
  {
    // A failed commit is why the stream ended (or would have).
    absl::MutexLock lock(&queue_mu_);
    if (!commit_error_.ok()) status = commit_error_;
  }
  {
    absl::MutexLock lock(&mu_);
    counters_.connected = false;
  }
  if (absl::IsFailedPrecondition(status)) {
    // The publisher's epoch changed (or our position is past its log):
    // resynchronise by anti-entropy and follow from its head.
    request_session_();
    storage::WriteRequest reset;
    reset.progress = storage::UpstreamProgress{upstream, 0, 0};
    TALLY_RETURN_IF_ERROR(store_->Write(std::move(reset)).status());
  }
  return status;
}

FeedSubscriber::DecodedBatch FeedSubscriber::Decode(
    const std::string& upstream, const v1::FeedBatch& batch) {
  DecodedBatch decoded;
  decoded.epoch = batch.epoch();
  decoded.position = batch.position();
  decoded.skipped_own = batch.skipped_own();
  decoded.skipped_superseded = batch.skipped_superseded();
  decoded.write.mutations.reserve(batch.changes_size());
  for (const v1::FeedChange& change : batch.changes()) {
    ++decoded.received;
    absl::StatusOr<storage::Mutation> m =
        MutationFromProto(change.keyspace(), change.row());
    absl::Status valid = m.status();
    if (valid.ok()) valid = storage::ValidateKeyspaceName(m->keyspace);
    if (!valid.ok()) {
      // A bad change ends the stream (Hand reports it) after what came
      // before it is committed; nothing of its batch is applied.
      DecodedBatch refused;
      refused.bad = std::move(valid);
      return refused;
    }
    if (absl::Status skew = store_->clock().Check(m->version->timestamp);
        !skew.ok()) {
      ++decoded.refused_skew;
      LogWarning("feed: refused a change", {{"upstream", upstream},
                                            {"key", absl::CHexEscape(m->key)},
                                            {"error", skew.message()}});
      continue;
    }
    decoded.bytes += m->keyspace.size() + m->key.size() + m->value.size();
    decoded.write.mutations.push_back(*std::move(m));
  }
  bool was_connected = false;
  {
    absl::MutexLock lock(&mu_);
    was_connected = counters_.connected;
    counters_.connected = true;
    counters_.head = std::max(batch.head(), batch.position());
  }
  if (!was_connected) outage_.Success(absl::Now());
  return decoded;
}

absl::Status FeedSubscriber::Hand(const std::string& upstream,
                                  std::unique_ptr<DecodedBatch> batch) {
  const absl::Time now = absl::Now();
  const bool backlog = now - last_hand_end_ < kBacklogGap;
  absl::MutexLock lock(&queue_mu_);
  struct Args {
    FeedSubscriber* s;
    const DecodedBatch* batch;
  } args{this, batch.get()};
  queue_mu_.Await(absl::Condition(
      +[](Args* a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(a->s->queue_mu_) {
        return a->s->handed_ == nullptr || a->s->handed_->CanMerge(*a->batch) ||
               !a->s->commit_error_.ok() || a->s->halted_;
      },
      &args));
  if (!commit_error_.ok()) return commit_error_;
  if (halted_) return absl::CancelledError("feed stopped");
  if (!batch->bad.ok()) return batch->bad;
  if (handed_ != nullptr) {
    // The committer is busy and a batch waits for it: this one joins it,
    // so that the backend gets one transaction for all that waits, not
    // one per batch (live traffic brings batches of a change or two).
    handed_->Merge(std::move(*batch));
  } else if (!committer_busy_ && !backlog &&
             batch->write.mutations.size() <= kInlineCommitMaxChanges) {
    // Nothing is being committed, nothing waits and the stream had no
    // backlog: order is kept, and a hand-over would only add a thread
    // wake-up to the replication lag.
    queue_mu_.Unlock();
    absl::Status status = Commit(upstream, std::move(*batch));
    queue_mu_.Lock();
    last_hand_end_ = absl::Now();
    return status;
  } else {
    handed_ = std::move(batch);
  }
  last_hand_end_ = absl::Now();
  return absl::OkStatus();
}

void FeedSubscriber::CommitLoop(const std::string& upstream) {
  while (true) {
    std::unique_ptr<DecodedBatch> batch;
    {
      absl::MutexLock lock(&queue_mu_);
      queue_mu_.Await(absl::Condition(
          +[](FeedSubscriber* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->queue_mu_) {
            return s->handed_ != nullptr || s->stream_ended_ || s->halted_;
          },
          this));
      // Stopping drops a batch not committed yet; its progress was not
      // stored either, so it comes again.
      if (halted_ || handed_ == nullptr) return;
      batch = std::move(handed_);
      committer_busy_ = true;
    }
    absl::Status status = Commit(upstream, std::move(*batch));
    absl::MutexLock lock(&queue_mu_);
    committer_busy_ = false;
    if (!status.ok()) {
      commit_error_ = std::move(status);
      return;
    }
  }
}

absl::Status FeedSubscriber::Commit(const std::string& upstream,
                                    DecodedBatch batch) {
  {
    absl::MutexLock lock(&mu_);
    // Heartbeats that move nothing write nothing, but they do say this
    // node is still caught up.
    if (batch.write.mutations.empty() && position_stored_ &&
        batch.position == counters_.position && batch.epoch == stored_epoch_) {
      if (counters_.position >= counters_.head) fresh_as_of_ = absl::Now();
      return absl::OkStatus();
    }
  }
  // The write time of the newest change of the batch (applied or not newer:
  // either way this node has it or something newer).
  uint64_t newest_ms = 0;
  for (const storage::Mutation& m : batch.write.mutations) {
    if (m.version.has_value()) {
      newest_ms = std::max(newest_ms, m.version->timestamp.physical_millis());
    }
  }
  batch.write.progress =
      storage::UpstreamProgress{upstream, batch.epoch, batch.position};
  // A change of a keyspace this node lacks may be refused (the store is at
  // max-keyspaces). Such changes are then left out and the rest applied:
  // stopping would bring the very change again at every reconnect, and no
  // later change of this upstream would ever arrive. (The sessions with the
  // peer report the keyspace refused.) Only a batch that names a new
  // keyspace keeps a copy of its changes for that.
  std::vector<storage::Mutation> kept;
  bool names_new_keyspace = false;
  {
    absl::flat_hash_set<std::string> known;
    for (const storage::KeyspaceInfo& info : store_->ListKeyspaces()) {
      known.insert(info.name);
    }
    for (const storage::Mutation& m : batch.write.mutations) {
      if (!known.contains(m.keyspace)) {
        names_new_keyspace = true;
        for (const storage::Mutation& k : batch.write.mutations) {
          if (known.contains(k.keyspace)) kept.push_back(k);
        }
        break;
      }
    }
  }
  const size_t changes = batch.write.mutations.size();
  storage::WriteRequest retry;
  retry.progress = batch.write.progress;
  retry.mode = batch.write.mode;
  // A keyspace may refuse its rows for good (kNotFound: its PostgreSQL
  // table is missing). A batch of one keyspace is then left out whole; a
  // batch of several keeps a copy of its changes to write them keyspace by
  // keyspace (CommitByKeyspace), so that the others go on.
  const std::string first_keyspace =
      batch.write.mutations.empty() ? "" : batch.write.mutations[0].keyspace;
  const bool one_keyspace = std::all_of(
      batch.write.mutations.begin(), batch.write.mutations.end(),
      [&](const storage::Mutation& m) { return m.keyspace == first_keyspace; });
  storage::WriteRequest by_keyspace;
  by_keyspace.progress = batch.write.progress;
  by_keyspace.mode = batch.write.mode;
  if (!names_new_keyspace && !one_keyspace) {
    by_keyspace.mutations = batch.write.mutations;
  }
  absl::StatusOr<storage::WriteResult> result =
      store_->Write(std::move(batch.write));
  uint64_t left_out = 0;
  if (!names_new_keyspace && absl::IsNotFound(result.status())) {
    if (one_keyspace) {
      LogWarning("feed: left out changes of a keyspace that takes no rows",
                 {{"upstream", upstream},
                  {"keyspace", first_keyspace},
                  {"changes", changes},
                  {"error", result.status().message()}});
      left_out = changes;
      storage::WriteRequest progress;
      progress.progress = by_keyspace.progress;
      result = store_->Write(std::move(progress));
    } else {
      result = CommitByKeyspace(upstream, std::move(by_keyspace), &left_out);
    }
  }
  if (names_new_keyspace && absl::IsResourceExhausted(result.status())) {
    LogWarning("feed: left out changes of keyspaces this node cannot create",
               {{"upstream", upstream},
                {"changes", changes - kept.size()},
                {"error", result.status().message()}});
    retry.mutations = std::move(kept);
    result = store_->Write(std::move(retry));
  }
  TALLY_RETURN_IF_ERROR(result.status());
  uint64_t applied = 0;
  uint64_t not_newer = 0;
  for (bool a : result->applied) a ? ++applied : ++not_newer;
  absl::MutexLock lock(&mu_);
  counters_.received += batch.received;
  counters_.applied += applied;
  counters_.not_newer += not_newer;
  counters_.refused_skew += batch.refused_skew;
  counters_.skipped_own += batch.skipped_own;
  counters_.skipped_superseded += batch.skipped_superseded;
  counters_.left_out += left_out;
  counters_.position = batch.position;
  if (counters_.position >= counters_.head) {
    fresh_as_of_ = absl::Now();
  } else if (newest_ms > 0) {
    fresh_as_of_ = std::max(
        fresh_as_of_, absl::FromUnixMillis(static_cast<int64_t>(newest_ms)));
  }
  stored_epoch_ = batch.epoch;
  position_stored_ = true;
  return absl::OkStatus();
}

absl::StatusOr<storage::WriteResult> FeedSubscriber::CommitByKeyspace(
    const std::string& upstream, storage::WriteRequest request,
    uint64_t* left_out) {
  // Keyspaces in the order they first appear; a key's changes stay in
  // order within its keyspace.
  std::vector<std::string> order;
  absl::flat_hash_map<std::string, std::vector<storage::Mutation>> parts;
  for (storage::Mutation& m : request.mutations) {
    auto [it, added] = parts.try_emplace(m.keyspace);
    if (added) order.push_back(m.keyspace);
    it->second.push_back(std::move(m));
  }
  storage::WriteResult total;
  for (const std::string& keyspace : order) {
    std::vector<storage::Mutation>& mutations = parts[keyspace];
    const size_t n = mutations.size();
    storage::WriteRequest part;
    part.mode = request.mode;
    part.mutations = std::move(mutations);
    absl::StatusOr<storage::WriteResult> r = store_->Write(std::move(part));
    if (absl::IsNotFound(r.status())) {
      LogWarning("feed: left out changes of a keyspace that takes no rows",
                 {{"upstream", upstream},
                  {"keyspace", keyspace},
                  {"changes", n},
                  {"error", r.status().message()}});
      *left_out += n;
      continue;
    }
    if (!r.ok()) return r.status();
    total.applied.insert(total.applied.end(), r->applied.begin(),
                         r->applied.end());
  }
  storage::WriteRequest progress;
  progress.progress = request.progress;
  TALLY_RETURN_IF_ERROR(store_->Write(std::move(progress)).status());
  return total;
}

}  // namespace node
}  // namespace tally
