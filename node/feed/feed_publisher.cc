#include "node/feed/feed_publisher.h"

#include <algorithm>
#include <map>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "node/client/grpc_status.h"
#include "node/client/wire.h"
#include "node/feed/read_ahead.h"
#include "tree/status_macros.h"

namespace tally {
namespace node {
namespace {

constexpr uint32_t kDefaultBatch = 1000;
constexpr uint32_t kMaxBatch = 10'000;
// How long a row whose backend read answered UNAVAILABLE (its version not
// visible to the read yet) is read again (from the store: the index and
// the backend both) before its entry is skipped, and the first pause
// between two reads (doubled up to kRereadMaxPause).
constexpr absl::Duration kRereadFor = absl::Seconds(1);
constexpr absl::Duration kRereadFirstPause = absl::Milliseconds(1);
constexpr absl::Duration kRereadMaxPause = absl::Milliseconds(50);
// A batch that has been filling this long is sent before the next window
// of rows is read: under a steady stream of changes the entries never run
// out, and a batch sent only at max_batch entries or kStreamChunkBytes
// held its first changes back for as long as reading the rest took.
constexpr absl::Duration kBatchFillFor = absl::Milliseconds(20);

// One subscription. Its thread runs the loop below and calls Finish as its
// very last action; OnDone (after Finish) deletes the reactor. Nothing
// touches the reactor after Finish.
class SubscribeReactor final : public grpc::ServerWriteReactor<v1::FeedBatch> {
 public:
  SubscribeReactor(storage::Store* store, const FeedOptions& options,
                   FeedPublisher* publisher,
                   grpc::CallbackServerContext* context,
                   v1::SubscribeRequest request, storage::Sequence start)
      : store_(store),
        options_(options),
        publisher_(publisher),
        context_(context),
        request_(std::move(request)),
        position_(start) {}

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    last_write_ok_ = ok;
    if (!ok) cancelled_ = true;
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
  }

  void OnDone() override { delete this; }

  // Wakes the subscription's wait (shutdown).
  void Wake() {
    absl::MutexLock lock(&mu_);
    changed_ = true;
  }

  // Ends the subscription: a newer one of its subscriber replaced it (see
  // Write for one stuck writing).
  void Replace() {
    absl::MutexLock lock(&mu_);
    replaced_ = true;
    changed_ = true;
  }

  void StartThread(int id) {
    id_ = id;
    listener_ = store_->AddChangeListener([this](storage::Sequence) {
      absl::MutexLock lock(&mu_);
      changed_ = true;
    });

    std::thread([this] { Run(); }).detach();
  }

 private:
  void Run() {
    const absl::Status status = Loop();
    store_->RemoveChangeListener(listener_);
    publisher_->SubscriptionEnded(id_);
    Finish(ToGrpcStatus(status));  // last: OnDone may delete us
  }

