#include "node/feed/feed_subscriber.h"

#include <algorithm>
#include <iterator>
#include <random>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "node/client/wire.h"
#include "node/observe/log.h"
#include "node/sync/schema_check.h"
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
// How old the upstream's schema fingerprints may get before a commit asks
// for them again (an ALTER on either side changes them).
constexpr absl::Duration kSchemaRefresh = absl::Seconds(5);
// ... or this old, when a change names a keyspace the last answer did not
// list (the upstream created it since: its first rows must not reach the
// database unchecked).
constexpr absl::Duration kSchemaRefreshNewKeyspace = absl::Seconds(1);

struct FeedSubscriber::KeyspaceOutcome {
  uint64_t applied = 0;
  uint64_t left_out = 0;
  // The last change left out, and why.
  std::string reason;
  std::string key;
  absl::Status error;

  void LeaveOut(absl::string_view why, const std::string& last_key,
                absl::Status status) {
    ++left_out;
    reason = std::string(why);
    key = last_key;
    error = std::move(status);
  }
};

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
    std::function<absl::Status(const std::string&)> check_upstream,
    KeyspaceTrouble* trouble, std::function<void()> request_repair)
    : store_(store),
      client_(client),
      request_session_(std::move(request_session)),
      check_upstream_(std::move(check_upstream)),
      trouble_(trouble),
      request_repair_(std::move(request_repair)),
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
  NoteSchemas(upstream, hello);
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
  RefreshSchemas(upstream, batch.write);
  Outcomes outcomes;
  {
    // Changes of a keyspace whose schema differs from the upstream's are
    // never sent to the backend: its database would refuse them, or worse,
    // take them into a table of another shape.
    absl::MutexLock lock(&schema_mu_);
    if (!schema_refusals_.empty()) {
      std::vector<storage::Mutation> kept;
      kept.reserve(batch.write.mutations.size());
      for (storage::Mutation& m : batch.write.mutations) {
        auto it = schema_refusals_.find(m.keyspace);
        if (it == schema_refusals_.end()) {
          kept.push_back(std::move(m));
          continue;
        }
        outcomes[m.keyspace].LeaveOut(kTroubleSchema, m.key, it->second);
      }
      batch.write.mutations = std::move(kept);
    }
  }
  uint64_t applied = 0;
  uint64_t not_newer = 0;
  TALLY_RETURN_IF_ERROR(
      WriteIsolated(std::move(batch.write), &outcomes, &applied, &not_newer));
  uint64_t rejected = 0;
  for (const auto& [keyspace, outcome] : outcomes) rejected += outcome.left_out;
  Report(upstream, outcomes);
  absl::MutexLock lock(&mu_);
  counters_.received += batch.received;
  counters_.applied += applied;
  counters_.not_newer += not_newer;
  counters_.refused_skew += batch.refused_skew;
  counters_.skipped_own += batch.skipped_own;
  counters_.skipped_superseded += batch.skipped_superseded;
  counters_.rejected += rejected;
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

