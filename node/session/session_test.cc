// Session against a real peer (the Peer service over its own store, in
// this process): the phases a session passes through, the phase a failure
// is recorded in, and the counts its progress shows.
#include "node/session/session.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/rpc/peer_service.h"
#include "node/worker_pool.h"
#include "support/temp_dir.h"
#include "tree/token.h"

namespace tally {
namespace node {
namespace {

using ::tally::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::Pair;

std::unique_ptr<storage::Store> OpenStore(const TempDir& dir,
                                          const std::string& name,
                                          size_t max_keyspaces = 256) {
  storage::StoreOptions options;
  options.node_name = name;
  options.sync = false;
  options.default_depth = 10;
  options.max_keyspaces = max_keyspaces;
  auto store = storage::Store::Open(dir.path(), options);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

void Put(storage::Store& store, const std::string& keyspace,
         const std::string& key) {
  storage::WriteRequest w;
  w.mutations.push_back(storage::Mutation::Put(keyspace, key, "value"));
  ASSERT_TRUE(store.Write(std::move(w)).ok());
}

uint64_t Rows(storage::Store& store, const std::string& keyspace) {
  for (const storage::KeyspaceInfo& ks : store.ListKeyspaces()) {
    if (ks.name == keyspace) return ks.row_count;
  }
  return 0;
}

// A peer node in this process: its store behind a Peer service.
class TestPeer {
 public:
  explicit TestPeer(std::unique_ptr<storage::Store> store)
      : store_(std::move(store)),
        pool_(std::make_unique<WorkerPool>(2, 64)),
        service_(std::make_unique<PeerService>(store_.get(), pool_.get())) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
  }
  ~TestPeer() { Stop(); }

  storage::Store& store() { return *store_; }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

  void Stop() {
    if (server_ == nullptr) return;
    service_->StopFeeds();
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(5));
    server_->Wait();
    service_->WaitForFeeds();
    server_.reset();
  }

 private:
  std::unique_ptr<storage::Store> store_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<PeerService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// (phase, keyspace) as on_phase saw them, in order.
using Phases = std::vector<std::pair<std::string, std::string>>;

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    local_ = OpenStore(local_dir_, "node-a");
    ASSERT_NE(local_, nullptr);
  }

  void StartPeer(const std::string& name, size_t max_keyspaces = 256) {
    auto store = OpenStore(peer_dir_, name, max_keyspaces);
    ASSERT_NE(store, nullptr);
    peer_ = std::make_unique<TestPeer>(std::move(store));
  }

  // Runs one session with `address` (the peer's by default), recording its
  // phases in phases_ and its last progress in progress_.
  SessionResult Run(SessionOptions options = {}, std::string address = "") {
    if (address.empty()) address = peer_->address();
    ClientOptions client_options;
    client_options.node_name = local_->node_name();
    client_options.epoch = local_->epoch();
    client_options.rpc_timeout = absl::Seconds(10);
    auto client = NodeClient::Connect(address, client_options);
    EXPECT_TRUE(client.ok()) << client.status();
    if (!client.ok()) {
      SessionResult failed;
      failed.status = client.status();
      return failed;
    }
    std::function<void(const SessionProgress&)> then = options.on_phase;
    options.on_phase = [this, then](const SessionProgress& p) {
      phases_.emplace_back(SessionPhaseName(p.phase), p.keyspace);
      if (then) then(p);
    };
    Session session(local_.get(), client->get(), std::move(options));
    EXPECT_EQ(session.progress().phase, SessionPhase::kIdle);
    SessionResult result = session.Run();
    progress_ = session.progress();
    return result;
  }