  absl::Status Loop() {
    const uint32_t max_batch =
        request_.max_batch() == 0 ? kDefaultBatch : request_.max_batch();
    absl::Time last_sent = absl::InfinitePast();
    bool first = true;
    // Entries read from the log and not sent yet: [next, end).
    std::vector<storage::ChangeEntry> entries;
    size_t next = 0;
    bool read_full = false;  // the last read may have left entries behind
    // The rows of entries [next, rows_read), read ahead: rows[i] is the
    // row of entries[i] (not read for entries sent without one).
    std::vector<absl::StatusOr<storage::Row>> rows;
    size_t rows_read = 0;
    while (true) {
      if (next == entries.size()) {
        TALLY_ASSIGN_OR_RETURN(entries,
                               store_->ReadChanges(position_, max_batch));
        next = 0;
        read_full = entries.size() == max_batch;
        rows.assign(entries.size(), absl::StatusOr<storage::Row>());
        rows_read = 0;
      }
      v1::FeedBatch batch;
      batch.set_epoch(store_->epoch());
      // A batch ends at max_batch entries or about kStreamChunkBytes of
      // rows, whichever comes first; the entries left wait for the next.
      size_t bytes = 0;
      const size_t taken_from = next;
      const absl::Time filling_since = absl::Now();
      while (next < entries.size() && bytes < kStreamChunkBytes) {
        if (next == rows_read) {
          if (batch.changes_size() > 0 &&
              absl::Now() - filling_since >= kBatchFillFor) {
            break;  // send what is ready; the next batch reads on
          }
          TALLY_ASSIGN_OR_RETURN(
              rows_read,
              ReadRows(entries, next, kStreamChunkBytes - bytes, &rows));
          TALLY_RETURN_IF_ERROR(
              RereadNotVisible(entries, next, rows_read, &rows));
        }
        TALLY_RETURN_IF_ERROR(Add(entries[next], rows[next], &batch, &bytes));
        position_ = entries[next].sequence;
        ++next;
      }
      const bool took = next > taken_from;
      const bool more = next < entries.size() || read_full;
      batch.set_position(position_);
      batch.set_head(std::max(position_, store_->last_sequence()));
      // Send changes, a first message (it tells a from-head subscriber
      // where the head is), or a heartbeat when quiet for too long.
      if (batch.changes_size() > 0 || took || first ||
          absl::Now() - last_sent >= options_.heartbeat) {
        if (!Write(batch)) {
          if (replaced()) return Replaced();
          return absl::CancelledError("subscriber went away");
        }
        publisher_->BatchSent(id_, batch);
        last_sent = absl::Now();
        first = false;
      }
      if (more) continue;  // more to read now
      // Wait for a commit, a heartbeat due, or the end.
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(
          absl::Condition(
              +[](SubscribeReactor* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) {
                return r->changed_ || r->cancelled_;
              },
              this),
          std::max(absl::ZeroDuration(),
                   options_.heartbeat - (absl::Now() - last_sent)));
      if (replaced_) return Replaced();
      if (cancelled_) return absl::CancelledError("subscription cancelled");
      if (publisher_->stopping()) {
        return absl::UnavailableError("the node is shutting down");
      }
      changed_ = false;
    }
  }

  bool replaced() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return replaced_;
  }

  absl::Status Replaced() const {
    return absl::AbortedError(absl::StrFormat(
        "subscription of '%s' replaced by a newer subscription from the same "
        "subscriber",
        request_.subscriber()));
  }

  // True if `entry` is skipped whatever its row: born at the subscriber,
  // or an erase.
  bool SkippedUnread(const storage::ChangeEntry& entry) const {
    return entry.version.origin == request_.subscriber() || entry.erased;
  }

  // Reads the rows of entries[from, ...), about as many as fill `budget`
  // bytes, with one Store::MultiGet per keyspace among them, into
  // (*rows)[i]. Returns the end of the entries read.
  absl::StatusOr<size_t> ReadRows(
      const std::vector<storage::ChangeEntry>& entries, size_t from,
      size_t budget, std::vector<absl::StatusOr<storage::Row>>* rows) {
    const size_t end =
        std::min(entries.size(), from + read_ahead_.Keys(budget));
    // Entries to read by keyspace (a log interleaves keyspaces).
    std::map<absl::string_view, std::vector<size_t>> by_keyspace;
    for (size_t i = from; i < end; ++i) {
      if (!SkippedUnread(entries[i])) {
        by_keyspace[entries[i].keyspace].push_back(i);
      }
    }
    size_t read = 0;
    size_t bytes = 0;
    TALLY_RETURN_IF_ERROR(MultiGetEntries(entries, by_keyspace, rows, &bytes));
    for (const auto& [keyspace, indexes] : by_keyspace) read += indexes.size();
    read_ahead_.Saw(read, bytes);
    return end;
  }

  // Reads the row of entries[i] into (*rows)[i] for every i in
  // `by_keyspace`, one Store::MultiGet per keyspace (no keyspace: as if
  // each key were gone). Adds the bytes of the rows found to `*bytes`.
  absl::Status MultiGetEntries(
      const std::vector<storage::ChangeEntry>& entries,
      const std::map<absl::string_view, std::vector<size_t>>& by_keyspace,
      std::vector<absl::StatusOr<storage::Row>>* rows, size_t* bytes) {
    for (const auto& [keyspace, indexes] : by_keyspace) {
      std::vector<absl::string_view> keys;
      keys.reserve(indexes.size());
      for (size_t i : indexes) keys.push_back(entries[i].key);
      absl::StatusOr<std::vector<absl::StatusOr<storage::Row>>> found =
          store_->MultiGet(keyspace, keys);
      for (size_t j = 0; j < indexes.size(); ++j) {
        absl::StatusOr<storage::Row>& row = (*rows)[indexes[j]];
        if (absl::IsNotFound(found.status())) {
          row = found.status();
        } else {
          TALLY_RETURN_IF_ERROR(found.status());
          row = std::move((*found)[j]);
        }
        if (row.ok()) {
          *bytes += keyspace.size() + row->key.size() + row->value.size() +
                    row->version.origin.size() + 32;
        }
      }
    }
    return absl::OkStatus();
  }