absl::Status FeedSubscriber::WriteIsolated(storage::WriteRequest write,
                                           Outcomes* outcomes,
                                           uint64_t* applied,
                                           uint64_t* not_newer) {
  // Kept for the write keyspace by keyspace (rare: only after a whole
  // write failed for a reason of its rows).
  storage::WriteRequest copy = write;
  // Every keyspace not taken is most likely the backend's trouble (its
  // database not reached), not theirs: then the batch is retried whole.
  write.refuse_when_none_taken = true;
  absl::StatusOr<storage::WriteResult> result = store_->Write(std::move(write));
  auto count = [&](const std::vector<storage::Mutation>& mutations,
                   const storage::WriteResult& r) {
    size_t next = 0;
    for (size_t i = 0; i < r.applied.size(); ++i) {
      if (next < r.rejected.size() && r.rejected[next].index == i) {
        const storage::RejectedMutation& x = r.rejected[next++];
        (*outcomes)[x.keyspace].LeaveOut(x.dropped     ? kTroubleDropped
                                         : x.not_taken ? kTroubleNotTaken
                                                       : kTroubleRejected,
                                         x.key, x.status);
        continue;
      }
      if (r.applied[i]) {
        ++*applied;
        ++(*outcomes)[mutations[i].keyspace].applied;
      } else {
        ++*not_newer;
      }
    }
  };
  if (result.ok()) {
    count(copy.mutations, *result);
    return absl::OkStatus();
  }
  if (absl::IsCancelled(result.status()) || copy.mutations.empty()) {
    return result.status();
  }
  // The write failed whole: the backend failed it for a reason of some row
  // (a backend that cannot isolate a row its database refused answers the
  // whole call with the row's error, whatever its code), or no keyspace was
  // taken, or the store or the database is down. Written again keyspace by
  // keyspace, in the order the keyspaces first come (a key is in one
  // keyspace, so each key's changes keep their order): the keyspaces whose
  // write fails again are left out when some other keyspace's write went
  // through; when every keyspace's fails, the trouble is no keyspace's
  // own, and the batch is retried whole (the keyspaces written meanwhile
  // are replays then, which change nothing).
  std::vector<std::string> order;
  absl::flat_hash_map<std::string, std::vector<storage::Mutation>> by_keyspace;
  for (storage::Mutation& m : copy.mutations) {
    auto [it, added] = by_keyspace.try_emplace(m.keyspace);
    if (added) order.push_back(m.keyspace);
    it->second.push_back(std::move(m));
  }
  struct Failed {
    std::string keyspace;
    absl::string_view reason;
    absl::Status status;
    std::vector<storage::Mutation> mutations;
  };
  std::vector<Failed> failed;
  std::vector<std::pair<std::vector<storage::Mutation>, storage::WriteResult>>
      written;
  for (const std::string& keyspace : order) {
    storage::WriteRequest one;
    one.mode = copy.mode;
    one.mutations = std::move(by_keyspace[keyspace]);
    std::vector<storage::Mutation> mutations = one.mutations;
    absl::StatusOr<storage::WriteResult> r = store_->Write(std::move(one));
    if (!r.ok()) {
      if (absl::IsCancelled(r.status())) return r.status();
      failed.push_back(
          {keyspace, kTroubleRejected, r.status(), std::move(mutations)});
    } else if (!r->rejected.empty() && r->rejected.size() == mutations.size() &&
               r->rejected.front().not_taken) {
      // Not taken at all: as good as failed, for telling whether any
      // keyspace went through.
      failed.push_back({keyspace, kTroubleNotTaken, r->rejected.front().status,
                        std::move(mutations)});
    } else {
      written.emplace_back(std::move(mutations), *std::move(r));
    }
  }
  if (written.empty()) return result.status();
  for (const auto& [mutations, r] : written) count(mutations, r);
  for (const Failed& f : failed) {
    KeyspaceOutcome& outcome = (*outcomes)[f.keyspace];
    for (const storage::Mutation& m : f.mutations) {
      outcome.LeaveOut(f.reason, m.key, f.status);
    }
  }
  // The position moves past what was left out: sessions repair it.
  storage::WriteRequest progress;
  progress.progress = copy.progress;
  return store_->Write(std::move(progress)).status();
}

void FeedSubscriber::Report(const std::string& upstream,
                            const Outcomes& outcomes) {
  bool left_out = false;
  for (const auto& [keyspace, outcome] : outcomes) {
    if (outcome.left_out > 0) {
      left_out = true;
      if (trouble_ != nullptr) {
        trouble_->Rejected({keyspace, outcome.reason, outcome.key,
                            outcome.error, upstream, outcome.left_out});
      }
    } else if (outcome.applied > 0 && trouble_ != nullptr) {
      trouble_->Flowed(keyspace);
    }
  }
  if (left_out && request_repair_) request_repair_();
}

void FeedSubscriber::NoteSchemas(const std::string& upstream,
                                 const v1::HandshakeResponse& hello) {
  const absl::flat_hash_map<std::string, std::string> fingerprints =
      SchemaFingerprints(hello);
  const absl::flat_hash_map<std::string, std::string> descriptions =
      SchemaDescriptions(hello);
  absl::flat_hash_map<std::string, absl::Status> refusals;
  absl::flat_hash_set<std::string> known;
  for (const v1::KeyspaceSummary& ks : hello.keyspaces()) {
    known.insert(ks.name());
    const absl::Status schema = CheckKeyspaceSchema(
        *store_, ks.name(), fingerprints, upstream, descriptions);
    // Only a difference both sides told: a fingerprint this node cannot
    // tell now (a keyspace being rebuilt) is the store's to refuse.
    if (absl::IsFailedPrecondition(schema)) refusals[ks.name()] = schema;
  }
  absl::MutexLock lock(&schema_mu_);
  schema_refusals_ = std::move(refusals);
  schemas_known_ = std::move(known);
  schemas_at_ = absl::Now();
}

void FeedSubscriber::RefreshSchemas(const std::string& upstream,
                                    const storage::WriteRequest& batch) {
  {
    absl::MutexLock lock(&schema_mu_);
    const absl::Duration age = absl::Now() - schemas_at_;
    if (age < kSchemaRefreshNewKeyspace) return;
    if (age < kSchemaRefresh) {
      const bool unknown = std::any_of(
          batch.mutations.begin(), batch.mutations.end(),
          [this](const storage::Mutation& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(
              schema_mu_) { return !schemas_known_.contains(m.keyspace); });
      if (!unknown) return;
    }
    // Not again before the interval, even when the handshake fails.
    schemas_at_ = absl::Now();
  }
  absl::StatusOr<v1::HandshakeResponse> hello = client_->Handshake({}, 0);
  if (!hello.ok()) {
    // The last answer stands; the stream itself reports a dead link.
    LogDebug("feed: asking the upstream's schemas failed",
             {{"upstream", upstream}, {"error", hello.status()}});
    return;
  }
  NoteSchemas(upstream, *hello);
}

}  // namespace node
}  // namespace tally
