// FeedSubscriber against a real publisher (the Peer service over a real
// store, in this process) reached through a TcpProxy, so that the link can
// be cut: the backlog arrives in order with its position, and Stop() is
// prompt even when the link went silent.
#include "node/feed/feed_subscriber.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "node/feed/keyspace_trouble.h"
#include "node/rpc/peer_service.h"
#include "node/worker_pool.h"
#include "support/tcp_proxy.h"
#include "support/temp_dir.h"
#include "tree/status_macros.h"

namespace tally {
namespace node {
namespace {

using ::tally::testing::TcpProxy;
using ::tally::testing::TempDir;

// The embedded backend, counting its ApplyRows calls (the transactions a
// PostgreSQL backend would run), each taking `delay` (a database commit),
// and refusing, as a CAS that finds the row changed would, every row whose
// key starts with "refused".
class CountingBackend : public storage::RowBackend {
 public:
  explicit CountingBackend(absl::Duration delay = absl::ZeroDuration())
      : inner_(storage::NewEmbeddedBackend()), delay_(delay) {}

  int calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

  absl::string_view name() const override { return "counting"; }
  absl::Status ApplyRows(absl::Span<const storage::RowChange> rows,
                         std::vector<storage::RowOutcome>* outcomes) override {
    {
      absl::MutexLock lock(&mu_);
      ++calls_;
    }
    absl::SleepFor(delay_);
    TALLY_RETURN_IF_ERROR(inner_->ApplyRows(rows, outcomes));
    for (size_t i = 0; i < rows.size(); ++i) {
      if (absl::StartsWith(rows[i].row.key, "refused")) {
        (*outcomes)[i].applied = false;
      }
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ReadValue(
      const storage::RowLocation& row,
      absl::string_view payload) const override {
    return inner_->ReadValue(row, payload);
  }
  absl::StatusOr<std::vector<absl::StatusOr<std::string>>> ReadValues(
      absl::Span<const storage::RowLocation> rows,
      absl::Span<const absl::string_view> payloads) const override {
    return inner_->ReadValues(rows, payloads);
  }
  absl::StatusOr<std::string> SchemaFingerprint(
      absl::string_view keyspace) const override {
    return inner_->SchemaFingerprint(keyspace);
  }

 private:
  const std::unique_ptr<storage::RowBackend> inner_;
  const absl::Duration delay_;
  mutable absl::Mutex mu_;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
};

// The embedded backend with one keyspace in trouble, as a PostgreSQL
// sidecar's table can be: kIsolates rejects its rows one by one
// (RowOutcome::rejected, the other rows applied), kFailsWhole fails the
// whole ApplyRows call as soon as one of its rows is in it (a backend that
// cannot isolate a row its database refused), kNotTaken takes no rows of it
// (TakesRows: a keyspace being rebuilt). heal() ends the trouble.
class TroubledBackend : public storage::RowBackend {
 public:
  enum class Mode { kIsolates, kFailsWhole, kNotTaken };
  TroubledBackend(Mode mode, std::string troubled)
      : inner_(storage::NewEmbeddedBackend()),
        mode_(mode),
        troubled_(std::move(troubled)) {}

  void heal() { healed_ = true; }

  absl::string_view name() const override { return "troubled"; }
  absl::Status TakesRows(absl::string_view keyspace) const override {
    if (mode_ == Mode::kNotTaken && !healed_ && keyspace == troubled_) {
      return absl::UnavailableError("keyspace is rebuilding");
    }
    return absl::OkStatus();
  }
  absl::Status ApplyRows(absl::Span<const storage::RowChange> rows,
                         std::vector<storage::RowOutcome>* outcomes) override {
    const auto bad = [&](const storage::RowChange& c) {
      return !healed_ && c.row.keyspace == troubled_;
    };
    if (mode_ == Mode::kFailsWhole &&
        std::any_of(rows.begin(), rows.end(), bad)) {
      return absl::InvalidArgumentError(
          "insufficient data left in message (column v)");
    }
    TALLY_RETURN_IF_ERROR(inner_->ApplyRows(rows, outcomes));
    for (size_t i = 0; i < rows.size(); ++i) {
      if (mode_ == Mode::kIsolates && bad(rows[i])) {
        (*outcomes)[i].applied = false;
        (*outcomes)[i].payload.clear();
        (*outcomes)[i].rejected =
            absl::InvalidArgumentError("invalid input syntax for type integer");
      }
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ReadValue(
      const storage::RowLocation& row,
      absl::string_view payload) const override {
    return inner_->ReadValue(row, payload);
  }
  absl::StatusOr<std::vector<absl::StatusOr<std::string>>> ReadValues(
      absl::Span<const storage::RowLocation> rows,
      absl::Span<const absl::string_view> payloads) const override {
    return inner_->ReadValues(rows, payloads);
  }
  absl::StatusOr<std::string> SchemaFingerprint(
      absl::string_view keyspace) const override {
    return inner_->SchemaFingerprint(keyspace);
  }

 private:
  const std::unique_ptr<storage::RowBackend> inner_;
  const Mode mode_;
  const std::string troubled_;
  std::atomic<bool> healed_{false};
};

std::unique_ptr<storage::Store> OpenStore(
    const std::string& dir, const std::string& name,
    std::shared_ptr<storage::RowBackend> backend = nullptr) {
  storage::StoreOptions options;
  options.node_name = name;
  options.sync = false;
  if (backend != nullptr) options.backend = std::move(backend);
  auto store = storage::Store::Open(dir, options);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

class FeedSubscriberTest : public ::testing::Test {
 protected:
  void SetUp() override {
    publisher_ = OpenStore(publisher_dir_.path(), "publisher");
    subscriber_ = OpenStore(subscriber_dir_.path(), "subscriber");
    ASSERT_NE(publisher_, nullptr);
    ASSERT_NE(subscriber_, nullptr);
    pool_ = std::make_unique<WorkerPool>(2, 64);
    FeedOptions feed;
    feed.heartbeat = absl::Milliseconds(100);
    service_ = std::make_unique<PeerService>(publisher_.get(), pool_.get(),
                                             nullptr, feed);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(port, 0);
    auto proxy = TcpProxy::Start(absl::StrCat("127.0.0.1:", port));
    ASSERT_TRUE(proxy.ok()) << proxy.status();
    proxy_ = std::move(*proxy);
    ClientOptions client_options;
    client_options.node_name = "subscriber";
    client_options.epoch = subscriber_->epoch();
    auto client = NodeClient::Connect(proxy_->address(), client_options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }

  void TearDown() override {
    feed_.reset();
    // Closing the proxy's connections ends the publisher's streams that a
    // black hole left waiting.
    proxy_.reset();
    service_->StopFeeds();
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(5));
    server_->Wait();
    service_->WaitForFeeds();
    pool_.reset();
  }

  void Start() {
    feed_ = std::make_unique<FeedSubscriber>(subscriber_.get(), client_.get(),
                                             [] {});
    feed_->Start();
  }

  // Writes `n` rows at the publisher, in batches of 1,000; rows i and
  // i + n/2 share a key, so the later write supersedes the earlier.
  void Write(int n, const std::string& value) {
    storage::WriteRequest w;
    for (int i = 0; i < n; ++i) {
      w.mutations.push_back(storage::Mutation::Put(
          "ks", absl::StrCat("key-", i % (n / 2)), absl::StrCat(value, i)));
      if (w.mutations.size() == 1000 || i == n - 1) {
        ASSERT_TRUE(publisher_->Write(std::move(w)).ok());
        w = storage::WriteRequest{};
      }
    }
  }

  // Waits up to 20 s for `done`.
  bool WaitFor(const std::function<bool()>& done) {
    for (int i = 0; i < 2000; ++i) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return done();
  }

  TempDir publisher_dir_;
  TempDir subscriber_dir_;
  std::unique_ptr<storage::Store> publisher_;
  std::unique_ptr<storage::Store> subscriber_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<PeerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<TcpProxy> proxy_;
  std::unique_ptr<NodeClient> client_;
  std::unique_ptr<FeedSubscriber> feed_;
};

TEST_F(FeedSubscriberTest, AppliesABacklogInOrderAndStoresItsPosition) {
  // Stored progress in the publisher's epoch at 0: the subscriber follows
  // from the start of the log (not from the head).
  storage::WriteRequest at_start;
  at_start.progress =
      storage::UpstreamProgress{"publisher", publisher_->epoch(), 0};
  ASSERT_TRUE(subscriber_->Write(std::move(at_start)).ok());
  constexpr int kRows = 30'000;
  Write(kRows, "v");
  Start();
  const storage::Sequence head = publisher_->last_sequence();
  ASSERT_TRUE(WaitFor([&] { return feed_->counters().position == head; }))
      << feed_->counters().position << " of " << head;
  feed_->Stop();
  const FeedCounters counters = feed_->counters();
  // Superseded entries are skipped; every key arrives once, its last value.
  EXPECT_EQ(counters.received, uint64_t{kRows / 2});
  EXPECT_EQ(counters.applied, uint64_t{kRows / 2});
  EXPECT_EQ(counters.skipped_superseded, uint64_t{kRows / 2});
  for (int i = 0; i < kRows / 2; i += 997) {
    absl::StatusOr<storage::Row> row =
        subscriber_->Get("ks", absl::StrCat("key-", i));
    ASSERT_TRUE(row.ok()) << row.status();
    EXPECT_EQ(row->value, absl::StrCat("v", i + kRows / 2));
    EXPECT_EQ(row->version.origin, "publisher");
  }
  absl::StatusOr<storage::UpstreamProgress> progress =
      subscriber_->GetProgress("publisher");
  ASSERT_TRUE(progress.ok()) << progress.status();
  EXPECT_EQ(progress->sequence, head);
  EXPECT_EQ(progress->epoch, publisher_->epoch());
}

// Live traffic comes as batches of a change or two. While the backend
// commits one, those arriving are merged and applied together: one
// ApplyRows call (one PostgreSQL transaction for a sidecar) per merged
// batch, not one per change, and with the rows and versions the publisher
// has, two changes of one key in one merged batch included.
TEST_F(FeedSubscriberTest, MergesWaitingBatchesIntoOneApply) {
  auto backend = std::make_shared<CountingBackend>(absl::Milliseconds(20));
  subscriber_.reset();
  subscriber_ = OpenStore(subscriber_dir_.path(), "subscriber", backend);
  ASSERT_NE(subscriber_, nullptr);
  storage::WriteRequest at_start;
  at_start.progress =
      storage::UpstreamProgress{"publisher", publisher_->epoch(), 0};
  ASSERT_TRUE(subscriber_->Write(std::move(at_start)).ok());
  Start();
  ASSERT_TRUE(WaitFor([&] { return feed_->counters().connected; }));
  const int before = backend->calls();
  // One write per change, 3 of each key: the publisher sends them as they
  // come, each in its own batch.
  constexpr int kChanges = 300;
  for (int i = 0; i < kChanges; ++i) {
    storage::WriteRequest w;
    w.mutations.push_back(storage::Mutation::Put(
        "ks", absl::StrCat("key-", i % (kChanges / 3)), absl::StrCat("v", i)));
    ASSERT_TRUE(publisher_->Write(std::move(w)).ok());
    if (i % 10 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const storage::Sequence head = publisher_->last_sequence();
  ASSERT_TRUE(WaitFor([&] { return feed_->counters().position == head; }))
      << feed_->counters().position << " of " << head;
  feed_->Stop();
  const int calls = backend->calls() - before;
  EXPECT_GE(calls, 1);
  EXPECT_LE(calls, kChanges / 10) << "one ApplyRows per change or so";
  for (int i = 0; i < kChanges / 3; ++i) {
    const std::string key = absl::StrCat("key-", i);
    absl::StatusOr<storage::Row> want = publisher_->Get("ks", key);
    absl::StatusOr<storage::Row> got = subscriber_->Get("ks", key);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << key << ": " << got.status();
    EXPECT_EQ(got->value, absl::StrCat("v", i + 2 * kChanges / 3));
    EXPECT_EQ(got->value, want->value);
    EXPECT_EQ(got->version, want->version) << key;
  }
  absl::StatusOr<storage::UpstreamProgress> progress =
      subscriber_->GetProgress("publisher");
  ASSERT_TRUE(progress.ok()) << progress.status();
  EXPECT_EQ(progress->sequence, head);
}

// What a merged batch relies on from the store: one write of many replicated
// changes (two of one key, one older than the row held, one the backend
// refuses) ends as writing them one by one would — same rows, versions,
// per-change outcome and change log — with one ApplyRows call.
TEST(MergedWriteTest, OneWriteEqualsWritesOneByOne) {
  std::vector<storage::Mutation> changes;
  auto change = [&](const std::string& key, const std::string& value,
                    uint64_t wall, bool deleted = false) {
    storage::Mutation m = deleted ? storage::Mutation::Delete("ks", key)
                                  : storage::Mutation::Put("ks", key, value);
    m.version =
        tree::Version{tree::HlcTimestamp::FromParts(wall, 0), "upstream"};
    changes.push_back(std::move(m));
  };
  const uint64_t now = absl::ToUnixMillis(absl::Now());
  change("a", "a1", now - 900);
  change("b", "b1", now - 800);
  change("a", "a2", now - 700);  // the later version of a wins
  change("c", "c-new", now - 600);
  change("c", "c-old", now - 650);      // older than the c just written
  change("refused-1", "r", now - 500);  // the backend's CAS refuses it
  change("b", "", now - 400, /*deleted=*/true);
  change("d", "d1", now - 300);
  change("held", "stale", now - 5000);  // older than the row held

  struct Result {
    std::vector<bool> applied;
    std::vector<storage::ChangeEntry> log;
    std::vector<storage::Row> rows;
    int calls = 0;
  };
  auto run = [&](bool merged) {
    Result r;
    TempDir dir;
    auto backend = std::make_shared<CountingBackend>();
    auto store = OpenStore(dir.path(), "node", backend);
    EXPECT_NE(store, nullptr);
    if (store == nullptr) return r;
    storage::WriteRequest held;
    storage::Mutation m = storage::Mutation::Put("ks", "held", "kept");
    m.version =
        tree::Version{tree::HlcTimestamp::FromParts(now - 1000, 0), "other"};
    held.mutations.push_back(std::move(m));
    EXPECT_TRUE(store->Write(std::move(held)).ok());
    const int before = backend->calls();
    const storage::Sequence first = store->last_sequence();
    if (merged) {
      storage::WriteRequest w;
      w.mutations = changes;
      w.progress = storage::UpstreamProgress{"upstream", 1, 9};
      absl::StatusOr<storage::WriteResult> result = store->Write(std::move(w));
      EXPECT_TRUE(result.ok()) << result.status();
      if (result.ok()) r.applied = result->applied;
    } else {
      for (size_t i = 0; i < changes.size(); ++i) {
        storage::WriteRequest w;
        w.mutations.push_back(changes[i]);
        w.progress = storage::UpstreamProgress{"upstream", 1, i + 1};
        absl::StatusOr<storage::WriteResult> result =
            store->Write(std::move(w));
        EXPECT_TRUE(result.ok()) << result.status();
        if (result.ok()) r.applied.push_back(result->applied[0]);
      }
    }
    r.calls = backend->calls() - before;
    absl::StatusOr<std::vector<storage::ChangeEntry>> log =
        store->ReadChanges(first, 1000);
    EXPECT_TRUE(log.ok()) << log.status();
    if (log.ok()) r.log = *log;
    for (const char* key : {"a", "b", "c", "d", "held", "refused-1"}) {
      absl::StatusOr<storage::Row> row = store->Get("ks", key);
      if (row.ok()) {
        r.rows.push_back(*row);
      } else {
        EXPECT_TRUE(absl::IsNotFound(row.status())) << row.status();
        storage::Row none;
        none.key = key;
        none.value = "<none>";
        r.rows.push_back(std::move(none));
      }
    }
    absl::StatusOr<storage::UpstreamProgress> progress =
        store->GetProgress("upstream");
    EXPECT_TRUE(progress.ok()) << progress.status();
    if (progress.ok()) EXPECT_EQ(progress->sequence, 9u);
    return r;
  };
  const Result one_by_one = run(false);
  const Result merged = run(true);
  EXPECT_EQ(one_by_one.calls, 7);  // "c-old" and "held" need none
  EXPECT_EQ(merged.calls, 1);
  EXPECT_EQ(merged.applied, one_by_one.applied);
  EXPECT_EQ(merged.applied, (std::vector<bool>{true, true, true, true, false,
                                               false, true, true, false}));
  ASSERT_EQ(merged.rows.size(), one_by_one.rows.size());
  for (size_t i = 0; i < merged.rows.size(); ++i) {
    const storage::Row& m = merged.rows[i];
    const storage::Row& o = one_by_one.rows[i];
    EXPECT_EQ(m.key, o.key);
    EXPECT_EQ(m.value, o.value) << o.key;
    EXPECT_EQ(m.version, o.version) << o.key;
    EXPECT_EQ(m.deleted, o.deleted) << o.key;
  }
  EXPECT_EQ(merged.rows[0].value, "a2");
  EXPECT_EQ(merged.rows[2].value, "c-new");
  EXPECT_TRUE(merged.rows[1].deleted);
  EXPECT_EQ(merged.rows[4].value, "kept");
  ASSERT_EQ(merged.log.size(), one_by_one.log.size());
  for (size_t i = 0; i < merged.log.size(); ++i) {
    EXPECT_EQ(merged.log[i].key, one_by_one.log[i].key) << i;
    EXPECT_EQ(merged.log[i].version, one_by_one.log[i].version) << i;
    EXPECT_EQ(merged.log[i].deleted, one_by_one.log[i].deleted) << i;
  }
}

TEST_F(FeedSubscriberTest, StopsPromptlyOnASilentlyDeadLink) {
  Start();
  ASSERT_TRUE(WaitFor([&] { return feed_->counters().connected; }));
  Write(100, "before");
  const storage::Sequence head = publisher_->last_sequence();
  ASSERT_TRUE(WaitFor([&] { return feed_->counters().position == head; }));
  // Nothing passes any more, and nothing is closed: the stream waits for a
  // message that never comes (keepalive would end it after ~10 s).
  proxy_->Cut(TcpProxy::CutMode::kBlackhole);
  Write(100, "after");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto start = std::chrono::steady_clock::now();
  feed_->Stop();
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, std::chrono::seconds(2))
      << std::chrono::duration<double>(took).count() << " s";
  // What arrived before the cut stays applied, with its position.
  absl::StatusOr<storage::UpstreamProgress> progress =
      subscriber_->GetProgress("publisher");
  ASSERT_TRUE(progress.ok()) << progress.status();
  EXPECT_EQ(progress->sequence, head);
}

// The README's alert `tally_feed_lag_seconds > 30` must fire when the
// upstream cannot be reached: the lag was 0 for as long as the link was
// down, because nothing arrived to say the node was behind.
TEST_F(FeedSubscriberTest, FeedLagGrowsWhileTheUpstreamIsUnreachable) {
  Start();
  Write(100, "before");
  const storage::Sequence head = publisher_->last_sequence();
  ASSERT_TRUE(WaitFor([&] {
    const FeedCounters c = feed_->counters();
    return c.connected && c.position == head;
  }));
  EXPECT_EQ(feed_->counters().lag, absl::ZeroDuration());
  proxy_->Cut(TcpProxy::CutMode::kReset);
  ASSERT_TRUE(WaitFor([&] { return !feed_->counters().connected; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const FeedCounters cut = feed_->counters();
  EXPECT_FALSE(cut.connected);
  EXPECT_GE(cut.lag, absl::Seconds(1)) << cut.lag;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const absl::Duration later = feed_->counters().lag;
  EXPECT_GE(later, cut.lag + absl::Milliseconds(400)) << later;
  // Back in touch and caught up: the lag is 0 again.
  proxy_->Heal();
  ASSERT_TRUE(WaitFor([&] {
    const FeedCounters c = feed_->counters();
    return c.connected && c.lag == absl::ZeroDuration();
  })) << feed_->counters().lag;
}

// Under steady load a subscriber is never exactly caught up (something new
// is always on its way), yet what it applied was written a moment ago: the
// lag is the age of what is applied, not the time since it was last caught
// up (which read ~58 s under a load that was ~2 s behind).
TEST_F(FeedSubscriberTest, FeedLagUnderSteadyLoadIsTheAgeOfWhatIsApplied) {
  auto backend = std::make_shared<CountingBackend>(absl::Milliseconds(40));
  subscriber_.reset();
  subscriber_ = OpenStore(subscriber_dir_.path(), "subscriber", backend);
  ASSERT_NE(subscriber_, nullptr);
  Start();
  ASSERT_TRUE(WaitFor([&] { return feed_->counters().connected; }));
  const absl::Time start = absl::Now();
  absl::Duration worst = absl::ZeroDuration();
  int behind_samples = 0;
  for (int i = 0; absl::Now() - start < absl::Seconds(4); ++i) {
    storage::WriteRequest w;
    w.mutations.push_back(storage::Mutation::Put(
        "ks", absl::StrCat("key-", i % 500), absl::StrCat("v", i)));
    ASSERT_TRUE(publisher_->Write(std::move(w)).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (absl::Now() - start < absl::Seconds(2)) continue;
    const FeedCounters c = feed_->counters();
    if (c.lag_entries > 0) {
      ++behind_samples;
      worst = std::max(worst, c.lag);
    }
  }
  EXPECT_GT(behind_samples, 0) << "the load never put the subscriber behind";
  // Each apply takes 40 ms and takes what waits: what is applied is a
  // fraction of a second old, however long the load lasts.
  EXPECT_LT(worst, absl::Seconds(1)) << worst;
  const storage::Sequence head = publisher_->last_sequence();
  ASSERT_TRUE(WaitFor([&] {
    const FeedCounters c = feed_->counters();
    return c.position == head && c.lag == absl::ZeroDuration();
  })) << feed_->counters().lag;
}

TEST_F(FeedSubscriberTest, StopsPromptlyWhileReconnecting) {
  proxy_->Cut(TcpProxy::CutMode::kReset);
  Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto start = std::chrono::steady_clock::now();
  feed_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_FALSE(feed_->counters().connected);
  EXPECT_GE(feed_->counters().reconnects, 1u);
}

TEST_F(FeedSubscriberTest, ACancelledHandleEndsASubscribeAtOnce) {
  v1::SubscribeRequest request;
  request.set_subscriber("subscriber");
  request.set_from_head(true);
  std::atomic<bool> stop{false};
  StreamCanceller canceller;
  std::atomic<int> batches{0};
  std::atomic<std::chrono::steady_clock::time_point> cancelled_at{};
  std::thread cancel([&] {
    // The cut comes after the first heartbeat (however loaded the machine
    // is, a fixed sleep may end before it).
    const auto wait_until =
        std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (batches.load() == 0 &&
           std::chrono::steady_clock::now() < wait_until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    proxy_->Cut(TcpProxy::CutMode::kBlackhole);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    cancelled_at.store(std::chrono::steady_clock::now());
    canceller.Cancel();
  });
  const absl::Status status = client_->Subscribe(
      request,
      [&](const v1::FeedBatch&) {
        ++batches;
        return absl::OkStatus();
      },
      stop, &canceller);
  cancel.join();
  EXPECT_TRUE(absl::IsCancelled(status)) << status;
  // The cancel, 300 ms after the cut, ends the call at once.
  EXPECT_LT(std::chrono::steady_clock::now() - cancelled_at.load(),
            std::chrono::seconds(2));
  EXPECT_GE(batches.load(), 1);  // heartbeats came before the cut
  // A cancelled handle refuses to start another call.
  EXPECT_TRUE(absl::IsCancelled(client_->Subscribe(
      request, [](const v1::FeedBatch&) { return absl::OkStatus(); }, stop,
      &canceller)));
}

// One keyspace whose rows this node cannot take stops no other keyspace:
// its changes are left out (counted, reported to KeyspaceTrouble, a repair
// asked for), the others applied, and the position moves past them all.
// Once the cause is gone, its next change flows and the trouble ends.
class FeedTroubleTest
    : public FeedSubscriberTest,
      public ::testing::WithParamInterface<TroubledBackend::Mode> {};

TEST_P(FeedTroubleTest, OneKeyspaceInTroubleStopsNoOther) {
  auto backend = std::make_shared<TroubledBackend>(GetParam(), "bad");
  subscriber_.reset();
  subscriber_ = OpenStore(subscriber_dir_.path(), "subscriber", backend);
  ASSERT_NE(subscriber_, nullptr);
  storage::WriteRequest at_start;
  at_start.progress =
      storage::UpstreamProgress{"publisher", publisher_->epoch(), 0};
  ASSERT_TRUE(subscriber_->Write(std::move(at_start)).ok());
  KeyspaceTrouble trouble;
  std::atomic<int> repairs{0};
  feed_ = std::make_unique<FeedSubscriber>(
      subscriber_.get(), client_.get(), [] {}, nullptr, &trouble,
      [&repairs] { ++repairs; });
  feed_->Start();
  // Both keyspaces in every publisher write, so that every batch holds
  // both.
  for (int i = 0; i < 20; ++i) {
    storage::WriteRequest w;
    w.mutations.push_back(storage::Mutation::Put("bad", absl::StrCat("b-", i),
                                                 absl::StrCat("v", i)));
    w.mutations.push_back(storage::Mutation::Put("good", absl::StrCat("g-", i),
                                                 absl::StrCat("v", i)));
    ASSERT_TRUE(publisher_->Write(std::move(w)).ok());
  }
  const storage::Sequence head = publisher_->last_sequence();
  ASSERT_TRUE(WaitFor([&] { return feed_->counters().position == head; }))
      << feed_->counters().position << " of " << head;
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<storage::Row> row =
        subscriber_->Get("good", absl::StrCat("g-", i));
    ASSERT_TRUE(row.ok()) << i << ": " << row.status();
    EXPECT_TRUE(absl::IsNotFound(
        subscriber_->Get("bad", absl::StrCat("b-", i)).status()));
  }
  const FeedCounters counters = feed_->counters();
  EXPECT_EQ(counters.rejected, 20u);
  EXPECT_EQ(counters.applied, 20u);
  EXPECT_TRUE(trouble.InTrouble("bad"));
  EXPECT_FALSE(trouble.InTrouble("good"));
  EXPECT_GE(repairs.load(), 1);
  v1::StatusResponse status;
  trouble.FillStatus(&status);
  ASSERT_EQ(status.keyspace_trouble_size(), 1);
  const v1::KeyspaceTroubleStatus& t = status.keyspace_trouble(0);
  EXPECT_EQ(t.keyspace(), "bad");
  EXPECT_EQ(t.reason(), GetParam() == TroubledBackend::Mode::kNotTaken
                            ? "not-taken"
                            : "rejected");
  EXPECT_EQ(t.rows_rejected(), 20u);
  EXPECT_EQ(t.peer(), "publisher");
  EXPECT_TRUE(absl::StartsWith(t.last_key(), "b-")) << t.last_key();
  EXPECT_FALSE(t.last_error().empty());

  // The cause goes: the keyspace's next change is applied, and flows.
  backend->heal();
  storage::WriteRequest w;
  w.mutations.push_back(storage::Mutation::Put("bad", "b-after", "v"));
  ASSERT_TRUE(publisher_->Write(std::move(w)).ok());
  ASSERT_TRUE(WaitFor([&] {
    return subscriber_->Get("bad", "b-after").ok() && !trouble.InTrouble("bad");
  }));
}

INSTANTIATE_TEST_SUITE_P(
    Modes, FeedTroubleTest,
    ::testing::Values(TroubledBackend::Mode::kIsolates,
                      TroubledBackend::Mode::kFailsWhole,
                      TroubledBackend::Mode::kNotTaken),
    [](const ::testing::TestParamInfo<TroubledBackend::Mode>& info) {
      switch (info.param) {
        case TroubledBackend::Mode::kIsolates:
          return "RowsRejected";
        case TroubledBackend::Mode::kFailsWhole:
          return "WholeApplyFails";
        case TroubledBackend::Mode::kNotTaken:
          return "KeyspaceNotTaken";
      }
      return "Unknown";
    });

}  // namespace
}  // namespace node
}  // namespace tally