  // Reads again the rows of entries[from, end) whose backend answered
  // UNAVAILABLE, until none does, the stream ends, or kRereadFor passes.
  //
  // Why: a sidecar's capture indexes a transaction as soon as PostgreSQL
  // decodes it, which is when its commit record is flushed — before the
  // commit is visible to other sessions. A read of the row right then (this
  // feed wakes at that very commit) still sees the previous row version
  // (or no row, for an insert), and the backend answers UNAVAILABLE; read
  // again, the row is visible a moment later. A row the backend answers
  // ABORTED is NOT read again: the table holds a version committed after
  // the indexed one, so this entry is superseded and the capture indexes
  // that write as a later entry (reading it again waited out the whole
  // bound on every window holding a row the application keeps changing:
  // a second per window, and a feed lagging by tens of seconds). A row
  // gone from the table resolves as soon as the capture indexes its delete
  // (the store's row then has another version: superseded in Add). Rows
  // still UNAVAILABLE after the bound are skipped as superseded (a later
  // entry, or anti-entropy, brings them).
  absl::Status RereadNotVisible(
      const std::vector<storage::ChangeEntry>& entries, size_t from, size_t end,
      std::vector<absl::StatusOr<storage::Row>>* rows) {
    const absl::Time give_up = absl::Now() + kRereadFor;
    absl::Duration pause = kRereadFirstPause;
    while (true) {
      std::map<absl::string_view, std::vector<size_t>> by_keyspace;
      for (size_t i = from; i < end; ++i) {
        const absl::StatusOr<storage::Row>& row = (*rows)[i];
        // A row whose index entry moved on needs no second read either.
        if (absl::IsUnavailable(row.status())) {
          by_keyspace[entries[i].keyspace].push_back(i);
        }
      }
      if (by_keyspace.empty() || absl::Now() + pause > give_up || cancelled() ||
          publisher_->stopping()) {
        return absl::OkStatus();
      }
      absl::SleepFor(pause);
      pause = std::min(pause * 2, kRereadMaxPause);
      size_t bytes = 0;
      TALLY_RETURN_IF_ERROR(
          MultiGetEntries(entries, by_keyspace, rows, &bytes));
    }
  }

  bool cancelled() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return cancelled_ || replaced_;
  }

  // Adds an entry to the batch (adding its row's size to `bytes`), or
  // counts why it is skipped. `row` is the entry's row as ReadRows read it.
  absl::Status Add(const storage::ChangeEntry& entry,
                   const absl::StatusOr<storage::Row>& row,
                   v1::FeedBatch* batch, size_t* bytes) {
    if (entry.version.origin == request_.subscriber()) {
      batch->set_skipped_own(batch->skipped_own() + 1);
      return absl::OkStatus();
    }
    if (entry.erased) {
      batch->set_skipped_superseded(batch->skipped_superseded() + 1);
      return absl::OkStatus();
    }
    // A damaged row (DATA_LOSS, now marked for repair) is never sent; the
    // subscriber gets it from anti-entropy. ABORTED: a backend whose rows
    // live elsewhere (a PostgreSQL table) holds a later version of the row;
    // its capture indexes that change as a later entry, which this feed
    // sends in turn. UNAVAILABLE: still not visible after RereadNotVisible's
    // reads. (Ending the subscription for them, as before, made a feed
    // under steady application writes reconnect and back off again and
    // again.)
    if (absl::IsNotFound(row.status()) || absl::IsDataLoss(row.status()) ||
        absl::IsAborted(row.status()) || absl::IsUnavailable(row.status()) ||
        (row.ok() && row->version != entry.version)) {
      // A later entry (or an erase) replaced this one.
      batch->set_skipped_superseded(batch->skipped_superseded() + 1);
      return absl::OkStatus();
    }
    if (!row.ok()) return row.status();
    *bytes += entry.keyspace.size() + row->key.size() + row->value.size() +
              row->version.origin.size() + 32;
    v1::FeedChange* change = batch->add_changes();
    change->set_sequence(entry.sequence);
    change->set_keyspace(entry.keyspace);
    ToProto(*row, change->mutable_row());
    return absl::OkStatus();
  }

