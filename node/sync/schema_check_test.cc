// The schema check (node/sync/schema_check.h), and a session between two
// in-process nodes whose backends disagree about one keyspace's schema.
#include "node/sync/schema_check.h"

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/client/client.h"
#include "node/config/config.h"
#include "node/rpc/peer_service.h"
#include "node/session/session_scheduler.h"
#include "node/worker_pool.h"
#include "storage/row_backend.h"
#include "storage/store.h"
#include "support/temp_dir.h"

namespace tally {
namespace node {
namespace {

using ::tally::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(CheckSchema, EqualFingerprintsPass) {
  EXPECT_TRUE(CheckSchema("users", SchemaOf{"a", "embedded/1"},
                          SchemaOf{"b", "embedded/1"})
                  .ok());
}

TEST(CheckSchema, DifferentFingerprintsFailNamingBothNodesAndFingerprints) {
  const absl::Status s = CheckSchema("users", SchemaOf{"node-a", "pg:1234"},
                                     SchemaOf{"node-b", "pg:5678"});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      std::string(s.message()),
      AllOf(HasSubstr("'users'"), HasSubstr("'pg:1234'"), HasSubstr("node-a"),
            HasSubstr("'pg:5678'"), HasSubstr("node-b")));
}

// Two PostgreSQL tables whose descriptions both came: the refusal names the
// column and each node's type for it.
TEST(CheckSchema, TwoDescribedTablesThatDifferAreRefusedNamingTheColumn) {
  const std::string a = "key 1 \"id\" bigint\ncolumn \"a\" integer\n";
  const std::string b = "key 1 \"id\" bigint\ncolumn \"a\" bigint\n";
  const absl::Status s =
      CheckSchema("public.t", SchemaOf{"node-a", "postgresql/1:01", a},
                  SchemaOf{"node-b", "postgresql/1:02", b});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("'public.t'"),
                    HasSubstr("integer on node-a, bigint on node-b")));
  // Without both texts, the fingerprints alone.
  const absl::Status bare =
      CheckSchema("public.t", SchemaOf{"node-a", "postgresql/1:01", a},
                  SchemaOf{"node-b", "postgresql/1:02"});
  EXPECT_EQ(bare.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(bare.message()), Not(HasSubstr("integer")));
}

// An embedded node keeps opaque bytes: it takes a PostgreSQL table's
// canonical rows and diffs with its sidecar.
TEST(CheckSchema, TheEmbeddedBackendMatchesAnyFingerprint) {
  EXPECT_TRUE(CheckSchema("public.t", SchemaOf{"a", "embedded/1"},
                          SchemaOf{"b", "postgresql/1:00ff"})
                  .ok());
  EXPECT_TRUE(CheckSchema("public.t", SchemaOf{"a", "postgresql/1:00ff"},
                          SchemaOf{"b", "embedded/1"})
                  .ok());
}

TEST(CheckSchema, AnEmptyFingerprintIsANodeFromBeforeTheFieldAndPasses) {
  EXPECT_TRUE(
      CheckSchema("users", SchemaOf{"a", ""}, SchemaOf{"b", "pg:1234"}).ok());
  EXPECT_TRUE(
      CheckSchema("users", SchemaOf{"a", "pg:1234"}, SchemaOf{"b", ""}).ok());
}

TEST(SchemaFingerprints, MapsEveryKeyspaceOfAHandshakeToItsFingerprint) {
  v1::HandshakeResponse handshake;
  v1::KeyspaceSummary* users = handshake.add_keyspaces();
  users->set_name("users");
  users->set_schema_fingerprint("embedded/1");
  handshake.add_keyspaces()->set_name("old");  // a peer that sends none
  const auto fingerprints = SchemaFingerprints(handshake);
  ASSERT_EQ(fingerprints.size(), 2u);
  EXPECT_EQ(fingerprints.at("users"), "embedded/1");
  EXPECT_EQ(fingerprints.at("old"), "");
}

// The embedded backend, with another schema fingerprint for one keyspace
// (or for all, when `keyspace` is empty).
class FingerprintBackend : public storage::RowBackend {
 public:
  explicit FingerprintBackend(std::string fingerprint,
                              std::string keyspace = "")
      : fingerprint_(std::move(fingerprint)), keyspace_(std::move(keyspace)) {}
  absl::string_view name() const override { return "fingerprint"; }
  absl::Status ApplyRows(absl::Span<const storage::RowChange> rows,
                         std::vector<storage::RowOutcome>* outcomes) override {
    return inner_->ApplyRows(rows, outcomes);
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
    if (!keyspace_.empty() && keyspace != keyspace_) {
      return inner_->SchemaFingerprint(keyspace);
    }
    return fingerprint_;
  }

 private:
  const std::unique_ptr<storage::RowBackend> inner_ =
      storage::NewEmbeddedBackend();
  const std::string fingerprint_;
  const std::string keyspace_;
};

std::unique_ptr<storage::Store> OpenStore(
    const std::string& dir, const std::string& name,
    std::shared_ptr<storage::RowBackend> backend = nullptr) {
  storage::StoreOptions options;
  options.node_name = name;
  options.sync = false;
  options.default_depth = 8;
  options.backend = std::move(backend);
  absl::StatusOr<std::unique_ptr<storage::Store>> store =
      storage::Store::Open(dir, options);
  EXPECT_TRUE(store.ok()) << store.status();
  return std::move(store).value();
}

void Put(storage::Store& store, const std::string& keyspace,
         const std::string& key) {
  storage::WriteRequest write;
  write.mutations.push_back(storage::Mutation::Put(keyspace, key, "v"));
  ASSERT_TRUE(store.Write(std::move(write)).ok());
}

