#include "node/feed/feed_publisher.h"

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/rpc/peer_service.h"
#include "node/worker_pool.h"
#include "support/temp_dir.h"
#include "tree/status_macros.h"

namespace tally {
namespace node {
namespace {

using ::tally::testing::TempDir;

// A real server with the Peer service over a real store.
class FeedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    storage::StoreOptions options;
    options.node_name = "publisher";
    options.sync = false;
    options.backend = MakeBackend();
    auto store = storage::Store::Open(dir_.path(), options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    pool_ = std::make_unique<WorkerPool>(2, 64);
    FeedOptions feed = MakeFeedOptions();
    service_ =
        std::make_unique<PeerService>(store_.get(), pool_.get(), nullptr, feed);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(port, 0);
    stub_ = v1::Peer::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }

  // The store's backend; null: the embedded one.
  virtual std::shared_ptr<storage::RowBackend> MakeBackend() { return nullptr; }
  virtual FeedOptions MakeFeedOptions() {
    FeedOptions feed;
    feed.heartbeat = absl::Milliseconds(100);
    feed.max_subscriptions = 2;
    return feed;
  }

  void TearDown() override {
    service_->StopFeeds();
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(5));
    server_->Wait();
    service_->WaitForFeeds();
    pool_.reset();
  }

  void Put(const std::string& key, const std::string& value) {
    storage::WriteRequest w;
    w.mutations.push_back(storage::Mutation::Put("ks", key, value));
    ASSERT_TRUE(store_->Write(std::move(w)).ok());
  }

  void PutFrom(const std::string& origin, const std::string& key) {
    storage::WriteRequest w;
    storage::Mutation m = storage::Mutation::Put("ks", key, "remote");
    m.version = tree::Version{store_->clock().Now(), origin};
    w.mutations.push_back(std::move(m));
    ASSERT_TRUE(store_->Write(std::move(w)).ok());
  }

  v1::SubscribeRequest Request(uint64_t after, const std::string& who = "sub") {
    v1::SubscribeRequest r;
    r.set_subscriber(who);
    r.set_epoch(store_->epoch());
    r.set_after(after);
    return r;
  }

  // Reads batches until `done` says stop or 5 s pass; returns them.
  std::vector<v1::FeedBatch> Read(
      const v1::SubscribeRequest& request,
      const std::function<bool(const std::vector<v1::FeedBatch>&)>& done,
      grpc::Status* status = nullptr) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    auto reader = stub_->Subscribe(&context, request);
    std::vector<v1::FeedBatch> batches;
    v1::FeedBatch batch;
    while (reader->Read(&batch)) {
      batches.push_back(batch);
      if (done(batches)) {
        context.TryCancel();
        break;
      }
    }
    const grpc::Status s = reader->Finish();
    if (status != nullptr) *status = s;
    return batches;
  }

  static std::vector<std::string> Keys(const std::vector<v1::FeedBatch>& bs) {
    std::vector<std::string> keys;
    for (const v1::FeedBatch& b : bs) {
      for (const v1::FeedChange& c : b.changes()) keys.push_back(c.row().key());
    }
    return keys;
  }

  TempDir dir_;
  std::unique_ptr<storage::Store> store_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<PeerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Peer::Stub> stub_;
};

TEST_F(FeedTest, StreamsChangesAfterThePositionWithTheirRows) {
  Put("a", "1");
  Put("b", "2");
  Put("c", "3");
  const auto batches = Read(Request(1), [](const auto& bs) {
    return !bs.empty() && bs.back().position() >= 3;
  });
  EXPECT_THAT(Keys(batches), ::testing::ElementsAre("b", "c"));
  const v1::FeedChange& c =
      batches.back().changes(batches.back().changes_size() - 1);
  EXPECT_EQ(c.sequence(), 3u);
  EXPECT_EQ(c.keyspace(), "ks");
  EXPECT_EQ(c.row().value(), "3");
  EXPECT_EQ(c.row().version().origin(), "publisher");
  EXPECT_EQ(batches.back().epoch(), store_->epoch());
}