  // Writes one message and waits until it is sent. False when it was not
  // (the stream ended); a cancellation after it was sent is seen at the
  // next wait.
  bool Write(const v1::FeedBatch& batch) {
    {
      absl::MutexLock lock(&mu_);
      if (cancelled_ || replaced_) return false;
      writing_ = true;
    }
    StartWrite(&batch);
    bool stuck = false;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](SubscribeReactor* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) {
            return !r->writing_ || r->cancelled_ || r->replaced_;
          },
          this));
      if (writing_ && replaced_ && !cancelled_) {
        // Replaced while its subscriber does not take this write: a moment
        // for a reader that is merely slow, then the call is cancelled so
        // that the thread is not held forever.
        stuck = !mu_.AwaitWithTimeout(
            absl::Condition(
                +[](SubscribeReactor* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) {
                  return !r->writing_;
                },
                this),
            absl::Seconds(1));
      }
    }
    if (stuck) context_->TryCancel();  // not under mu_: OnCancel takes it
    absl::MutexLock lock(&mu_);
    // A cancelled write may still be in flight: wait for its OnWriteDone
    // before the batch goes out of scope.
    mu_.Await(absl::Condition(
        +[](SubscribeReactor* r)
             ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) { return !r->writing_; },
        this));
    return last_write_ok_;
  }

  // Constant after construction.
  storage::Store* const store_;
  const FeedOptions options_;
  FeedPublisher* const publisher_;
  // Valid until OnDone, which follows the thread's Finish.
  grpc::CallbackServerContext* const context_;
  int id_ = 0;
  const v1::SubscribeRequest request_;
  int listener_ = 0;
  // Used by the subscription's thread only.
  storage::Sequence position_;
  internal::ReadAhead read_ahead_;

  absl::Mutex mu_;
  bool changed_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool last_write_ok_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool replaced_ ABSL_GUARDED_BY(mu_) = false;
};

absl::Status ValidateSubscribe(const v1::SubscribeRequest& request) {
  TALLY_RETURN_IF_ERROR(storage::ValidateNodeName(request.subscriber()));
  if (request.max_batch() > kMaxBatch) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "max_batch is %d; the limit is %d", request.max_batch(), kMaxBatch));
  }
  return absl::OkStatus();
}

// A reactor that only finishes (bad request).
class RefusedReactor final : public grpc::ServerWriteReactor<v1::FeedBatch> {
 public:
  explicit RefusedReactor(const absl::Status& status) {
    Finish(ToGrpcStatus(status));
  }
  void OnDone() override { delete this; }
};

}  // namespace

FeedPublisher::FeedPublisher(storage::Store* store, FeedOptions options)
    : store_(store), options_(options) {}

int FeedPublisher::SubscriptionStarted(const std::string& subscriber,
                                       uint64_t position,
                                       std::function<void()> wake,
                                       std::function<void()> replace) {
  // Asked before the lock: the answer takes the scheduler's.
  const bool listed = !options_.is_peer || options_.is_peer(subscriber);
  absl::MutexLock lock(&mu_);
  // Replaced subscriptions take up to a second to end (one stuck writing);
  // a client replacing its own in a tight loop must not pile up threads.
  if (subscriptions_ >= 2 * std::max(1, options_.max_subscriptions)) return 0;
  auto current = current_.find(subscriber);
  if (current == current_.end()) {
    if (current_.size() >=
        static_cast<size_t>(std::max(0, options_.max_subscriptions))) {
      return 0;
    }
    if (!listed &&
        unlisted_.size() >=
            static_cast<size_t>(std::max(0, options_.max_subscriptions / 2))) {
      return -1;
    }
  } else {
    // The older one ends on its own thread; its slot is this one's now.
    const int older = current->second;
    auto replacer = replacers_.find(older);
    if (replacer != replacers_.end()) replacer->second();
    replacers_.erase(older);
    stats_.erase(older);
  }
  ++subscriptions_;
  const int id = next_id_++;
  current_[subscriber] = id;
  if (listed) {
    unlisted_.erase(subscriber);
  } else {
    unlisted_.insert(subscriber);
  }
  wakers_[id] = std::move(wake);
  replacers_[id] = std::move(replace);
  SubscriptionStats& stats = stats_[id];
  stats.subscriber = subscriber;
  stats.position = position;
  return id;
}