TEST(CheckKeyspaceSchema, ComparesThisNodesBackendWithThePeersHandshake) {
  TempDir dir;
  auto store = OpenStore(dir.path(), "node-a",
                         std::make_shared<FingerprintBackend>("pg:1234"));
  const absl::flat_hash_map<std::string, std::string> peer = {
      {"users", "pg:5678"},
      {"same", "pg:1234"},
      {"old", ""},
      {"opaque", "embedded/1"}};
  const absl::Status differs =
      CheckKeyspaceSchema(*store, "users", peer, "node-b");
  EXPECT_EQ(differs.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(differs.message()),
              AllOf(HasSubstr("'pg:1234' on this node (node-a)"),
                    HasSubstr("'pg:5678' on node-b")));
  EXPECT_TRUE(CheckKeyspaceSchema(*store, "same", peer, "node-b").ok());
  EXPECT_TRUE(CheckKeyspaceSchema(*store, "opaque", peer, "node-b").ok());
  EXPECT_TRUE(CheckKeyspaceSchema(*store, "old", peer, "node-b").ok());
  // The peer lacks it: nothing to compare.
  EXPECT_TRUE(CheckKeyspaceSchema(*store, "absent", peer, "node-b").ok());
}

TEST(CheckKeyspaceSchema, TheEmbeddedBackendNamesItsFormat) {
  TempDir dir;
  auto store = OpenStore(dir.path(), "node-a");
  EXPECT_EQ(store->SchemaFingerprint("anything").value(), "embedded/1");
}

// Node B: a store served by a Peer service on a loopback port.
class ServedNode {
 public:
  explicit ServedNode(const std::string& dir,
                      std::shared_ptr<storage::RowBackend> backend = nullptr)
      : store_(OpenStore(dir, "node-b", std::move(backend))),
        pool_(std::make_unique<WorkerPool>(2, 64)),
        service_(std::make_unique<PeerService>(store_.get(), pool_.get())) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    EXPECT_NE(server_, nullptr);
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  ~ServedNode() {
    service_->StopFeeds();
    server_->Shutdown();
    service_->WaitForFeeds();
  }

  storage::Store& store() { return *store_; }
  const std::string& address() const { return address_; }

 private:
  std::unique_ptr<storage::Store> store_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<PeerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

TEST(SchemaCheckHandshake, EveryKeyspaceCarriesTheBackendsFingerprint) {
  TempDir dir;
  ServedNode b(dir.path(),
               std::make_shared<FingerprintBackend>("pg:1234", "users"));
  Put(b.store(), "users", "k");
  Put(b.store(), "plain", "k");
  ClientOptions options;
  options.rpc_timeout = absl::Seconds(10);
  auto client = NodeClient::Connect(b.address(), options);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<v1::HandshakeResponse> hello = (*client)->Handshake({}, 0);
  ASSERT_TRUE(hello.ok()) << hello.status();
  const auto fingerprints = SchemaFingerprints(*hello);
  ASSERT_EQ(fingerprints.size(), 2u);
  EXPECT_EQ(fingerprints.at("users"), "pg:1234");
  EXPECT_EQ(fingerprints.at("plain"), "embedded/1");
}

TEST(SchemaCheckSession, AKeyspaceWhoseSchemaDiffersFailsAloneTheOthersSync) {
  TempDir dir_a, dir_b;
  ServedNode b(dir_b.path(),
               std::make_shared<FingerprintBackend>("other/2", "clash"));
  auto a = OpenStore(dir_a.path(), "node-a",
                     std::make_shared<FingerprintBackend>("other/1", "clash"));
  // "clash" comes first in the session (keyspaces go in name order).
  Put(b.store(), "clash", "from-b");
  Put(*a, "clash", "from-a");
  Put(b.store(), "fine", "from-b");
  Put(*a, "fine", "from-a");

  NodeConfig config;
  config.name = "node-a";
  config.peers.push_back(PeerConfig{b.address(), PeerRole::kPeer});
  config.sync_interval = absl::Hours(1);  // one session in this test
  ClientOptions client;
  client.node_name = "node-a";
  client.epoch = a->epoch();
  client.rpc_timeout = absl::Seconds(10);
  SessionScheduler scheduler(a.get(), config, client);
  ASSERT_TRUE(scheduler.Start().ok());
  v1::StatusResponse status;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    status.Clear();
    scheduler.FillStatus(&status);
    if (status.peers(0).last_session_unix_ms() != 0) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  scheduler.Shutdown();
  ASSERT_NE(status.peers(0).last_session_unix_ms(), 0) << "no session ran";

  const v1::PeerStatus& peer = status.peers(0);
  EXPECT_EQ(peer.sessions_failed(), 1u);
  EXPECT_THAT(peer.last_outcome(),
              AllOf(HasSubstr("FAILED_PRECONDITION"), HasSubstr("'clash'"),
                    HasSubstr("'other/1'"), HasSubstr("'other/2'")));
  // The other keyspace was synced both ways.
  EXPECT_TRUE(a->Get("fine", "from-b").ok());
  EXPECT_TRUE(b.store().Get("fine", "from-a").ok());
  // No row of the refused keyspace crossed, either way.
  EXPECT_TRUE(absl::IsNotFound(a->Get("clash", "from-b").status()));
  EXPECT_TRUE(absl::IsNotFound(b.store().Get("clash", "from-a").status()));
}

}  // namespace
}  // namespace node
}  // namespace tally