  TempDir local_dir_, peer_dir_;
  std::unique_ptr<storage::Store> local_;
  std::unique_ptr<TestPeer> peer_;
  Phases phases_;
  SessionProgress progress_;
};

TEST_F(SessionTest, ASuccessfulSessionGoesHandshakeDiffRepairDone) {
  StartPeer("node-b");
  Put(*local_, "ks", "only-here");
  Put(peer_->store(), "ks", "only-there-1");
  Put(peer_->store(), "ks", "only-there-2");

  const SessionResult result = Run();
  ASSERT_TRUE(result.status.ok()) << result.status;
  EXPECT_THAT(phases_, ElementsAre(Pair("handshake", ""), Pair("diff", "ks"),
                                   Pair("repair", "ks"), Pair("done", "")));
  EXPECT_EQ(result.rows_received, 2u);
  EXPECT_EQ(result.rows_sent, 1u);
  EXPECT_EQ(Rows(*local_, "ks"), 3u);
  EXPECT_EQ(Rows(peer_->store(), "ks"), 3u);

  EXPECT_EQ(progress_.phase, SessionPhase::kDone);
  EXPECT_EQ(progress_.keyspace, "");
  EXPECT_EQ(progress_.keyspaces, 1u);
  EXPECT_EQ(progress_.keyspaces_done, 1u);
  EXPECT_EQ(progress_.differences, 3u);
  EXPECT_EQ(progress_.rows_received, 2u);
  EXPECT_EQ(progress_.rows_sent, 1u);
  EXPECT_EQ(progress_.started, result.start);
  EXPECT_GE(progress_.phase_since, progress_.started);
}

// The rows a bootstrap will move are known from the row
// counts (node/sync/rows_to_move.h) and kept in the progress after the session;
// between two full sides they are not.
TEST_F(SessionTest,
       ASessionIntoAnEmptyNodeExpectsThePeersRowsOverItsKeyspaces) {
  StartPeer("node-b");
  for (int i = 0; i < 5; ++i) Put(peer_->store(), "ks", absl::StrCat("k", i));
  for (int i = 0; i < 3; ++i)
    Put(peer_->store(), "other", absl::StrCat("o", i));
  SessionOptions from_source;
  from_source.from_source = true;
  ASSERT_TRUE(Run(from_source).status.ok());
  ASSERT_TRUE(progress_.rows_expected.has_value());
  EXPECT_EQ(*progress_.rows_expected, 8u);
  EXPECT_EQ(progress_.rows_received, 8u);
  // Ended: no rate or time left any more.
  EXPECT_EQ(progress_.rows_per_second, 0);
  EXPECT_FALSE(progress_.remaining.has_value());

  // Both sides hold 8 rows, and each gets 2 of its own: the equal counts
  // allow anything from no row to all 20 to move (4 do).
  for (int i = 0; i < 2; ++i) Put(*local_, "ks", absl::StrCat("mine", i));
  for (int i = 0; i < 2; ++i)
    Put(peer_->store(), "ks", absl::StrCat("theirs", i));
  ASSERT_TRUE(Run().status.ok());
  EXPECT_FALSE(progress_.rows_expected.has_value());
  EXPECT_EQ(progress_.rows_received + progress_.rows_sent, 4u);
}

TEST_F(SessionTest, EveryKeyspaceOfEitherSideIsDiffedInNameOrder) {
  StartPeer("node-b");
  Put(*local_, "ks-2", "k");
  Put(peer_->store(), "ks-1", "k");
  Put(peer_->store(), "ks-3", "k");

  ASSERT_TRUE(Run().status.ok());
  EXPECT_THAT(phases_, ElementsAre(Pair("handshake", ""), Pair("diff", "ks-1"),
                                   Pair("repair", "ks-1"), Pair("diff", "ks-2"),
                                   Pair("repair", "ks-2"), Pair("diff", "ks-3"),
                                   Pair("repair", "ks-3"), Pair("done", "")));
  EXPECT_EQ(progress_.keyspaces, 3u);
  EXPECT_EQ(progress_.keyspaces_done, 3u);
}

TEST_F(SessionTest, KeyspacesInSyncAreDiffedAndNotRepaired) {
  StartPeer("node-b");
  Put(*local_, "ks-1", "k");
  Put(peer_->store(), "ks-2", "k");
  ASSERT_TRUE(Run().status.ok());

  phases_.clear();
  ASSERT_TRUE(Run().status.ok());
  EXPECT_THAT(phases_, ElementsAre(Pair("handshake", ""), Pair("diff", "ks-1"),
                                   Pair("diff", "ks-2"), Pair("done", "")));
  EXPECT_EQ(progress_.differences, 0u);
  EXPECT_EQ(progress_.keyspaces_done, 2u);
}

TEST_F(SessionTest, ManyDifferencesAlternateDiffAndRepairBatchByBatch) {
  StartPeer("node-b");
  for (int i = 0; i < 10; ++i) Put(peer_->store(), "ks", absl::StrCat(i));

  SessionOptions options;
  options.batch_rows = 4;  // batches of 4, 4 and 2
  ASSERT_TRUE(Run(std::move(options)).status.ok());
  EXPECT_THAT(phases_, ElementsAre(Pair("handshake", ""), Pair("diff", "ks"),
                                   Pair("repair", "ks"), Pair("diff", "ks"),
                                   Pair("repair", "ks"), Pair("diff", "ks"),
                                   Pair("repair", "ks"), Pair("done", "")));
  EXPECT_EQ(progress_.rows_received, 10u);
  EXPECT_EQ(Rows(*local_, "ks"), 10u);
}

TEST_F(SessionTest, AHandshakeTheOwnerRefusesFailsInHandshakeAndSyncsNothing) {
  StartPeer("node-b");
  Put(peer_->store(), "ks", "k");

  SessionOptions options;
  std::string seen_name;
  options.on_handshake = [&](const v1::HandshakeResponse& answer, uint64_t sent,
                             uint64_t received) {
    seen_name = answer.node_name();
    EXPECT_LE(sent, received);
    return absl::AlreadyExistsError("that node is another peer already");
  };
  const SessionResult result = Run(std::move(options));
  EXPECT_TRUE(absl::IsAlreadyExists(result.status)) << result.status;
  EXPECT_EQ(seen_name, "node-b");
  EXPECT_THAT(phases_, ElementsAre(Pair("handshake", ""), Pair("failed", "")));
  EXPECT_EQ(progress_.phase, SessionPhase::kFailed);
  EXPECT_EQ(progress_.failed_in, SessionPhase::kHandshake);
  EXPECT_EQ(progress_.keyspaces_done, 0u);
  EXPECT_EQ(Rows(*local_, "ks"), 0u);
}

TEST_F(SessionTest, APeerWithThisNodesOwnNameFailsInHandshake) {
  StartPeer("node-a");
  Put(peer_->store(), "ks", "k");

  const SessionResult result = Run();
  EXPECT_TRUE(absl::IsFailedPrecondition(result.status)) << result.status;
  EXPECT_THAT(std::string(result.status.message()),
              ::testing::HasSubstr("own name 'node-a'"));
  EXPECT_EQ(progress_.phase, SessionPhase::kFailed);
  EXPECT_EQ(progress_.failed_in, SessionPhase::kHandshake);
  EXPECT_EQ(Rows(*local_, "ks"), 0u);
}

TEST_F(SessionTest, AnUnreachablePeerFailsInHandshake) {
  StartPeer("node-b");
  const std::string address = peer_->address();
  peer_->Stop();  // nothing listens there any more

  const SessionResult result = Run({}, address);
  EXPECT_TRUE(absl::IsUnavailable(result.status) ||
              absl::IsDeadlineExceeded(result.status))
      << result.status;
  EXPECT_THAT(phases_, ElementsAre(Pair("handshake", ""), Pair("failed", "")));
  EXPECT_EQ(progress_.failed_in, SessionPhase::kHandshake);
}

// A cancel (shutdown) is noticed at the diff's next difference: the session
// fails in the diff of the keyspace it was working on, and the keyspace
// before it stays synced and counted.
TEST_F(SessionTest, ACancelledSessionFailsInThePhaseAndKeyspaceItWasIn) {
  StartPeer("node-b");
  Put(peer_->store(), "ks-1", "k");
  Put(peer_->store(), "ks-2", "k");

  std::atomic<bool> cancelled{false};
  SessionOptions options;
  options.cancelled = &cancelled;
  options.on_phase = [&](const SessionProgress& p) {
    if (p.phase == SessionPhase::kDiff && p.keyspace == "ks-2") {
      cancelled = true;
    }
  };
  const SessionResult result = Run(std::move(options));
  EXPECT_TRUE(absl::IsCancelled(result.status)) << result.status;
  EXPECT_THAT(phases_, ElementsAre(Pair("handshake", ""), Pair("diff", "ks-1"),
                                   Pair("repair", "ks-1"), Pair("diff", "ks-2"),
                                   Pair("failed", "ks-2")));
  EXPECT_EQ(progress_.failed_in, SessionPhase::kDiff);
  EXPECT_EQ(progress_.keyspaces_done, 2u);
  EXPECT_EQ(result.rows_received, 1u);
  EXPECT_EQ(Rows(*local_, "ks-1"), 1u);
  EXPECT_EQ(Rows(*local_, "ks-2"), 0u);
}

// The peer may hold one keyspace only: pushing it a second one is refused
// in the repair. That keyspace fails on its own; the one after it is synced
// all the same, and the session's outcome is the refusal, in the repair.
TEST_F(SessionTest, AKeyspaceThePeerMayNotCreateFailsInRepairAndTheRestGoOn) {
  StartPeer("node-b", /*max_keyspaces=*/1);
  Put(*local_, "ks-1", "k");
  Put(peer_->store(), "ks-2", "k");

  const SessionResult result = Run();
  EXPECT_TRUE(absl::IsResourceExhausted(result.status)) << result.status;
  EXPECT_THAT(phases_,
              ElementsAre(Pair("handshake", ""), Pair("diff", "ks-1"),
                          Pair("repair", "ks-1"), Pair("diff", "ks-2"),
                          Pair("repair", "ks-2"), Pair("failed", "ks-1")));
  EXPECT_EQ(progress_.failed_in, SessionPhase::kRepair);
  EXPECT_EQ(progress_.keyspaces_done, 2u);
  EXPECT_EQ(Rows(*local_, "ks-2"), 1u);
  EXPECT_EQ(Rows(peer_->store(), "ks-1"), 0u);
}

// The embedded backend, rejecting every row of the keyspace "a-bad" as a
// database refusing a column of another type would.
class RejectingBackend : public storage::RowBackend {
 public:
  absl::string_view name() const override { return "rejecting"; }
  absl::Status ApplyRows(absl::Span<const storage::RowChange> rows,
                         std::vector<storage::RowOutcome>* outcomes) override {
    absl::Status s = inner_->ApplyRows(rows, outcomes);
    if (!s.ok()) return s;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i].row.keyspace == "a-bad") {
        (*outcomes)[i].applied = false;
        (*outcomes)[i].rejected =
            absl::InvalidArgumentError("incorrect binary data format");
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
  const std::unique_ptr<storage::RowBackend> inner_ =
      storage::NewEmbeddedBackend();
};

// A keyspace whose repaired rows this node's backend rejects fails on its
// own: the keyspaces after it are synced all the same (they stopped at it
// before), the session's outcome names the rejection, and the synced
// keyspaces flow (KeyspaceTrouble) while the failed one is not cleared.
TEST_F(SessionTest, AKeyspaceWhoseRowsTheBackendRejectsFailsAndTheRestGoOn) {
  local_.reset();
  storage::StoreOptions options;
  options.node_name = "node-a";
  options.sync = false;
  options.default_depth = 10;
  options.backend = std::make_shared<RejectingBackend>();
  auto store = storage::Store::Open(local_dir_.path(), options);
  ASSERT_TRUE(store.ok()) << store.status();
  local_ = std::move(*store);
  StartPeer("node-b");
  Put(peer_->store(), "a-bad", "k");
  Put(peer_->store(), "b-good", "k");
  KeyspaceTrouble trouble;
  trouble.Rejected({"a-bad", kTroubleRejected, "k",
                    absl::InvalidArgumentError("x"), "node-b", 1});
  trouble.Rejected({"b-good", kTroubleRejected, "k",
                    absl::InvalidArgumentError("x"), "node-b", 1});
  SessionOptions session_options;
  session_options.trouble = &trouble;
  const SessionResult result = Run(std::move(session_options));
  EXPECT_TRUE(absl::IsInvalidArgument(result.status)) << result.status;
  EXPECT_TRUE(absl::StrContains(result.status.message(), "a-bad"))
      << result.status;
  EXPECT_EQ(progress_.keyspaces_done, 2u);
  EXPECT_EQ(Rows(*local_, "b-good"), 1u);
  EXPECT_EQ(Rows(*local_, "a-bad"), 0u);
  EXPECT_TRUE(trouble.InTrouble("a-bad"));
  EXPECT_FALSE(trouble.InTrouble("b-good"));
}

TEST(SessionPhase, EveryPhaseHasItsOwnName) {
  std::vector<std::string> names;
  for (SessionPhase phase : kSessionPhases) {
    names.emplace_back(SessionPhaseName(phase));
  }
  EXPECT_THAT(names, ElementsAre("idle", "handshake", "diff", "repair", "done",
                                 "failed"));
}

// A key whose token lies in heat segment `segment`, the `n`-th such.
std::string KeyInSegment(int segment, int n) {
  for (int i = 0;; ++i) {
    std::string key = absl::StrCat("key-", i);
    if (HeatSegmentOf(tree::TokenOf(key)) == segment && n-- == 0) return key;
  }
}

// The heat map's data: each differing key counted in the segment of its
// token, as a difference and, once written, as a repaired row.
TEST_F(SessionTest, TheHeatCountsEachDifferenceInItsTokenSegment) {
  StartPeer("node-b");
  Put(*local_, "ks", KeyInSegment(7, 0));
  Put(peer_->store(), "ks", KeyInSegment(50, 0));
  Put(peer_->store(), "ks", KeyInSegment(50, 1));
  Put(peer_->store(), "other", KeyInSegment(0, 0));

  const SessionResult result = Run();
  ASSERT_TRUE(result.status.ok()) << result.status;
  const auto& keyspaces = result.heat.keyspaces();
  ASSERT_EQ(keyspaces.count("ks"), 1u);
  ASSERT_EQ(keyspaces.count("other"), 1u);
  const SegmentCounts& ks = keyspaces.at("ks");
  for (int i = 0; i < kHeatSegments; ++i) {
    const uint64_t expected = i == 7 ? 1 : i == 50 ? 2 : 0;
    EXPECT_EQ(ks.differences[i], expected) << "segment " << i;
    EXPECT_EQ(ks.rows_repaired[i], expected) << "segment " << i;
  }
  EXPECT_EQ(keyspaces.at("other").rows_repaired[0], 1u);

  // In sync now: the next session finds nothing anywhere.
  const SessionResult again = Run();
  ASSERT_TRUE(again.status.ok());
  for (const auto& [keyspace, counts] : again.heat.keyspaces()) {
    EXPECT_TRUE(counts.empty()) << keyspace;
  }
}

// `tally sync --keyspace`: a session limited to one keyspace syncs it alone.
TEST_F(SessionTest, OnlyKeyspaceSyncsThatKeyspaceAlone) {
  StartPeer("node-b");
  Put(*local_, "ks-1", "k");
  Put(peer_->store(), "ks-2", "k");
  Put(peer_->store(), "ks-3", "k");
  SessionOptions options;
  options.only_keyspace = "ks-2";
  ASSERT_TRUE(Run(std::move(options)).status.ok());
  EXPECT_THAT(phases_, ElementsAre(Pair("handshake", ""), Pair("diff", "ks-2"),
                                   Pair("repair", "ks-2"), Pair("done", "")));
  EXPECT_EQ(progress_.keyspaces, 1u);
  EXPECT_EQ(Rows(*local_, "ks-2"), 1u);
  EXPECT_EQ(Rows(*local_, "ks-3"), 0u);
  EXPECT_EQ(Rows(peer_->store(), "ks-1"), 0u);
}

TEST_F(SessionTest, OnlyKeyspaceThatNeitherSideHasFailsNamingTheKeyspaces) {
  StartPeer("node-b");
  Put(*local_, "ks-1", "k");
  Put(peer_->store(), "ks-2", "k");
  SessionOptions options;
  options.only_keyspace = "nope";
  const SessionResult result = Run(std::move(options));
  EXPECT_EQ(result.status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(result.status.message()),
              ::testing::HasSubstr(
                  "keyspace 'nope' is on neither this node nor peer " +
                  peer_->address() + "; keyspaces there are: ks-1, ks-2"));
  EXPECT_EQ(progress_.phase, SessionPhase::kFailed);
  EXPECT_EQ(progress_.failed_in, SessionPhase::kHandshake);
  EXPECT_EQ(Rows(*local_, "ks-2"), 0u);
}

// A requested session compares the roots after it: equal after a quiet
// sync; a keyspace written to after it was synced is named.
TEST_F(SessionTest, ComparingRootsAfterASyncNamesKeyspacesThatDifferAgain) {
  StartPeer("node-b");
  Put(*local_, "ks-1", "k");
  Put(peer_->store(), "ks-2", "k");
  SessionOptions quiet;
  quiet.compare_roots_after = true;
  SessionResult result = Run(std::move(quiet));
  ASSERT_TRUE(result.status.ok()) << result.status;
  EXPECT_TRUE(result.differing_after.empty());

  Put(*local_, "ks-1", "k2");
  Put(peer_->store(), "ks-2", "k2");
  SessionOptions raced;
  raced.compare_roots_after = true;
  bool written = false;
  raced.on_phase = [&](const SessionProgress& p) {
    // Once ks-1 is synced, a write lands in it on the peer.
    if (!written && p.phase == SessionPhase::kDiff && p.keyspace == "ks-2") {
      written = true;
      Put(peer_->store(), "ks-1", "late");
    }
  };
  result = Run(std::move(raced));
  ASSERT_TRUE(result.status.ok()) << result.status;
  EXPECT_THAT(result.differing_after, ElementsAre("ks-1"));
  // Without the comparison nothing is compared.
  EXPECT_TRUE(Run().differing_after.empty());
}

}  // namespace
}  // namespace node
}  // namespace tally