TEST_F(FeedTest, BoundsABatchByBytesAndByCount) {
  // 40 rows of 100 KB: far fewer than max_batch, but ~4 MB in all.
  const std::string big(100 * 1024, 'x');
  for (int i = 0; i < 40; ++i) Put(absl::StrCat("big-", i), big);
  v1::SubscribeRequest request = Request(0);
  request.set_max_batch(10'000);
  const auto batches = Read(request, [](const auto& bs) {
    return !bs.empty() && bs.back().position() >= 40;
  });
  EXPECT_EQ(Keys(batches).size(), 40u);
  for (const v1::FeedBatch& b : batches) {
    // About kStreamChunkBytes (1 MB), plus the row that crossed it.
    EXPECT_LE(b.ByteSizeLong(), size_t{1200 * 1024});
  }
  EXPECT_GE(batches.size(), 4u);
  // And by count: three entries at most per batch here.
  for (int i = 0; i < 5; ++i) Put(absl::StrCat("small-", i), "v");
  request.set_max_batch(3);
  request.set_after(40);
  const auto small = Read(request, [](const auto& bs) {
    return !bs.empty() && bs.back().position() >= 45;
  });
  EXPECT_EQ(Keys(small).size(), 5u);
  for (const v1::FeedBatch& b : small) EXPECT_LE(b.changes_size(), 3);
}

TEST_F(FeedTest, SkipsChangesBornAtTheSubscriberAndSupersededOnes) {
  PutFrom("sub", "theirs");
  Put("twice", "old");
  Put("twice", "new");
  Put("mine", "x");
  uint64_t own = 0, superseded = 0;
  const auto batches = Read(Request(0), [&](const auto& bs) {
    return !bs.empty() && bs.back().position() >= 4;
  });
  for (const auto& b : batches) {
    own += b.skipped_own();
    superseded += b.skipped_superseded();
  }
  EXPECT_THAT(Keys(batches), ::testing::ElementsAre("twice", "mine"));
  EXPECT_EQ(own, 1u);
  EXPECT_EQ(superseded, 1u);
}

// The embedded backend, but the reads of a value answer UNAVAILABLE the
// first `lagging` times each — as a sidecar's PostgreSQL reader does for a
// row whose transaction the capture indexed as soon as it was decoded,
// before its commit became visible to other sessions — or always, for a
// value given to Hide; and ABORTED always for a value given to Supersede
// (the table holds a later version the capture has not indexed yet).
class LaggingBackend : public storage::RowBackend {
 public:
  explicit LaggingBackend(int lagging)
      : inner_(storage::NewEmbeddedBackend()), lagging_(lagging) {}

  void Hide(std::string value) {
    absl::MutexLock lock(&mu_);
    hidden_ = std::move(value);
  }
  void Supersede(std::string value) {
    absl::MutexLock lock(&mu_);
    superseded_ = std::move(value);
  }
  int reads_of_superseded() const {
    absl::MutexLock lock(&mu_);
    return reads_of_superseded_;
  }
  int aborted() const {
    absl::MutexLock lock(&mu_);
    return aborted_;
  }

  absl::string_view name() const override { return "lagging"; }
  absl::Status ApplyRows(absl::Span<const storage::RowChange> rows,
                         std::vector<storage::RowOutcome>* outcomes) override {
    return inner_->ApplyRows(rows, outcomes);
  }
  absl::StatusOr<std::string> ReadValue(
      const storage::RowLocation& row,
      absl::string_view payload) const override {
    TALLY_ASSIGN_OR_RETURN(auto values, ReadValues({row}, {payload}));
    return std::move(values[0]);
  }
  absl::StatusOr<std::vector<absl::StatusOr<std::string>>> ReadValues(
      absl::Span<const storage::RowLocation> rows,
      absl::Span<const absl::string_view> payloads) const override {
    TALLY_ASSIGN_OR_RETURN(auto values, inner_->ReadValues(rows, payloads));
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < payloads.size(); ++i) {
      if (payloads[i] == superseded_) {
        ++reads_of_superseded_;
        values[i] = absl::AbortedError("row changed in the table since");
        continue;
      }
      int& reads = reads_[std::string(payloads[i])];
      if (reads++ < lagging_ || payloads[i] == hidden_) {
        ++aborted_;
        values[i] = absl::UnavailableError("row not visible yet");
      }
    }
    return values;
  }
  absl::StatusOr<std::string> SchemaFingerprint(
      absl::string_view keyspace) const override {
    return inner_->SchemaFingerprint(keyspace);
  }

 private:
  const std::unique_ptr<storage::RowBackend> inner_;
  const int lagging_;
  mutable absl::Mutex mu_;
  mutable absl::flat_hash_map<std::string, int> reads_ ABSL_GUARDED_BY(mu_);
  mutable int aborted_ ABSL_GUARDED_BY(mu_) = 0;
  std::string hidden_ ABSL_GUARDED_BY(mu_);
  std::string superseded_ ABSL_GUARDED_BY(mu_);
  mutable int reads_of_superseded_ ABSL_GUARDED_BY(mu_) = 0;
};

