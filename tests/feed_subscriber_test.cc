// FeedSubscriber against a real publisher (the Peer service over a real
// store, in this process) reached through a TcpProxy, so that the link can
// be cut: the backlog arrives in order with its position, and Stop() is
// prompt even when the link went silent.
#include "node/feed_subscriber.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "node/peer_service.h"
#include "node/worker_pool.h"
#include "support/tcp_proxy.h"
#include "support/temp_dir.h"

namespace tally {
namespace node {
namespace {

using ::tally::testing::TcpProxy;
using ::tally::testing::TempDir;

std::unique_ptr<storage::Store> OpenStore(const std::string& dir,
                                          const std::string& name) {
  storage::StoreOptions options;
  options.node_name = name;
  options.sync = false;
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

}  // namespace
}  // namespace node
}  // namespace tally
