// The Peer and Admin services over a real store and a real gRPC server on a
// loopback port, called through real stubs.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/client/wire.h"
#include "node/rpc/admin_service.h"
#include "node/rpc/peer_service.h"
#include "node/rpc/stream_limiter.h"
#include "node/worker_pool.h"
#include "storage/store.h"
#include "support/temp_dir.h"

namespace tally {
namespace node {
namespace {

using ::tally::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kNodeName[] = "node-a";

void SetDeadline(grpc::ClientContext* context) {
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(20));
}

// A version near the store's clock, `millis` after a fixed base; one base
// for the whole run, so equal offsets are equal versions.
tree::Version RemoteVersion(uint64_t millis, const std::string& origin) {
  static const uint64_t base = absl::ToUnixMillis(absl::Now()) - 100000;
  return tree::Version{tree::HlcTimestamp::FromParts(base + millis, 0), origin};
}

v1::Row RemoteRow(const std::string& key, const std::string& value,
                  uint64_t millis, const std::string& origin = "node-b") {
  v1::Row row;
  row.set_key(key);
  row.set_value(value);
  ToProto(RemoteVersion(millis, origin), row.mutable_version());
  return row;
}

class RecordingStatusSource : public StatusSource {
 public:
  void FillStatus(v1::StatusResponse* response) override {
    response->set_listen("127.0.0.1:7000");
    response->add_peers()->set_address("127.0.0.1:7001");
  }
};

struct ObservedHandshake {
  std::string address;
  std::string name;
  uint64_t epoch = 0;
};

// One node: store, pool, both services and a server, plus stubs to call it.
// Destroyed in reverse order: the server stops (waiting for every call to
// finish) before the pool and the store go away.
class TestNode {
 public:
  // With `limits`, the services bound and watch their bulk streams.
  TestNode(int threads, size_t max_queued,
           std::optional<StreamLimits> limits = std::nullopt) {
    if (limits.has_value()) {
      limiter_ = std::make_unique<StreamLimiter>(*limits);
    }
    storage::StoreOptions options;
    options.node_name = kNodeName;
    options.sync = false;  // tests do not need durability across power loss
    options.default_depth = 10;
    absl::StatusOr<std::unique_ptr<storage::Store>> store =
        storage::Store::Open(dir_.path(), options);
    EXPECT_TRUE(store.ok()) << store.status();
    store_ = std::move(store).value();
    pool_ = std::make_unique<WorkerPool>(threads, max_queued);
    peer_service_ = std::make_unique<PeerService>(
        store_.get(), pool_.get(),
        [this](const std::string& address, const std::string& name,
               uint64_t epoch) {
          absl::MutexLock lock(&mu_);
          handshakes_.push_back(ObservedHandshake{address, name, epoch});
        },
        FeedOptions{}, limiter_.get());
    admin_service_ = std::make_unique<AdminService>(
        store_.get(), pool_.get(),
        std::vector<StatusSource*>{&status_source_,
                                   peer_service_->feed_status()},
        limiter_.get());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(peer_service_.get());
    builder.RegisterService(admin_service_.get());
    server_ = builder.BuildAndStart();
    EXPECT_NE(server_, nullptr);
    EXPECT_NE(port, 0);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                   grpc::InsecureChannelCredentials());
    peer_ = v1::Peer::NewStub(channel_);
    admin_ = v1::Admin::NewStub(channel_);
  }

  ~TestNode() { server_->Shutdown(); }

  storage::Store& store() { return *store_; }
  WorkerPool& pool() { return *pool_; }
  StreamLimiter& limiter() { return *limiter_; }
  v1::Peer::Stub& peer() { return *peer_; }
  v1::Admin::Stub& admin() { return *admin_; }
  const std::shared_ptr<grpc::Channel>& channel() { return channel_; }

  std::vector<ObservedHandshake> handshakes() {
    absl::MutexLock lock(&mu_);
    return handshakes_;
  }

 private:
  TempDir dir_;
  std::unique_ptr<storage::Store> store_;
  std::unique_ptr<WorkerPool> pool_;
  // Outlives the server and so every stream's ticket.
  std::unique_ptr<StreamLimiter> limiter_;
  RecordingStatusSource status_source_;
  absl::Mutex mu_;
  std::vector<ObservedHandshake> handshakes_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<PeerService> peer_service_;
  std::unique_ptr<AdminService> admin_service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Peer::Stub> peer_;
  std::unique_ptr<v1::Admin::Stub> admin_;
};

class ServicesTest : public ::testing::Test {
 protected:
  ServicesTest() : node_(/*threads=*/2, /*max_queued=*/64) {}

  storage::Store& store() { return node_.store(); }

  // Writes rows with remote versions straight into the store.
  void WriteRemote(const std::string& keyspace,
                   const std::vector<v1::Row>& rows) {
    storage::WriteRequest write;
    for (const v1::Row& row : rows) {
      absl::StatusOr<storage::Mutation> m = MutationFromProto(keyspace, row);
      ASSERT_TRUE(m.ok()) << m.status();
      write.mutations.push_back(std::move(*m));
    }
    absl::StatusOr<storage::WriteResult> result =
        store().Write(std::move(write));
    ASSERT_TRUE(result.ok()) << result.status();
  }

  // Local writes of `count` rows "<prefix><i>" with `value`.
  void WriteLocal(const std::string& keyspace, const std::string& prefix,
                  int count, const std::string& value = "v") {
    storage::WriteRequest write;
    for (int i = 0; i < count; ++i) {
      write.mutations.push_back(
          storage::Mutation::Put(keyspace, absl::StrCat(prefix, i), value));
    }
    absl::StatusOr<storage::WriteResult> result =
        store().Write(std::move(write));
    ASSERT_TRUE(result.ok()) << result.status();
  }

  grpc::Status Put(const std::string& keyspace, const std::string& key,
                   const std::string& value, v1::PutResponse* response) {
    grpc::ClientContext context;
    SetDeadline(&context);
    v1::PutRequest request;
    request.set_keyspace(keyspace);
    request.set_key(key);
    request.set_value(value);
    return node_.admin().Put(&context, request, response);
  }

  grpc::Status Get(const std::string& keyspace, const std::string& key,
                   v1::GetResponse* response) {
    grpc::ClientContext context;
    SetDeadline(&context);
    v1::GetRequest request;
    request.set_keyspace(keyspace);
    request.set_key(key);
    return node_.admin().Get(&context, request, response);
  }

  grpc::Status Handshake(const v1::HandshakeRequest& request,
                         v1::HandshakeResponse* response) {
    grpc::ClientContext context;
    SetDeadline(&context);
    return node_.peer().Handshake(&context, request, response);
  }

  grpc::Status Exchange(const v1::ExchangeRequest& request,
                        v1::ExchangeResponse* response) {
    grpc::ClientContext context;
    SetDeadline(&context);
    return node_.peer().Exchange(&context, request, response);
  }

  grpc::Status Scan(const v1::ScanRequest& request,
                    std::vector<v1::ScanResponse>* messages) {
    grpc::ClientContext context;
    SetDeadline(&context);
    std::unique_ptr<grpc::ClientReader<v1::ScanResponse>> reader =
        node_.peer().Scan(&context, request);
    v1::ScanResponse message;
    while (reader->Read(&message)) messages->push_back(message);
    return reader->Finish();
  }

  grpc::Status FetchRows(const v1::FetchRowsRequest& request,
                         std::vector<v1::FetchRowsResponse>* messages) {
    grpc::ClientContext context;
    SetDeadline(&context);
    std::unique_ptr<grpc::ClientReader<v1::FetchRowsResponse>> reader =
        node_.peer().FetchRows(&context, request);
    v1::FetchRowsResponse message;
    while (reader->Read(&message)) messages->push_back(message);
    return reader->Finish();
  }