class LaggingFeedTest : public FeedTest {
 protected:
  std::shared_ptr<storage::RowBackend> MakeBackend() override {
    backend_ = std::make_shared<LaggingBackend>(3);
    return backend_;
  }
  std::shared_ptr<LaggingBackend> backend_;
};

// The pg-latency tail: such a row's entry was skipped as superseded, and
// the change reached the subscriber only with the key's next write or the
// next anti-entropy session.
TEST_F(LaggingFeedTest, ARowNotYetVisibleToTheBackendIsReadAgainAndSent) {
  Put("a", "1");
  Put("b", "2");
  uint64_t superseded = 0;
  const auto batches = Read(Request(0), [](const auto& bs) {
    return !bs.empty() && bs.back().position() >= 2;
  });
  for (const auto& b : batches) superseded += b.skipped_superseded();
  EXPECT_THAT(Keys(batches), ::testing::ElementsAre("a", "b"));
  EXPECT_EQ(
      batches.back().changes(batches.back().changes_size() - 1).row().value(),
      "2");
  EXPECT_EQ(superseded, 0u);
  EXPECT_GE(backend_->aborted(), 6);  // both were read until visible
}

// A row the backend never shows as indexed (the application changed it and
// the capture has not indexed that yet, or never will) is skipped after
// the reads, and the feed goes on.
TEST_F(LaggingFeedTest, ARowThatStaysChangedIsSkippedAndTheFeedGoesOn) {
  backend_->Hide("gone");
  Put("a", "gone");
  Put("b", "2");
  uint64_t superseded = 0;
  const auto batches = Read(Request(0), [](const auto& bs) {
    return !bs.empty() && bs.back().position() >= 2;
  });
  for (const auto& b : batches) superseded += b.skipped_superseded();
  EXPECT_THAT(Keys(batches), ::testing::ElementsAre("b"));
  EXPECT_EQ(superseded, 1u);
}

// A row the backend holds at a later version than the index's (an
// application keeps changing it) is skipped at once as superseded, not
// read again: reading it again waited out the whole bound on every window
// holding such a row, and a feed over a few hot rows fell seconds behind.
TEST_F(LaggingFeedTest, ARowChangedSinceIsSkippedAtOnceWithoutRereads) {
  backend_->Supersede("hot");
  Put("h", "hot");
  Put("b", "2");
  const absl::Time start = absl::Now();
  uint64_t superseded = 0;
  const auto batches = Read(Request(0), [](const auto& bs) {
    return !bs.empty() && bs.back().position() >= 2;
  });
  for (const auto& b : batches) superseded += b.skipped_superseded();
  EXPECT_THAT(Keys(batches), ::testing::ElementsAre("b"));
  EXPECT_EQ(superseded, 1u);
  EXPECT_EQ(backend_->reads_of_superseded(), 1);
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500));
}

// A later write of the key while its entry is read again: the store's row
// has another version, and the entry is skipped for the later one.
TEST_F(LaggingFeedTest, AKeyWrittenAgainMeanwhileIsSentOnceWithItsLastValue) {
  backend_->Hide("old");
  Put("k", "old");
  std::thread later([this] {
    absl::SleepFor(absl::Milliseconds(50));
    Put("k", "new");
  });
  uint64_t superseded = 0;
  const auto batches = Read(Request(0), [](const auto& bs) {
    return !bs.empty() && bs.back().position() >= 2;
  });
  later.join();
  for (const auto& b : batches) superseded += b.skipped_superseded();
  ASSERT_THAT(Keys(batches), ::testing::ElementsAre("k"));
  EXPECT_EQ(batches.back().changes(0).row().value(), "new");
  EXPECT_EQ(superseded, 1u);
}