void FeedPublisher::SubscriptionEnded(int id) {
  absl::MutexLock lock(&mu_);
  --subscriptions_;
  wakers_.erase(id);
  replacers_.erase(id);
  stats_.erase(id);
  for (auto it = current_.begin(); it != current_.end(); ++it) {
    if (it->second == id) {
      unlisted_.erase(it->first);
      current_.erase(it);
      break;
    }
  }
}

void FeedPublisher::BatchSent(int id, const v1::FeedBatch& batch) {
  absl::MutexLock lock(&mu_);
  auto it = stats_.find(id);
  if (it == stats_.end()) return;
  for (SubscriptionStats* s : {&it->second, &totals_}) {
    s->position = batch.position();
    s->sent += batch.changes_size();
    s->skipped_own += batch.skipped_own();
    s->skipped_superseded += batch.skipped_superseded();
  }
}

void FeedPublisher::FillStatus(v1::StatusResponse* response) {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, stats] : stats_) {
    v1::FeedSubscriptionStatus* s = response->add_subscriptions();
    s->set_subscriber(stats.subscriber);
    s->set_position(stats.position);
    s->set_sent(stats.sent);
    s->set_skipped_own(stats.skipped_own);
    s->set_skipped_superseded(stats.skipped_superseded);
  }
  v1::FeedTotals* totals = response->mutable_feed();
  totals->set_sent(totals_.sent);
  totals->set_skipped_own(totals_.skipped_own);
  totals->set_skipped_superseded(totals_.skipped_superseded);
}

void FeedPublisher::Shutdown() {
  stopping_ = true;
  // Wake every subscription now rather than at its next heartbeat, so that
  // the server's shutdown does not wait for them.
  absl::MutexLock lock(&mu_);
  for (const auto& [id, wake] : wakers_) wake();
}

void FeedPublisher::WaitForSubscriptions() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* n) { return *n == 0; }, &subscriptions_));
}

grpc::ServerWriteReactor<v1::FeedBatch>* FeedPublisher::Subscribe(
    grpc::CallbackServerContext* context, const v1::SubscribeRequest* request) {
  absl::Status status = ValidateSubscribe(*request);
  if (!status.ok()) return new RefusedReactor(status);
  if (stopping_.load()) {
    return new RefusedReactor(
        absl::UnavailableError("the node is shutting down"));
  }
  const storage::Sequence head = store_->last_sequence();
  storage::Sequence start = head;
  if (!request->from_head()) {
    if (request->epoch() != store_->epoch()) {
      return new RefusedReactor(absl::FailedPreconditionError(absl::StrFormat(
          "epoch mismatch: the position is in epoch %016x, this node's log "
          "is epoch %016x (its data was reset); run anti-entropy and "
          "subscribe from the head",
          request->epoch(), store_->epoch())));
    }
    if (request->after() > head) {
      return new RefusedReactor(absl::FailedPreconditionError(absl::StrFormat(
          "position %d is beyond the end of this node's log (%d); run "
          "anti-entropy and subscribe from the head",
          request->after(), head)));
    }
    start = request->after();
  }
  // The reactor starts its thread only once registered, so that a
  // shutdown can always wake it.
  auto* reactor =
      new SubscribeReactor(store_, options_, this, context, *request, start);
  const int id = SubscriptionStarted(
      request->subscriber(), start, [reactor] { reactor->Wake(); },
      [reactor] { reactor->Replace(); });
  if (id <= 0) {
    delete reactor;
    return new RefusedReactor(absl::ResourceExhaustedError(
        id == 0
            ? absl::StrFormat("this node serves at most %d feed subscriptions",
                              options_.max_subscriptions)
            : absl::StrFormat(
                  "this node serves at most %d feed subscriptions to "
                  "nodes it does not list as peers (the rest are kept "
                  "for its peers); list '%s' as a peer there",
                  options_.max_subscriptions / 2,
                  absl::CHexEscape(request->subscriber()))));
  }
  reactor->StartThread(id);
  return reactor;
}

}  // namespace node
}  // namespace tally