  grpc::Status PushRows(const std::vector<v1::PushRowsRequest>& messages,
                        v1::PushRowsResponse* response) {
    grpc::ClientContext context;
    SetDeadline(&context);
    std::unique_ptr<grpc::ClientWriter<v1::PushRowsRequest>> writer =
        node_.peer().PushRows(&context, response);
    for (const v1::PushRowsRequest& message : messages) {
      if (!writer->Write(message)) break;  // the server finished early
    }
    writer->WritesDone();
    return writer->Finish();
  }

  grpc::Status Load(const std::vector<v1::LoadRequest>& messages,
                    v1::LoadResponse* response) {
    grpc::ClientContext context;
    SetDeadline(&context);
    std::unique_ptr<grpc::ClientWriter<v1::LoadRequest>> writer =
        node_.admin().Load(&context, response);
    for (const v1::LoadRequest& message : messages) {
      if (!writer->Write(message)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }

  // Sends `messages` as they are — bytes, valid protobuf or not — on the
  // client stream `method` ("/tally.v1.Admin/Load"), as a client with a bug
  // or a damaged link might. Returns the call's status.
  grpc::Status RawClientStream(const std::string& method,
                               const std::vector<std::string>& messages) {
    grpc::GenericStub stub(node_.channel());
    grpc::CompletionQueue cq;
    grpc::ClientContext context;
    SetDeadline(&context);
    std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
        stub.PrepareCall(&context, method, &cq);
    void* tag = nullptr;
    bool ok = false;
    auto step = [&](intptr_t want) {
      EXPECT_TRUE(cq.Next(&tag, &ok));
      EXPECT_EQ(reinterpret_cast<intptr_t>(tag), want);
      return ok;
    };
    call->StartCall(reinterpret_cast<void*>(1));
    bool open = step(1);
    for (const std::string& message : messages) {
      if (!open) break;
      grpc::Slice slice(message);
      grpc::ByteBuffer buffer(&slice, 1);
      call->Write(buffer, reinterpret_cast<void*>(2));
      open = step(2);
    }
    if (open) {
      call->WritesDone(reinterpret_cast<void*>(3));
      step(3);
    }
    grpc::ByteBuffer answer;
    call->Read(&answer, reinterpret_cast<void*>(4));
    step(4);
    grpc::Status status;
    call->Finish(&status, reinterpret_cast<void*>(5));
    step(5);
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
    return status;
  }

  // The node still answers a good call after whatever came before.
  void ExpectStillServing() {
    v1::PutResponse put;
    grpc::Status status = Put("alive", "key", "value", &put);
    EXPECT_TRUE(status.ok()) << status.error_message();
    v1::HandshakeRequest request;
    request.set_protocol_version(kProtocolVersion);
    v1::HandshakeResponse response;
    status = Handshake(request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
  }

  TestNode node_;
};

class AdminServiceTest : public ServicesTest {};
class PeerServiceTest : public ServicesTest {};

MATCHER_P2(IsStatus, code, substring, "") {
  *result_listener << "status " << arg.error_code() << " \""
                   << arg.error_message() << "\"";
  return arg.error_code() == code &&
         arg.error_message().find(substring) != std::string::npos;
}

// ------------------------------------------------------------------ Admin

TEST_F(AdminServiceTest, PutThenGetReturnsTheValueAndTheVersionPutGave) {
  v1::PutResponse put;
  ASSERT_TRUE(Put("users", "alice", "{\"age\":30}", &put).ok());
  EXPECT_EQ(put.version().origin(), kNodeName);
  EXPECT_NE(put.version().hlc(), 0u);

  v1::GetResponse get;
  ASSERT_TRUE(Get("users", "alice", &get).ok());
  EXPECT_EQ(get.row().key(), "alice");
  EXPECT_EQ(get.row().value(), "{\"age\":30}");
  EXPECT_FALSE(get.row().deleted());
  EXPECT_EQ(get.row().version().hlc(), put.version().hlc());
  EXPECT_EQ(get.row().version().origin(), kNodeName);
}

TEST_F(AdminServiceTest, DeleteLeavesATombstoneThatGetReturns) {
  v1::PutResponse put;
  ASSERT_TRUE(Put("users", "alice", "x", &put).ok());

  grpc::ClientContext context;
  SetDeadline(&context);
  v1::DeleteRequest request;
  request.set_keyspace("users");
  request.set_key("alice");
  v1::DeleteResponse deleted;
  ASSERT_TRUE(node_.admin().Delete(&context, request, &deleted).ok());
  EXPECT_GT(deleted.version().hlc(), put.version().hlc());

  v1::GetResponse get;
  ASSERT_TRUE(Get("users", "alice", &get).ok());
  EXPECT_TRUE(get.row().deleted());
  EXPECT_EQ(get.row().value(), "");
  EXPECT_EQ(get.row().version().hlc(), deleted.version().hlc());
}

TEST_F(AdminServiceTest, GetOfAMissingKeyOrKeyspaceIsNotFound) {
  v1::PutResponse put;
  ASSERT_TRUE(Put("users", "alice", "x", &put).ok());
  v1::GetResponse get;
  EXPECT_THAT(Get("users", "bob", &get),
              IsStatus(grpc::StatusCode::NOT_FOUND, "bob"));
  EXPECT_THAT(Get("nope", "alice", &get),
              IsStatus(grpc::StatusCode::NOT_FOUND, "nope"));
}

TEST_F(AdminServiceTest, OversizedKeyIsInvalidArgumentNamingTheLimit) {
  const std::string key(16 * 1024 + 1, 'k');
  v1::PutResponse put;
  EXPECT_THAT(Put("users", key, "x", &put),
              IsStatus(grpc::StatusCode::INVALID_ARGUMENT, "max_key_bytes"));
  EXPECT_THAT(Put("users", key, "x", &put),
              IsStatus(grpc::StatusCode::INVALID_ARGUMENT, "16384"));
  v1::GetResponse get;
  EXPECT_THAT(Get("users", key, &get),
              IsStatus(grpc::StatusCode::INVALID_ARGUMENT, "max_key_bytes"));
  ExpectStillServing();
}

TEST_F(AdminServiceTest, EmptyKeyOrBadKeyspaceNameIsInvalidArgument) {
  v1::PutResponse put;
  EXPECT_THAT(Put("users", "", "x", &put),
              IsStatus(grpc::StatusCode::INVALID_ARGUMENT, "key is empty"));
  EXPECT_THAT(Put("no spaces", "k", "x", &put),
              IsStatus(grpc::StatusCode::INVALID_ARGUMENT, "keyspace"));
  EXPECT_THAT(Put("", "k", "x", &put),
              IsStatus(grpc::StatusCode::INVALID_ARGUMENT, "keyspace"));
  ExpectStillServing();
}

TEST_F(AdminServiceTest, LoadWritesEveryRowOfEveryMessage) {
  std::vector<v1::LoadRequest> messages(3);
  for (int m = 0; m < 3; ++m) {
    if (m == 0) messages[m].set_keyspace("bulk");
    for (int i = 0; i < 1000; ++i) {
      v1::Row* row = messages[m].add_rows();
      row->set_key(absl::StrCat("k", m, "-", i));
      row->set_value(absl::StrCat("v", m, "-", i));
    }
  }
  v1::LoadResponse response;
  grpc::Status status = Load(messages, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.rows(), 3000u);

  absl::StatusOr<storage::KeyspaceInfo> info = store().GetKeyspace("bulk");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->row_count, 3000u);
  v1::GetResponse get;
  ASSERT_TRUE(Get("bulk", "k2-999", &get).ok());
  EXPECT_EQ(get.row().value(), "v2-999");
  EXPECT_EQ(get.row().version().origin(), kNodeName);
}

// A LoadRequest of `rows` rows "<prefix><i>", serialized.
std::string LoadMessage(const std::string& keyspace, const std::string& prefix,
                        int rows) {
  v1::LoadRequest request;
  request.set_keyspace(keyspace);
  for (int i = 0; i < rows; ++i) {
    v1::Row* row = request.add_rows();
    row->set_key(absl::StrCat(prefix, i));
    row->set_value(absl::StrCat("value of ", prefix, i));
  }
  return request.SerializeAsString();
}

// gRPC reports a message it cannot parse like the end of
// the stream, so [good, truncated, good] used to answer OK with rows: 1.
TEST_F(AdminServiceTest,
       ACorruptMessageInALoadFailsNamingItAndWhatWasCommitted) {
  const std::string good = LoadMessage("bulk", "a", 10);
  std::string truncated = LoadMessage("bulk", "b", 10);
  truncated.resize(truncated.size() - 3);  // inside the last row's value
  const std::string later = LoadMessage("bulk", "c", 10);
  const grpc::Status status =
      RawClientStream("/tally.v1.Admin/Load", {good, truncated, later});
  EXPECT_THAT(status, IsStatus(grpc::StatusCode::INVALID_ARGUMENT,
                               "message 2 of the load"));
  EXPECT_THAT(status.error_message(), HasSubstr("tally.v1.LoadRequest"));
  EXPECT_THAT(status.error_message(),
              HasSubstr("the 1 message before it committed 10 rows"));
  absl::StatusOr<storage::KeyspaceInfo> info = store().GetKeyspace("bulk");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->row_count, 10u);  // the first message, and only it
  v1::GetResponse get;
  EXPECT_TRUE(Get("bulk", "a9", &get).ok());
  EXPECT_EQ(Get("bulk", "c0", &get).error_code(), grpc::StatusCode::NOT_FOUND);
  ExpectStillServing();
}

TEST_F(AdminServiceTest, LoadOfGoodRawMessagesAnswersTheRowCount) {
  // The raw path still parses and answers a good stream.
  v1::LoadResponse response;
  grpc::ClientContext context;
  SetDeadline(&context);
  std::unique_ptr<grpc::ClientWriter<v1::LoadRequest>> writer =
      node_.admin().Load(&context, &response);
  for (int m = 0; m < 2; ++m) {
    v1::LoadRequest request;
    ASSERT_TRUE(request.ParseFromString(LoadMessage("bulk", "k", 5)));
    ASSERT_TRUE(writer->Write(request));
  }
  writer->WritesDone();
  ASSERT_TRUE(writer->Finish().ok());
  EXPECT_EQ(response.rows(), 10u);
}

TEST_F(AdminServiceTest, LoadRefusesRowsWithAVersionOrADeleteFlag) {
  v1::LoadRequest versioned;
  versioned.set_keyspace("bulk");
  *versioned.add_rows() = RemoteRow("a", "x", 10);
  v1::LoadResponse response;
  EXPECT_THAT(Load({versioned}, &response),
              IsStatus(grpc::StatusCode::INVALID_ARGUMENT,
                       "load takes plain key/value rows"));

  v1::LoadRequest tombstone;
  tombstone.set_keyspace("bulk");
  v1::Row* row = tombstone.add_rows();
  row->set_key("a");
  row->set_deleted(true);
  EXPECT_THAT(Load({tombstone}, &response),
              IsStatus(grpc::StatusCode::INVALID_ARGUMENT,
                       "load takes plain key/value rows"));
  EXPECT_FALSE(store().GetKeyspace("bulk").ok());
  ExpectStillServing();
}

TEST_F(AdminServiceTest, LoadRefusesMoreRowsThanTheLimitInOneMessage) {
  v1::LoadRequest request;
  request.set_keyspace("bulk");
  for (size_t i = 0; i <= kMaxRowsPerMessage; ++i) {
    v1::Row* row = request.add_rows();
    row->set_key(absl::StrCat("k", i));
    row->set_value("v");
  }
  v1::LoadResponse response;
  EXPECT_THAT(Load({request}, &response),
              IsStatus(grpc::StatusCode::RESOURCE_EXHAUSTED, "10000"));
  EXPECT_FALSE(store().GetKeyspace("bulk").ok());
  ExpectStillServing();
}

TEST_F(AdminServiceTest, StatusReportsTheNodeItsKeyspacesAndItsPeers) {
  WriteLocal("users", "u", 5);
  WriteLocal("orders", "o", 7);

  grpc::ClientContext context;
  SetDeadline(&context);
  v1::StatusResponse status;
  ASSERT_TRUE(
      node_.admin().Status(&context, v1::StatusRequest(), &status).ok());
  EXPECT_EQ(status.node_name(), kNodeName);
  EXPECT_EQ(status.epoch(), store().epoch());
  EXPECT_EQ(status.last_sequence(), store().last_sequence());
  EXPECT_EQ(status.last_sequence(), 12u);
  ASSERT_EQ(status.keyspaces_size(), 2);
  for (const v1::KeyspaceSummary& summary : status.keyspaces()) {
    absl::StatusOr<storage::KeyspaceInfo> info =
        store().GetKeyspace(summary.name());
    ASSERT_TRUE(info.ok()) << info.status();
    absl::StatusOr<tree::ViewSummary> decoded = SummaryFromProto(summary);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(decoded->row_count, info->row_count);
    EXPECT_EQ(decoded->root, info->root);
    EXPECT_EQ(decoded->depth, info->depth);
    EXPECT_TRUE(decoded->top.empty());
  }
  // What only the running node knows comes from its StatusSource.
  EXPECT_EQ(status.listen(), "127.0.0.1:7000");
  ASSERT_EQ(status.peers_size(), 1);
  EXPECT_EQ(status.peers(0).address(), "127.0.0.1:7001");
  // Both keyspaces were created by these writes: their rows are new, and
  // the filter spared every read.
  EXPECT_EQ(status.row_filter().keyspaces(), 2u);
  EXPECT_EQ(status.row_filter().built(), 2u);
  EXPECT_EQ(status.row_filter().reads_skipped(), 12u);
  EXPECT_EQ(status.row_filter().rows_read(), 0u);
  EXPECT_GT(status.row_filter().memory_bytes(), 0u);
}

TEST_F(AdminServiceTest, AFullPoolAnswersResourceExhausted) {
  // Declared first, so that they outlive the pool task waiting on them.
  absl::Notification release;
  absl::Notification started;
  TestNode node(/*threads=*/1, /*max_queued=*/1);
  // Occupy the only thread, then the only queue slot.
  ASSERT_TRUE(node.pool().Schedule([&] {
    started.Notify();
    release.WaitForNotification();
  }));
  started.WaitForNotification();
  ASSERT_TRUE(node.pool().Schedule([] {}));

  grpc::ClientContext context;
  SetDeadline(&context);
  v1::PutRequest request;
  request.set_keyspace("users");
  request.set_key("alice");
  v1::PutResponse response;
  EXPECT_THAT(node.admin().Put(&context, request, &response),
              IsStatus(grpc::StatusCode::RESOURCE_EXHAUSTED, "overloaded"));
  release.Notify();
}

// ------------------------------------------------------------------- Peer

TEST_F(PeerServiceTest, HandshakeSummarisesEveryKeyspaceWithTopLevels) {
  WriteLocal("users", "u", 300);
  WriteLocal("orders", "o", 20);

  v1::HandshakeRequest request;
  request.set_protocol_version(kProtocolVersion);
  request.set_node_name("node-b");
  request.set_epoch(42);
  request.set_top_levels(3);
  v1::HandshakeResponse response;
  // A diff's or repair's handshake (not a scheduled session's) is not
  // observed: it says nothing of the link.
  grpc::Status status = Handshake(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(node_.handshakes().empty());
  request.set_scheduled(true);
  status = Handshake(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.protocol_version(), kProtocolVersion);
  EXPECT_EQ(response.node_name(), kNodeName);
  EXPECT_EQ(response.epoch(), store().epoch());
  ASSERT_EQ(response.keyspaces_size(), 2);
  for (const v1::KeyspaceSummary& summary : response.keyspaces()) {
    absl::StatusOr<tree::ViewSummary> got = SummaryFromProto(summary);
    ASSERT_TRUE(got.ok()) << got.status();
    auto view = store().NewTreeView(summary.name());
    ASSERT_TRUE(view.ok()) << view.status();
    absl::StatusOr<tree::ViewSummary> want = (*view)->Summary(3);
    ASSERT_TRUE(want.ok()) << want.status();
    EXPECT_EQ(got->depth, want->depth);
    EXPECT_EQ(got->root, want->root);
    EXPECT_EQ(got->row_count, want->row_count);
    ASSERT_EQ(got->top.size(), 8u);
    EXPECT_EQ(got->top, want->top);
    uint64_t total = 0;
    for (const tree::NodeDigest& d : got->top) total += d.count;
    EXPECT_EQ(total, got->row_count);
  }

  // The node learned who called.
  std::vector<ObservedHandshake> seen = node_.handshakes();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].name, "node-b");
  EXPECT_EQ(seen[0].epoch, 42u);
  EXPECT_THAT(seen[0].address, HasSubstr("127.0.0.1"));
}

TEST_F(PeerServiceTest, HandshakeOmitsKeyspacesTheNodeDoesNotHave) {
  WriteLocal("users", "u", 3);
  v1::HandshakeRequest request;
  request.set_protocol_version(kProtocolVersion);
  request.add_keyspaces("users");
  request.add_keyspaces("nope");
  v1::HandshakeResponse response;
  ASSERT_TRUE(Handshake(request, &response).ok());
  ASSERT_EQ(response.keyspaces_size(), 1);
  EXPECT_EQ(response.keyspaces(0).name(), "users");
  EXPECT_EQ(response.keyspaces(0).row_count(), 3u);
  EXPECT_EQ(response.keyspaces(0).top_fingerprints_size(), 0);
  // A tool (no node name) is not reported as a peer.
  EXPECT_TRUE(node_.handshakes().empty());
}

TEST_F(PeerServiceTest, HandshakeRefusesAnotherProtocolVersion) {
  v1::HandshakeRequest request;
  request.set_protocol_version(kProtocolVersion + 1);
  v1::HandshakeResponse response;
  grpc::Status status = Handshake(request, &response);
  EXPECT_THAT(status, IsStatus(grpc::StatusCode::FAILED_PRECONDITION,
                               absl::StrCat("version ", kProtocolVersion + 1)));
  EXPECT_THAT(status.error_message(),
              HasSubstr(absl::StrCat("version ", kProtocolVersion)));
  ExpectStillServing();
}

TEST_F(PeerServiceTest, HandshakeRefusesBadTopLevelsAndKeyspaceNames) {
  v1::HandshakeRequest request;
  request.set_protocol_version(kProtocolVersion);
  request.set_top_levels(tree::kMaxSummaryTopLevels + 1);
  v1::HandshakeResponse response;
  EXPECT_THAT(Handshake(request, &response),
              IsStatus(grpc::StatusCode::INVALID_ARGUMENT, "levels"));

  request.set_top_levels(0);
  request.add_keyspaces("bad name!");
  EXPECT_THAT(Handshake(request, &response),
              IsStatus(grpc::StatusCode::INVALID_ARGUMENT, "bad name!"));
  ExpectStillServing();
}

// A keyspace named 100,000 times at top_levels 8 once made a 234 MB
// answer.
TEST_F(PeerServiceTest, HandshakeRefusesDuplicatedKeyspaces) {
  WriteLocal("users", "u", 10);
  v1::HandshakeRequest request;
  request.set_protocol_version(kProtocolVersion);
  request.set_top_levels(tree::kMaxSummaryTopLevels);
  for (int i = 0; i < 3; ++i) request.add_keyspaces("users");
  v1::HandshakeResponse response;
  EXPECT_THAT(Handshake(request, &response),
              IsStatus(grpc::StatusCode::INVALID_ARGUMENT,
                       "keyspace 'users' is named twice"));
  EXPECT_EQ(response.keyspaces_size(), 0);
  ExpectStillServing();
}

TEST_F(PeerServiceTest, HandshakeRefusesMoreKeyspacesThanTheLimit) {
  v1::HandshakeRequest request;
  request.set_protocol_version(kProtocolVersion);
  for (int i = 0; i < 1025; ++i) request.add_keyspaces(absl::StrCat("k", i));
  v1::HandshakeResponse response;
  EXPECT_THAT(Handshake(request, &response),
              IsStatus(grpc::StatusCode::INVALID_ARGUMENT,
                       "handshake names 1025 keyspaces; the limit is 1024"));
  ExpectStillServing();
}

// Every answer stays under the 4 MB every request is held
// to. 20,000 rows with 250-byte keys listed in one exchange would be ~5.5 MB;
// the node stops building it at 4 MiB instead of sending it (or holding
// it).
TEST_F(PeerServiceTest, ExchangeAnswerOverTheMessageLimitIsRefusedByTheNode) {
  for (int batch = 0; batch < 2; ++batch) {
    storage::WriteRequest write;
    for (int i = 0; i < 10000; ++i) {
      write.mutations.push_back(storage::Mutation::Put(
          "wide", absl::StrCat(std::string(250, 'k'), batch, "-", i), "v"));
    }
    ASSERT_TRUE(store().Write(std::move(write)).ok());
  }
  v1::ExchangeRequest request;
  request.set_keyspace("wide");
  ToProto(tree::NodeRef{0, 0}, request.add_list());
  v1::ExchangeResponse response;
  // (gRPC's own refusal at the client, which is what happened before, says
  // "Received message larger than max (5597793 vs. 4194304)".)
  EXPECT_THAT(Exchange(request, &response),
              IsStatus(grpc::StatusCode::RESOURCE_EXHAUSTED, "4194304 bytes"));
  ExpectStillServing();
}

void ExpectSameEntry(const tree::RowEntry& got, const tree::RowEntry& want) {
  EXPECT_EQ(got.token, want.token);
  EXPECT_EQ(got.key, want.key);
  EXPECT_EQ(got.version, want.version);
  EXPECT_EQ(got.deleted, want.deleted);
  EXPECT_EQ(got.digest.Fingerprint(), want.digest.Fingerprint());
}

TEST_F(PeerServiceTest, ExchangeAnswersAsTheStoreViewDoes) {
  WriteLocal("users", "u", 2000);
  WriteRemote("users", {RemoteRow("from-b", "x", 5, "node-b"),
                        RemoteRow("from-c", "y", 6, "node-c")});

  tree::ViewRequest request;
  request.descend.push_back({tree::NodeRef{0, 0}, 4});
  request.descend.push_back({tree::NodeRef{6, 17}, 8});  // below the leaves
  request.list.push_back(tree::NodeRef{11, 5});
  request.list.push_back(tree::NodeRef{9, 300});
  request.list.push_back(tree::NodeRef{0, 0});
  v1::ExchangeRequest wire;
  wire.set_keyspace("users");
  ToProto(request, &wire);
  v1::ExchangeResponse response;
  grpc::Status status = Exchange(wire, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  absl::StatusOr<tree::ViewResponse> got = FromProto(response);
  ASSERT_TRUE(got.ok()) << got.status();

  auto view = store().NewTreeView("users");
  ASSERT_TRUE(view.ok()) << view.status();
  absl::StatusOr<tree::ViewResponse> want = (*view)->Exchange(request);
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(got->descendants.size(), 16u + 256u);
  EXPECT_EQ(got->descendants, want->descendants);
  EXPECT_EQ(got->entries_per_range, want->entries_per_range);
  EXPECT_EQ(got->entries_per_range.back(), 2002u);
  ASSERT_EQ(got->entries.size(), want->entries.size());
  for (size_t i = 0; i < got->entries.size(); ++i) {
    ExpectSameEntry(got->entries[i], want->entries[i]);
  }
}

TEST_F(PeerServiceTest, ExchangeOfAnUnknownKeyspaceIsNotFoundNamingTheNode) {
  v1::ExchangeRequest request;
  request.set_keyspace("nope");
  ToProto(tree::NodeRef{0, 0}, request.add_list());
  v1::ExchangeResponse response;
  EXPECT_THAT(Exchange(request, &response),
              IsStatus(grpc::StatusCode::NOT_FOUND,
                       "keyspace 'nope' does not exist on node 'node-a'"));
}

TEST_F(PeerServiceTest, ExchangeRefusesInvalidNodesAndLevels) {
  WriteLocal("users", "u", 10);
  auto exchange = [&](const v1::ExchangeRequest& request) {
    v1::ExchangeResponse response;
    return Exchange(request, &response);
  };
  v1::ExchangeRequest base;
  base.set_keyspace("users");

  v1::ExchangeRequest level_too_deep = base;
  level_too_deep.add_list()->set_level(65);
  EXPECT_THAT(exchange(level_too_deep),
              IsStatus(grpc::StatusCode::INVALID_ARGUMENT, "level 65"));

  v1::ExchangeRequest index_too_large = base;
  v1::DescendRequest* d = index_too_large.add_descend();
  d->mutable_node()->set_level(3);
  d->mutable_node()->set_index(8);
  d->set_levels_ahead(1);
  EXPECT_THAT(exchange(index_too_large),
              IsStatus(grpc::StatusCode::INVALID_ARGUMENT, "index 8"));

  for (uint32_t ahead : {0u, 17u}) {
    v1::ExchangeRequest bad_ahead = base;
    v1::DescendRequest* descend = bad_ahead.add_descend();
    descend->mutable_node()->set_level(0);
    descend->set_levels_ahead(ahead);
    EXPECT_THAT(exchange(bad_ahead),
                IsStatus(grpc::StatusCode::INVALID_ARGUMENT,
                         absl::StrCat(ahead, " levels ahead")));
  }

  v1::ExchangeRequest too_many = base;
  for (int i = 0; i < 5; ++i) {
    v1::DescendRequest* descend = too_many.add_descend();
    descend->mutable_node()->set_level(0);
    descend->set_levels_ahead(16);
  }
  EXPECT_THAT(exchange(too_many),
              IsStatus(grpc::StatusCode::RESOURCE_EXHAUSTED, "limit"));

  v1::ExchangeRequest bad_name = base;
  bad_name.set_keyspace("");
  EXPECT_THAT(exchange(bad_name),
              IsStatus(grpc::StatusCode::INVALID_ARGUMENT, "keyspace"));
  ExpectStillServing();
}

// 4,000 rows with 600-byte keys: about 2.5 MB of entries.
constexpr int kBigRows = 4000;
std::string BigKey(int i) {
  return absl::StrCat(std::string(600, 'k'), "-", i);
}

TEST_F(PeerServiceTest, ScanStreamsEveryRowInSeveralMessages) {
  storage::WriteRequest write;
  for (int i = 0; i < kBigRows; ++i) {
    write.mutations.push_back(storage::Mutation::Put("big", BigKey(i), "v"));
  }
  ASSERT_TRUE(store().Write(std::move(write)).ok());
  WriteRemote("big", {RemoteRow("remote", "x", 7, "node-b")});

  v1::ScanRequest request;
  request.set_keyspace("big");
  // The whole keyspace as two halves.
  ToProto(tree::NodeRef{1, 0}, request.add_ranges());
  ToProto(tree::NodeRef{1, 1}, request.add_ranges());
  std::vector<v1::ScanResponse> messages;
  grpc::Status status = Scan(request, &messages);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_GE(messages.size(), 2u);

  std::vector<tree::RowEntry> got;
  for (const v1::ScanResponse& message : messages) {
    EXPECT_LE(message.ByteSizeLong(), 2 * kStreamChunkBytes);
    for (const v1::RowEntry& wire : message.entries()) {
      // Each message carries its own origin names.
      absl::StatusOr<tree::RowEntry> entry = FromProto(wire, message.origins());
      ASSERT_TRUE(entry.ok()) << entry.status();
      got.push_back(std::move(*entry));
    }
  }
  std::vector<tree::RowEntry> want;
  auto view = store().NewTreeView("big");
  ASSERT_TRUE(view.ok()) << view.status();
  ASSERT_TRUE((*view)
                  ->Scan({tree::NodeRef{0, 0}},
                         [&](const tree::RowEntry& e) {
                           want.push_back(e);
                           return absl::OkStatus();
                         })
                  .ok());
  ASSERT_EQ(got.size(), static_cast<size_t>(kBigRows + 1));
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ExpectSameEntry(got[i], want[i]);
}

// Asked for values, a scan carries each row's (a tombstone's empty one), in
// chunks still near kStreamChunkBytes, and leaves out those over
// kMaxScanValueBytes: the repair fetches those by key. Not asked, none.
TEST_F(PeerServiceTest, ScanWithValuesCarriesValuesUpToTheirLimit) {
  storage::WriteRequest write;
  for (int i = 0; i < 3000; ++i) {
    write.mutations.push_back(storage::Mutation::Put(
        "vals", absl::StrCat("k", i), std::string(400, 'a' + i % 26)));
  }
  write.mutations.push_back(storage::Mutation::Put(
      "vals", "huge", std::string(kMaxScanValueBytes + 1, 'h')));
  write.mutations.push_back(storage::Mutation::Put(
      "vals", "largest", std::string(kMaxScanValueBytes, 'l')));
  ASSERT_TRUE(store().Write(std::move(write)).ok());
  storage::WriteRequest del;
  del.mutations.push_back(storage::Mutation::Delete("vals", "k5"));
  ASSERT_TRUE(store().Write(std::move(del)).ok());

  v1::ScanRequest request;
  request.set_keyspace("vals");
  ToProto(tree::NodeRef{0, 0}, request.add_ranges());
  request.set_with_values(true);
  std::vector<v1::ScanResponse> messages;
  grpc::Status status = Scan(request, &messages);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_GE(messages.size(), 2u);
  size_t rows = 0;
  for (const v1::ScanResponse& message : messages) {
    EXPECT_LE(message.ByteSizeLong(),
              kStreamChunkBytes + 2 * kMaxScanValueBytes);
    for (const v1::RowEntry& wire : message.entries()) {
      ++rows;
      absl::StatusOr<tree::RowEntry> entry = FromProto(wire, message.origins());
      ASSERT_TRUE(entry.ok()) << entry.status();
      if (entry->key == "huge") {
        EXPECT_FALSE(entry->value.has_value());
        continue;
      }
      ASSERT_TRUE(entry->value.has_value()) << entry->key;
      absl::StatusOr<storage::Row> row = store().Get("vals", entry->key);
      ASSERT_TRUE(row.ok()) << row.status();
      EXPECT_EQ(*entry->value, row->value) << entry->key;
      EXPECT_EQ(entry->deleted, row->deleted);
      EXPECT_EQ(entry->digest.Fingerprint(), row->digest.Fingerprint());
    }
  }
  EXPECT_EQ(rows, 3002u);

  request.set_with_values(false);
  messages.clear();
  status = Scan(request, &messages);
  ASSERT_TRUE(status.ok()) << status.error_message();
  for (const v1::ScanResponse& message : messages) {
    for (const v1::RowEntry& wire : message.entries()) {
      EXPECT_FALSE(wire.has_value()) << wire.key();
    }
  }
}

TEST_F(PeerServiceTest, ScanCancelledByTheCallerFreesItsPoolThread) {
  // One pool thread: if the cancelled scan kept it, nothing else would run.
  TestNode node(/*threads=*/1, /*max_queued=*/8);
  storage::WriteRequest write;
  for (int i = 0; i < kBigRows; ++i) {
    // 8 MB of entries, far more than one message and gRPC's flow control
    // window, so the scan is still writing when the caller goes away.
    write.mutations.push_back(storage::Mutation::Put(
        "big", absl::StrCat(std::string(2000, 'k'), i), "v"));
  }
  ASSERT_TRUE(node.store().Write(std::move(write)).ok());
  v1::ScanRequest request;
  request.set_keyspace("big");
  ToProto(tree::NodeRef{0, 0}, request.add_ranges());

  grpc::ClientContext context;
  SetDeadline(&context);
  std::unique_ptr<grpc::ClientReader<v1::ScanResponse>> reader =
      node.peer().Scan(&context, request);
  v1::ScanResponse message;
  ASSERT_TRUE(reader->Read(&message));
  context.TryCancel();
  while (reader->Read(&message)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);

  grpc::ClientContext put_context;
  put_context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(5));
  v1::PutRequest put;
  put.set_keyspace("users");
  put.set_key("alice");
  v1::PutResponse response;
  grpc::Status status = node.admin().Put(&put_context, put, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  // Destroying the node shuts its server down, which waits for the scan.
}

TEST_F(PeerServiceTest, ScanRefusesBadRangesAndUnknownKeyspaces) {
  WriteLocal("users", "u", 10);
  std::vector<v1::ScanResponse> messages;

  v1::ScanRequest unknown;
  unknown.set_keyspace("nope");
  ToProto(tree::NodeRef{0, 0}, unknown.add_ranges());
  EXPECT_THAT(Scan(unknown, &messages),
              IsStatus(grpc::StatusCode::NOT_FOUND,
                       "keyspace 'nope' does not exist on node 'node-a'"));

  v1::ScanRequest bad_range;
  bad_range.set_keyspace("users");
  v1::NodeRef* range = bad_range.add_ranges();
  range->set_level(2);
  range->set_index(4);
  EXPECT_THAT(Scan(bad_range, &messages),
              IsStatus(grpc::StatusCode::INVALID_ARGUMENT, "index 4"));

  v1::ScanRequest too_many;
  too_many.set_keyspace("users");
  for (size_t i = 0; i <= kMaxScanRanges; ++i) {
    ToProto(tree::NodeRef{20, i}, too_many.add_ranges());
  }
  EXPECT_THAT(Scan(too_many, &messages),
              IsStatus(grpc::StatusCode::RESOURCE_EXHAUSTED, "16384"));
  EXPECT_TRUE(messages.empty());
  ExpectStillServing();
}

// Writes `rows` entries of 2 KB into `keyspace` of `node`: 8 MB for
// kBigRows, far more than one message and the flow-control window of a
// connection with several streams, so that scans of it nobody reads stay
// unfinished.
void WriteEightMegabytes(TestNode& node, const std::string& keyspace,
                         int rows = kBigRows) {
  for (int first = 0; first < rows; first += 5000) {
    storage::WriteRequest write;
    for (int i = first; i < std::min(rows, first + 5000); ++i) {
      write.mutations.push_back(storage::Mutation::Put(
          keyspace, absl::StrCat(std::string(2000, 'k'), i), "v"));
    }
    ASSERT_TRUE(node.store().Write(std::move(write)).ok());
  }
}

// How long a call takes; fails the test when it does not succeed.
template <typename Call>
absl::Duration Timed(const char* what, Call call) {
  const absl::Time start = absl::Now();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(5));
  const grpc::Status status = call(&context);
  EXPECT_TRUE(status.ok()) << what << ": " << status.error_message();
  return absl::Now() - start;
}

// Four Scans that nobody read once parked all four pool
// threads, and every Put, Get and Status timed out until the client left.
TEST_F(PeerServiceTest, StalledScansLeaveStatusPutAndGetAnsweringAtOnce) {
  TestNode node(/*threads=*/2, /*max_queued=*/64);
  WriteEightMegabytes(node, "big");
  v1::ScanRequest request;
  request.set_keyspace("big");
  ToProto(tree::NodeRef{0, 0}, request.add_ranges());
  constexpr int kStalled = 6;  // three times the pool's threads
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::ScanResponse>>> readers;
  for (int i = 0; i < kStalled; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    SetDeadline(contexts.back().get());
    readers.push_back(node.peer().Scan(contexts.back().get(), request));
  }
  // Let every scan fill what the transport buffers and wait for its reader.
  absl::SleepFor(absl::Milliseconds(500));

  for (int round = 0; round < 3; ++round) {
    EXPECT_LT(Timed("Status",
                    [&](grpc::ClientContext* c) {
                      v1::StatusResponse r;
                      return node.admin().Status(c, v1::StatusRequest(), &r);
                    }),
              absl::Milliseconds(100));
    EXPECT_LT(Timed("Put",
                    [&](grpc::ClientContext* c) {
                      v1::PutRequest put;
                      put.set_keyspace("users");
                      put.set_key(absl::StrCat("k", round));
                      put.set_value("v");
                      v1::PutResponse r;
                      return node.admin().Put(c, put, &r);
                    }),
              absl::Milliseconds(100));
    EXPECT_LT(Timed("Get",
                    [&](grpc::ClientContext* c) {
                      v1::GetRequest get;
                      get.set_keyspace("users");
                      get.set_key(absl::StrCat("k", round));
                      v1::GetResponse r;
                      return node.admin().Get(c, get, &r);
                    }),
              absl::Milliseconds(100));
  }
  // The stalled scans are intact: each reads to its end.
  for (int i = 0; i < kStalled; ++i) {
    v1::ScanResponse message;
    size_t entries = 0;
    while (readers[i]->Read(&message)) entries += message.entries_size();
    EXPECT_TRUE(readers[i]->Finish().ok());
    EXPECT_EQ(entries, static_cast<size_t>(kBigRows));
  }
}

// The bulk streams one client host may open are bounded.
TEST_F(PeerServiceTest, BulkStreamsBeyondThePerClientLimitAreRefused) {
  StreamLimits limits;
  limits.max_per_client = 2;
  TestNode node(/*threads=*/2, /*max_queued=*/64, limits);
  WriteEightMegabytes(node, "big");
  v1::ScanRequest request;
  request.set_keyspace("big");
  ToProto(tree::NodeRef{0, 0}, request.add_ranges());
  grpc::ClientContext c1, c2;
  SetDeadline(&c1);
  SetDeadline(&c2);
  auto r1 = node.peer().Scan(&c1, request);
  auto r2 = node.peer().Scan(&c2, request);
  v1::ScanResponse message;
  ASSERT_TRUE(r1->Read(&message));  // both are open now
  ASSERT_TRUE(r2->Read(&message));

  grpc::ClientContext c3;
  SetDeadline(&c3);
  auto r3 = node.peer().Scan(&c3, request);
  EXPECT_FALSE(r3->Read(&message));
  EXPECT_THAT(r3->Finish(), IsStatus(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                     "client 127.0.0.1 has 2 bulk streams "
                                     "open"));
  grpc::ClientContext c4;
  SetDeadline(&c4);
  v1::LoadResponse loaded;
  auto load = node.admin().Load(&c4, &loaded);
  v1::LoadRequest rows;
  rows.set_keyspace("bulk");
  rows.add_rows()->set_key("k");
  load->Write(rows);
  load->WritesDone();
  EXPECT_THAT(load->Finish(),
              IsStatus(grpc::StatusCode::RESOURCE_EXHAUSTED, "the limit is 2"));
  EXPECT_FALSE(store().GetKeyspace("bulk").ok());
  // Control calls are not streams: they still answer.
  v1::StatusResponse status;
  grpc::ClientContext c5;
  SetDeadline(&c5);
  EXPECT_TRUE(node.admin().Status(&c5, v1::StatusRequest(), &status).ok());

  // Once one ends, another may start.
  c1.TryCancel();
  while (r1->Read(&message)) {
  }
  r1->Finish();
  for (int i = 0; i < 100 && node.limiter().open_streams() > 1; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  std::vector<v1::ScanResponse> messages;
  v1::ScanRequest small;
  small.set_keyspace("big");
  ToProto(tree::NodeRef{20, 0}, small.add_ranges());
  grpc::ClientContext c6;
  SetDeadline(&c6);
  auto r6 = node.peer().Scan(&c6, small);
  while (r6->Read(&message)) {
  }
  EXPECT_TRUE(r6->Finish().ok());
  c2.TryCancel();
  while (r2->Read(&message)) {
  }
  r2->Finish();
}

// A stream whose reader stops reading is ended by the
// node after the idle timeout, instead of living as long as its client.
TEST_F(PeerServiceTest, AScanWhoseReaderStopsIsCancelledAfterTheIdleTimeout) {
  StreamLimits limits;
  limits.idle_timeout = absl::Milliseconds(300);
  TestNode node(/*threads=*/2, /*max_queued=*/64, limits);
  // 32 MB: more than one stream's flow-control window, however gRPC
  // tunes it on loopback.
  constexpr int kRows = 4 * kBigRows;
  WriteEightMegabytes(node, "big", kRows);
  v1::ScanRequest request;
  request.set_keyspace("big");
  ToProto(tree::NodeRef{0, 0}, request.add_ranges());
  grpc::ClientContext context;
  SetDeadline(&context);
  auto reader = node.peer().Scan(&context, request);
  v1::ScanResponse message;
  ASSERT_TRUE(reader->Read(&message));
  EXPECT_EQ(node.limiter().open_streams(), 1);
  // Stop reading for much longer than the timeout.
  for (int i = 0; i < 300 && node.limiter().open_streams() > 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(node.limiter().open_streams(), 0);
  EXPECT_EQ(node.limiter().idle_cancels(), 1u);
  size_t entries = message.entries_size();
  while (reader->Read(&message)) entries += message.entries_size();
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_LT(entries, static_cast<size_t>(kRows));

  // A reader that keeps reading is never cut, however long the scan.
  grpc::ClientContext steady_context;
  SetDeadline(&steady_context);
  auto steady = node.peer().Scan(&steady_context, request);
  entries = 0;
  while (steady->Read(&message)) {
    entries += message.entries_size();
    absl::SleepFor(absl::Milliseconds(20));  // slower, but within the timeout
  }
  EXPECT_TRUE(steady->Finish().ok());
  EXPECT_EQ(entries, static_cast<size_t>(kRows));
}

TEST(StreamLimiter, NamesTheClientHostOfAPeer) {
  EXPECT_EQ(StreamLimiter::ClientHost("ipv4:10.0.0.2:51234"), "10.0.0.2");
  EXPECT_EQ(StreamLimiter::ClientHost("ipv6:[::1]:51234"), "::1");
  EXPECT_EQ(StreamLimiter::ClientHost("unix:/tmp/sock"), "unix:/tmp/sock");
}

// 16,384 copies of the whole keyspace in one small request
// would make a node stream its data 16,384 times.
TEST_F(PeerServiceTest, ScanRefusesOverlappingRanges) {
  WriteLocal("users", "u", 10);
  std::vector<v1::ScanResponse> messages;
  v1::ScanRequest repeated;
  repeated.set_keyspace("users");
  for (int i = 0; i < 16384; ++i) {
    ToProto(tree::NodeRef{0, 0}, repeated.add_ranges());
  }
  EXPECT_THAT(Scan(repeated, &messages),
              IsStatus(grpc::StatusCode::INVALID_ARGUMENT, "overlap"));
  v1::ScanRequest nested;
  nested.set_keyspace("users");
  ToProto(tree::NodeRef{3, 5}, nested.add_ranges());
  ToProto(tree::NodeRef{1, 1}, nested.add_ranges());
  EXPECT_THAT(Scan(nested, &messages),
              IsStatus(grpc::StatusCode::INVALID_ARGUMENT, "overlap"));
  EXPECT_TRUE(messages.empty());
  ExpectStillServing();
}

TEST_F(PeerServiceTest, FetchRowsReturnsPresentRowsAndListsMissingKeys) {
  WriteRemote("users", {RemoteRow("a", "alpha", 10, "node-b"),
                        RemoteRow("b", "beta", 11, "node-c")});
  v1::PutResponse put;
  ASSERT_TRUE(Put("users", "c", "gamma", &put).ok());
  grpc::ClientContext context;
  SetDeadline(&context);
  v1::DeleteRequest del;
  del.set_keyspace("users");
  del.set_key("c");
  v1::DeleteResponse deleted;
  ASSERT_TRUE(node_.admin().Delete(&context, del, &deleted).ok());

  v1::FetchRowsRequest request;
  request.set_keyspace("users");
  for (const char* key : {"a", "missing-1", "b", "c", "missing-2"}) {
    request.add_keys(key);
  }
  std::vector<v1::FetchRowsResponse> messages;
  grpc::Status status = FetchRows(request, &messages);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(messages.size(), 1u);
  const v1::FetchRowsResponse& m = messages[0];
  ASSERT_EQ(m.rows_size(), 3);
  EXPECT_EQ(m.rows(0).key(), "a");
  EXPECT_EQ(m.rows(0).value(), "alpha");
  EXPECT_EQ(m.rows(0).version().origin(), "node-b");
  EXPECT_EQ(m.rows(0).version().hlc(),
            RemoteVersion(10, "node-b").timestamp.raw());
  EXPECT_EQ(m.rows(1).key(), "b");
  EXPECT_EQ(m.rows(1).version().origin(), "node-c");
  EXPECT_EQ(m.rows(2).key(), "c");
  EXPECT_TRUE(m.rows(2).deleted());  // tombstones travel too
  EXPECT_EQ(m.rows(2).version().hlc(), deleted.version().hlc());
  EXPECT_THAT(m.missing(), ::testing::ElementsAre("missing-1", "missing-2"));
}

TEST_F(PeerServiceTest, FetchRowsSplitsLargeAnswersIntoMessages) {
  const std::string value(200 * 1024, 'v');
  WriteLocal("blobs", "b", 20, value);  // 4 MB of values
  v1::FetchRowsRequest request;
  request.set_keyspace("blobs");
  for (int i = 0; i < 20; ++i) request.add_keys(absl::StrCat("b", i));
  std::vector<v1::FetchRowsResponse> messages;
  grpc::Status status = FetchRows(request, &messages);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_GE(messages.size(), 4u);
  std::set<std::string> keys;
  for (const v1::FetchRowsResponse& m : messages) {
    EXPECT_LE(m.ByteSizeLong(), 2 * kStreamChunkBytes);
    for (const v1::Row& row : m.rows()) {
      EXPECT_EQ(row.value(), value);
      keys.insert(row.key());
    }
  }
  EXPECT_EQ(keys.size(), 20u);
}

TEST_F(PeerServiceTest,
       FetchRowsRefusesTooManyKeysEmptyKeysAndUnknownKeyspaces) {
  WriteLocal("users", "u", 3);
  std::vector<v1::FetchRowsResponse> messages;

  v1::FetchRowsRequest too_many;
  too_many.set_keyspace("users");
  for (size_t i = 0; i <= kMaxKeysPerFetch; ++i) {
    too_many.add_keys(absl::StrCat("u", i));
  }
  EXPECT_THAT(FetchRows(too_many, &messages),
              IsStatus(grpc::StatusCode::RESOURCE_EXHAUSTED,
                       "10001 keys; the limit is 10000"));

  v1::FetchRowsRequest empty_key;
  empty_key.set_keyspace("users");
  empty_key.add_keys("u1");
  empty_key.add_keys("");
  EXPECT_THAT(FetchRows(empty_key, &messages),
              IsStatus(grpc::StatusCode::INVALID_ARGUMENT, "empty"));

  v1::FetchRowsRequest unknown;
  unknown.set_keyspace("nope");
  unknown.add_keys("u1");
  EXPECT_THAT(FetchRows(unknown, &messages),
              IsStatus(grpc::StatusCode::NOT_FOUND, "'nope'"));
  EXPECT_TRUE(messages.empty());
  ExpectStillServing();
}

TEST_F(PeerServiceTest, PushRowsUnderLastWriterWinsAppliesNewerIgnoresOlder) {
  WriteRemote("users", {RemoteRow("a", "stored-a", 100),
                        RemoteRow("b", "stored-b", 100)});
  std::vector<v1::PushRowsRequest> messages(2);
  messages[0].set_keyspace("users");
  *messages[0].add_rows() = RemoteRow("a", "newer-a", 200, "node-c");
  *messages[0].add_rows() = RemoteRow("b", "older-b", 50, "node-c");
  // Later messages may leave the keyspace out.
  *messages[1].add_rows() = RemoteRow("c", "new-c", 10, "node-c");
  v1::PushRowsResponse response;
  grpc::Status status = PushRows(messages, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.applied(), 2u);
  EXPECT_EQ(response.ignored(), 1u);
  EXPECT_EQ(response.erased(), 0u);

  v1::GetResponse get;
  ASSERT_TRUE(Get("users", "a", &get).ok());
  EXPECT_EQ(get.row().value(), "newer-a");
  // Rows keep the version and origin they were born with.
  EXPECT_EQ(get.row().version().origin(), "node-c");
  EXPECT_EQ(get.row().version().hlc(),
            RemoteVersion(200, "node-c").timestamp.raw());
  ASSERT_TRUE(Get("users", "b", &get).ok());
  EXPECT_EQ(get.row().value(), "stored-b");
  ASSERT_TRUE(Get("users", "c", &get).ok());
  EXPECT_EQ(get.row().value(), "new-c");
}

TEST_F(PeerServiceTest, PushRowsCreatesTheKeyspaceOfAFreshNode) {
  v1::PushRowsRequest message;
  message.set_keyspace("fresh");
  *message.add_rows() = RemoteRow("a", "x", 10);
  v1::PushRowsResponse response;
  ASSERT_TRUE(PushRows({message}, &response).ok());
  EXPECT_EQ(response.applied(), 1u);
  absl::StatusOr<storage::KeyspaceInfo> info = store().GetKeyspace("fresh");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->row_count, 1u);
}

TEST_F(PeerServiceTest, PushRowsUnderSourceOverrideReplacesAndErases) {
  WriteRemote("users", {RemoteRow("a", "replica-a", 300),
                        RemoteRow("extra", "only-here", 300)});
  v1::PushRowsRequest message;
  message.set_keyspace("users");
  message.set_mode(v1::APPLY_MODE_SOURCE_OVERRIDE);
  // Older than the stored row, yet it replaces it: the source is right.
  *message.add_rows() = RemoteRow("a", "source-a", 10, "source");
  message.add_erase("extra");
  message.add_erase("never-existed");
  v1::PushRowsResponse response;
  grpc::Status status = PushRows({message}, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.applied(), 1u);
  EXPECT_EQ(response.erased(), 1u);
  EXPECT_EQ(response.ignored(), 1u);

  v1::GetResponse get;
  ASSERT_TRUE(Get("users", "a", &get).ok());
  EXPECT_EQ(get.row().value(), "source-a");
  EXPECT_EQ(get.row().version().origin(), "source");
  EXPECT_EQ(Get("users", "extra", &get).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

// A corrupt message in the middle of a stream, for PushRows.
TEST_F(PeerServiceTest,
       ACorruptMessageInAPushRowsFailsNamingItAndWhatWasCommitted) {
  v1::PushRowsRequest first;
  first.set_keyspace("repl");
  *first.add_rows() = RemoteRow("a", "x", 10);
  *first.add_rows() = RemoteRow("b", "y", 10);
  v1::PushRowsRequest second;
  *second.add_rows() = RemoteRow("c", "a value long enough to cut", 10);
  std::string truncated = second.SerializeAsString();
  truncated.resize(truncated.size() / 2);
  v1::PushRowsRequest third;
  *third.add_rows() = RemoteRow("d", "z", 10);
  const grpc::Status status = RawClientStream(
      "/tally.v1.Peer/PushRows",
      {first.SerializeAsString(), truncated, third.SerializeAsString()});
  EXPECT_THAT(status, IsStatus(grpc::StatusCode::INVALID_ARGUMENT,
                               "message 2 of the push"));
  EXPECT_THAT(status.error_message(),
              HasSubstr("committed 2 rows applied, 0 ignored, 0 erased"));
  absl::StatusOr<storage::KeyspaceInfo> info = store().GetKeyspace("repl");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->row_count, 2u);
  ExpectStillServing();
}

// An ApplyMode this node does not know was once applied as last
// writer wins.
TEST_F(PeerServiceTest, PushRowsRefusesAnUnknownApplyMode) {
  v1::PushRowsRequest message;
  message.set_keyspace("repl");
  message.set_mode(static_cast<v1::ApplyMode>(7));
  *message.add_rows() = RemoteRow("a", "x", 10);
  v1::PushRowsResponse response;
  EXPECT_THAT(PushRows({message}, &response),
              IsStatus(grpc::StatusCode::INVALID_ARGUMENT, "apply mode 7"));
  EXPECT_FALSE(store().GetKeyspace("repl").ok());
  ExpectStillServing();
}

TEST_F(PeerServiceTest, PushRowsRefusesEraseOutsideSourceOverride) {
  WriteRemote("users", {RemoteRow("a", "x", 100)});
  v1::PushRowsRequest message;
  message.set_keyspace("users");
  *message.add_rows() = RemoteRow("b", "y", 100);
  message.add_erase("a");
  v1::PushRowsResponse response;
  EXPECT_THAT(PushRows({message}, &response),
              IsStatus(grpc::StatusCode::INVALID_ARGUMENT,
                       "APPLY_MODE_SOURCE_OVERRIDE"));
  // Nothing of the message was written.
  v1::GetResponse get;
  EXPECT_TRUE(Get("users", "a", &get).ok());
  EXPECT_EQ(Get("users", "b", &get).error_code(), grpc::StatusCode::NOT_FOUND);
  ExpectStillServing();
}

TEST_F(PeerServiceTest, PushRowsRefusesARowWithoutAVersion) {
  v1::PushRowsRequest message;
  message.set_keyspace("users");
  *message.add_rows() = RemoteRow("a", "x", 100);
  v1::Row* bare = message.add_rows();
  bare->set_key("b");
  bare->set_value("y");
  v1::PushRowsResponse response;
  EXPECT_THAT(PushRows({message}, &response),
              IsStatus(grpc::StatusCode::INVALID_ARGUMENT, "has no version"));
  EXPECT_FALSE(store().GetKeyspace("users").ok());
  ExpectStillServing();
}

TEST_F(PeerServiceTest, PushRowsRefusesMoreRowsThanTheLimitInOneMessage) {
  v1::PushRowsRequest message;
  message.set_keyspace("users");
  for (size_t i = 0; i <= kMaxRowsPerMessage; ++i) {
    *message.add_rows() = RemoteRow(absl::StrCat("k", i), "v", 100);
  }
  v1::PushRowsResponse response;
  EXPECT_THAT(PushRows({message}, &response),
              IsStatus(grpc::StatusCode::RESOURCE_EXHAUSTED,
                       "10001 rows and 0 erases; the limit is 10000"));
  EXPECT_FALSE(store().GetKeyspace("users").ok());
  ExpectStillServing();
}

TEST_F(PeerServiceTest, PushRowsNeedsOneKeyspaceNamedInTheFirstMessage) {
  v1::PushRowsRequest unnamed;
  *unnamed.add_rows() = RemoteRow("a", "x", 100);
  v1::PushRowsResponse response;
  EXPECT_THAT(PushRows({unnamed}, &response),
              IsStatus(grpc::StatusCode::INVALID_ARGUMENT,
                       "first message of a push must name the keyspace"));

  std::vector<v1::PushRowsRequest> messages(2);
  messages[0].set_keyspace("users");
  *messages[0].add_rows() = RemoteRow("a", "x", 100);
  messages[1].set_keyspace("orders");
  *messages[1].add_rows() = RemoteRow("b", "y", 100);
  response.Clear();
  EXPECT_THAT(PushRows(messages, &response),
              IsStatus(grpc::StatusCode::INVALID_ARGUMENT, "'orders'"));
  // The first message was applied; the second was not.
  v1::GetResponse get;
  EXPECT_TRUE(Get("users", "a", &get).ok());
  EXPECT_FALSE(store().GetKeyspace("orders").ok());
  ExpectStillServing();
}

}  // namespace
}  // namespace node
}  // namespace tally