TEST_F(FeedTest, CountsWhatItSentAndSkippedAndTellsTheHead) {
  PutFrom("sub", "theirs");
  Put("twice", "old");
  Put("twice", "new");
  Put("mine", "x");
  const auto batches = Read(Request(0), [&](const auto& bs) {
    return !bs.empty() && bs.back().position() >= 4;
  });
  ASSERT_FALSE(batches.empty());
  EXPECT_EQ(batches.back().head(), 4u);
  v1::StatusResponse status;
  // A message is counted once its write completed, which may be just after
  // the subscriber read it.
  for (int i = 0; i < 100; ++i) {
    status.Clear();
    service_->feed_status()->FillStatus(&status);
    if (status.feed().skipped_superseded() == 1) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(status.feed().sent(), 2u);
  EXPECT_EQ(status.feed().skipped_own(), 1u);
  EXPECT_EQ(status.feed().skipped_superseded(), 1u);
  // The subscription ended with the stream: totals stay, the entry goes.
  for (int i = 0; i < 100 && status.subscriptions_size() > 0; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
    status.Clear();
    service_->feed_status()->FillStatus(&status);
  }
  EXPECT_EQ(status.subscriptions_size(), 0);
  EXPECT_EQ(status.feed().sent(), 2u);
}

TEST_F(FeedTest, ListsTheSubscriptionsItServes) {
  Put("a", "1");
  v1::StatusResponse status;
  Read(Request(0, "watcher"), [&](const auto& bs) {
    if (bs.empty() || bs.back().position() < 1) return false;
    // The publisher counts a message once its write completed, which may
    // be just after the subscriber read it.
    for (int i = 0; i < 100; ++i) {
      status.Clear();
      service_->feed_status()->FillStatus(&status);
      if (status.subscriptions_size() == 1 &&
          status.subscriptions(0).position() == 1) {
        break;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return true;
  });
  ASSERT_EQ(status.subscriptions_size(), 1);
  EXPECT_EQ(status.subscriptions(0).subscriber(), "watcher");
  EXPECT_EQ(status.subscriptions(0).position(), 1u);
  EXPECT_EQ(status.subscriptions(0).sent(), 1u);
}

TEST_F(FeedTest, DeliversNewCommitsLiveAndHeartbeatsWhenQuiet) {
  Put("before", "1");
  std::thread writer([this] {
    absl::SleepFor(absl::Milliseconds(300));
    Put("later", "2");
  });
  int heartbeats = 0;
  const auto batches = Read(Request(1), [&](const auto& bs) {
    if (bs.back().changes_size() == 0) ++heartbeats;
    return !Keys(bs).empty();
  });
  writer.join();
  EXPECT_THAT(Keys(batches), ::testing::ElementsAre("later"));
  // 300 ms of quiet at a 100 ms heartbeat.
  EXPECT_GE(heartbeats, 2);
}

TEST_F(FeedTest, FromHeadStartsAtTheEndOfTheLog) {
  Put("a", "1");
  Put("b", "2");
  v1::SubscribeRequest request = Request(0);
  request.set_from_head(true);
  request.set_epoch(0);
  const auto batches = Read(request, [](const auto&) { return true; });
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].position(), 2u);
  EXPECT_EQ(batches[0].changes_size(), 0);
}

TEST_F(FeedTest, RefusesAWrongEpochAPositionAheadAndBadRequests) {
  Put("a", "1");
  grpc::Status status;
  v1::SubscribeRequest wrong_epoch = Request(0);
  wrong_epoch.set_epoch(store_->epoch() + 1);
  Read(
      wrong_epoch, [](const auto&) { return true; }, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("epoch"));

  Read(
      Request(99), [](const auto&) { return true; }, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("beyond"));

  Read(
      Request(0, "has space"), [](const auto&) { return true; }, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  v1::SubscribeRequest huge = Request(0);
  huge.set_max_batch(10'001);
  Read(
      huge, [](const auto&) { return true; }, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(FeedTest, BoundsTheNumberOfSubscriptions) {
  // Two long-lived subscriptions fill the limit of 2; a third subscriber is
  // refused.
  grpc::ClientContext c1, c2;
  auto r1 = stub_->Subscribe(&c1, Request(0, "sub-1"));
  auto r2 = stub_->Subscribe(&c2, Request(0, "sub-2"));
  v1::FeedBatch batch;
  ASSERT_TRUE(r1->Read(&batch));
  ASSERT_TRUE(r2->Read(&batch));
  grpc::Status status;
  Read(
      Request(0, "sub-3"), [](const auto&) { return true; }, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  c1.TryCancel();
  c2.TryCancel();
  while (r1->Read(&batch)) {
  }
  while (r2->Read(&batch)) {
  }
  r1->Finish();
  r2->Finish();
}

// Any client able to connect could take all 64 subscription slots under
// made-up names, and the node's own peers were then refused. Now the
// subscribers that are not listed peers share half of them.
class PeerSlotsFeedTest : public FeedTest {
 protected:
  FeedOptions MakeFeedOptions() override {
    FeedOptions feed = FeedTest::MakeFeedOptions();
    feed.max_subscriptions = 4;
    feed.is_peer = [](const std::string& subscriber) {
      return absl::StartsWith(subscriber, "peer-");
    };
    return feed;
  }
};

TEST_F(PeerSlotsFeedTest, StrangersTakeHalfTheSlotsAndPeersTheRest) {
  grpc::ClientContext c1, c2, c3, c4;
  auto r1 = stub_->Subscribe(&c1, Request(0, "stranger-1"));
  auto r2 = stub_->Subscribe(&c2, Request(0, "stranger-2"));
  v1::FeedBatch batch;
  ASSERT_TRUE(r1->Read(&batch));
  ASSERT_TRUE(r2->Read(&batch));
  grpc::Status status;
  Read(
      Request(0, "stranger-3"), [](const auto&) { return true; }, &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(),
              ::testing::HasSubstr("does not list as peers"));
  // The peers still get theirs.
  auto r3 = stub_->Subscribe(&c3, Request(0, "peer-1"));
  auto r4 = stub_->Subscribe(&c4, Request(0, "peer-2"));
  ASSERT_TRUE(r3->Read(&batch));
  ASSERT_TRUE(r4->Read(&batch));
  for (grpc::ClientContext* c : {&c1, &c2, &c3, &c4}) c->TryCancel();
  for (auto* r : {r1.get(), r2.get(), r3.get(), r4.get()}) {
    while (r->Read(&batch)) {
    }
    r->Finish().IgnoreError();
  }
}

// Any client could once take every subscription slot by
// subscribing again and again under one name; real peers were then refused.
TEST_F(FeedTest, ANewerSubscriptionFromTheSameSubscriberReplacesTheOlder) {
  Put("a", "1");
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::FeedBatch>>> readers;
  v1::FeedBatch batch;
  // Five subscriptions as "greedy", over a limit of 2.
  for (int i = 0; i < 5; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(std::chrono::system_clock::now() +
                                  std::chrono::seconds(10));
    readers.push_back(
        stub_->Subscribe(contexts.back().get(), Request(0, "greedy")));
    ASSERT_TRUE(readers.back()->Read(&batch)) << "subscription " << i;
  }
  // Each newer one ended the one before it.
  for (int i = 0; i < 4; ++i) {
    while (readers[i]->Read(&batch)) {
    }
    const grpc::Status ended = readers[i]->Finish();
    EXPECT_EQ(ended.error_code(), grpc::StatusCode::ABORTED) << i;
    EXPECT_THAT(ended.error_message(),
                ::testing::HasSubstr("replaced by a newer subscription"));
  }
  // A real peer still finds a slot, and the status lists one per name.
  grpc::Status status;
  const auto batches = Read(
      Request(0, "peer"), [](const auto&) { return true; }, &status);
  EXPECT_FALSE(batches.empty()) << status.error_message();
  v1::StatusResponse node_status;
  service_->feed_status()->FillStatus(&node_status);
  int greedy = 0;
  for (const auto& s : node_status.subscriptions()) {
    greedy += s.subscriber() == "greedy";
  }
  EXPECT_EQ(greedy, 1);
  contexts.back()->TryCancel();
  while (readers.back()->Read(&batch)) {
  }
  readers.back()->Finish();
}

}  // namespace
}  // namespace node
}  // namespace tally
