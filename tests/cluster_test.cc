// Multi-process tests: real tallyd processes on loopback ports, real gRPC,
// and the tally CLI as a user runs it.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/client/client.h"
#include "node/client/wire.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "tally/v1/tally.grpc.pb.h"
#include "tests/diff_paths.h"
#include "tests/node_connect.h"
#include "tests/node_metrics.h"

namespace tally {
namespace {

using ::tally::node::NodeClient;
using ::tally::testing::CommandResult;
using ::tally::testing::Connect;
using ::tally::testing::DiffPath;
using ::tally::testing::DiffPathName;
using ::tally::testing::FreeLoopbackAddress;
using ::tally::testing::kBothDiffPaths;
using ::tally::testing::MetricsPort;
using ::tally::testing::NodeProcess;
using ::tally::testing::OnPath;
using ::tally::testing::RunDiffCommand;
using ::tally::testing::RunTally;
using ::tally::testing::TempDir;
using ::testing::HasSubstr;

constexpr char kKeyspace[] = "default";

// Fast writes for tests that do not test durability.
const std::vector<std::string> kNoSync = {"--sync-writes", "false"};

std::unique_ptr<NodeProcess> StartNode(
    const std::string& name, const std::string& dir,
    std::vector<std::string> extra = kNoSync,
    const std::string& listen = "127.0.0.1:0") {
  auto node = NodeProcess::Start(name, dir, extra, listen);
  EXPECT_TRUE(node.ok()) << node.status();
  return node.ok() ? std::move(*node) : nullptr;
}

std::string Key(int i) { return absl::StrFormat("key-%07d", i); }

void Load(const std::string& address, int first, int count) {
  auto client = Connect(address);
  int i = first;
  auto loaded = client->Load(kKeyspace, [&](std::string* k, std::string* v) {
    if (i >= first + count) return false;
    *k = Key(i);
    *v = absl::StrCat("value-", i, "-", std::string(40, 'x'));
    ++i;
    return true;
  });
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->rows(), static_cast<uint64_t>(count));
}

// Root digest bytes and row count of the keyspace ("" and 0 if absent).
std::pair<std::string, uint64_t> Root(const std::string& address) {
  auto client = Connect(address);
  auto hs = client->Handshake({kKeyspace}, 0);
  EXPECT_TRUE(hs.ok()) << hs.status();
  if (!hs.ok() || hs->keyspaces_size() == 0) return {"", 0};
  return {hs->keyspaces(0).root(), hs->keyspaces(0).row_count()};
}

struct DiffResult {
  int exit_code = -1;
  std::set<std::string> keys;
  int rounds = -1;
  int differences = -1;
  std::string output;
};

// Runs `tally diff A B --json` through `path` and parses its lines.
DiffResult Diff(DiffPath path, const std::string& a, const std::string& b) {
  const CommandResult r =
      RunDiffCommand(path, {"diff", a, b, "--keyspace", kKeyspace, "--json"});
  DiffResult d;
  d.exit_code = r.exit_code;
  d.output = r.out + r.err;
  static const std::regex kKey("^\\{\"key\":\"([^\"]*)\"");
  static const std::regex kRounds("\"rounds\":([0-9]+)");
  static const std::regex kDifferences("\"differences\":([0-9]+)");
  for (const std::string& line :
       std::vector<std::string>(absl::StrSplit(r.out, '\n'))) {
    std::smatch m;
    if (std::regex_search(line, m, kKey)) d.keys.insert(m[1]);
    if (line.find("\"summary\"") != std::string::npos) {
      if (std::regex_search(line, m, kRounds)) d.rounds = std::stoi(m[1]);
      if (std::regex_search(line, m, kDifferences)) {
        d.differences = std::stoi(m[1]);
      }
    }
  }
  return d;
}

// Two nodes with the same 100k rows: A loaded, B filled by one repair. Every
// diff and repair runs on A and, again, from the tool (tests/diff_paths.h).
class TwoNodes : public ::testing::TestWithParam<DiffPath> {
 protected:
  void SetUp() override {
    a_ = StartNode("node-a", dir_a_.path());
    b_ = StartNode("node-b", dir_b_.path());
    ASSERT_TRUE(a_ && b_);
    Load(a_->address(), 0, 100000);
    const CommandResult repair = RunDiffCommand(
        GetParam(),
        {"repair", a_->address(), b_->address(), "--keyspace", kKeyspace});
    ASSERT_EQ(repair.exit_code, 0) << repair.out << repair.err;
  }

  TempDir dir_a_;
  TempDir dir_b_;
  std::unique_ptr<NodeProcess> a_;
  std::unique_ptr<NodeProcess> b_;
};

TEST_P(TwoNodes, OneRepairFillsAnEmptyNodeAndEqualNodesDiffInOneRound) {
  EXPECT_EQ(Root(a_->address()), Root(b_->address()));
  EXPECT_EQ(Root(b_->address()).second, 100000u);
  const DiffResult d = Diff(GetParam(), a_->address(), b_->address());
  EXPECT_EQ(d.exit_code, 0) << d.output;
  EXPECT_EQ(d.rounds, 1) << d.output;
  EXPECT_EQ(d.differences, 0);
}

TEST_P(TwoNodes, DiffListsExactlyTheDriftAndRepairAppliesLastWriterWins) {
  auto a = Connect(a_->address());
  auto b = Connect(b_->address());
  std::set<std::string> changed;
  std::map<std::string, std::string> winner;  // key -> value ("" = deleted)
  int next = 0;
  auto pick = [&] {
    const std::string k = Key(next);
    next += 487;  // spread over the key space
    changed.insert(k);
    return k;
  };
  for (int i = 0; i < 25; ++i) {
    std::string k = pick();  // updated on a
    ASSERT_TRUE(a->Put(kKeyspace, k, "a-new").ok());
    winner[k] = "a-new";
    k = pick();  // updated on b
    ASSERT_TRUE(b->Put(kKeyspace, k, "b-new").ok());
    winner[k] = "b-new";
    k = pick();  // deleted on a
    ASSERT_TRUE(a->Delete(kKeyspace, k).ok());
    winner[k] = "";
    k = pick();  // deleted on b
    ASSERT_TRUE(b->Delete(kKeyspace, k).ok());
    winner[k] = "";
    k = absl::StrCat("only-a-", i);  // present on a only
    changed.insert(k);
    ASSERT_TRUE(a->Put(kKeyspace, k, "a").ok());
    winner[k] = "a";
    k = absl::StrCat("only-b-", i);  // present on b only
    changed.insert(k);
    ASSERT_TRUE(b->Put(kKeyspace, k, "b").ok());
    winner[k] = "b";
    k = pick();  // changed on both: the later write (b) wins
    ASSERT_TRUE(a->Put(kKeyspace, k, "both-a").ok());
    absl::SleepFor(absl::Milliseconds(2));
    ASSERT_TRUE(b->Put(kKeyspace, k, "both-b").ok());
    winner[k] = "both-b";
  }
  ASSERT_EQ(changed.size(), 175u);

  const DiffResult d = Diff(GetParam(), a_->address(), b_->address());
  EXPECT_EQ(d.exit_code, 1) << d.output;
  EXPECT_EQ(d.keys, changed);
  EXPECT_EQ(d.differences, 175);

  const CommandResult repair = RunDiffCommand(
      GetParam(),
      {"repair", a_->address(), b_->address(), "--keyspace", kKeyspace});
  ASSERT_EQ(repair.exit_code, 0) << repair.out << repair.err;
  EXPECT_EQ(Root(a_->address()), Root(b_->address()));
  for (const auto& [key, value] : winner) {
    for (NodeClient* c : {a.get(), b.get()}) {
      auto got = c->Get(kKeyspace, key);
      ASSERT_TRUE(got.ok()) << key << ": " << got.status();
      if (value.empty()) {
        EXPECT_TRUE(got->row().deleted()) << key;
      } else {
        EXPECT_EQ(got->row().value(), value) << key;
      }
    }
  }
  EXPECT_EQ(Diff(GetParam(), a_->address(), b_->address()).exit_code, 0);
}

TEST_P(TwoNodes, SourceModeDeletesExtrasAndOverridesNewerVersions) {
  auto b = Connect(b_->address());
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(b->Put(kKeyspace, absl::StrCat("extra-", i), "x").ok());
    ASSERT_TRUE(b->Put(kKeyspace, Key(i * 1000), "newer-on-b").ok());
  }
  ASSERT_TRUE(b->Delete(kKeyspace, Key(5)).ok());
  const CommandResult repair = RunDiffCommand(
      GetParam(), {"repair", a_->address(), b_->address(), "--keyspace",
                   kKeyspace, "--source", a_->address()});
  ASSERT_EQ(repair.exit_code, 0) << repair.out << repair.err;
  EXPECT_EQ(Root(a_->address()), Root(b_->address()));
  EXPECT_EQ(b->Get(kKeyspace, "extra-3").status().code(),
            absl::StatusCode::kNotFound);
  auto got = b->Get(kKeyspace, Key(3000));
  ASSERT_TRUE(got.ok());
  EXPECT_NE(got->row().value(), "newer-on-b");
  EXPECT_FALSE(b->Get(kKeyspace, Key(5))->row().deleted());
}

INSTANTIATE_TEST_SUITE_P(BothPaths, TwoNodes, kBothDiffPaths, DiffPathName);

TEST(Cluster, NodeWithSourcePeerBecomesItsCopyOnItsOwn) {
  TempDir dir_a, dir_c;
  auto a = StartNode("source-a", dir_a.path());
  ASSERT_TRUE(a);
  Load(a->address(), 0, 5000);
  auto c = StartNode("copy-c", dir_c.path(),
                     {"--sync-writes", "false", "--sync-interval", "300ms",
                      "--peer", a->address() + ",role=source"});
  ASSERT_TRUE(c);
  auto client = Connect(c->address());
  ASSERT_TRUE(client->Put(kKeyspace, "extra", "only-on-c").ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (Root(c->address()) != Root(a->address()) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(200));
  }
  EXPECT_EQ(Root(c->address()), Root(a->address()));
  EXPECT_EQ(client->Get(kKeyspace, "extra").status().code(),
            absl::StatusCode::kNotFound);
  // The source never takes the copy's rows.
  EXPECT_EQ(Connect(a->address())->Get(kKeyspace, "extra").status().code(),
            absl::StatusCode::kNotFound);
}

// Runs on A and from the tool (tests/diff_paths.h).
class ClusterRepair : public ::testing::TestWithParam<DiffPath> {};

TEST_P(ClusterRepair,
       PeerKilledMidRepairLeavesSoundStoresAndTheNextRepairCompletes) {
  TempDir dir_a, dir_b, scratch;
  auto a = StartNode("node-a", dir_a.path(), {});  // default: sync writes
  auto b = StartNode("node-b", dir_b.path(), {});
  ASSERT_TRUE(a && b);
  Load(a->address(), 0, 200000);
  const std::string out = scratch.path() + "/repair.out";
  const pid_t repair = ::tally::testing::SpawnCommand(
      OnPath(GetParam(), {::tally::testing::TallyPath(), "repair", a->address(),
                          b->address(), "--keyspace", kKeyspace}),
      out);
  ASSERT_GT(repair, 0);
  // Let it move some rows, then kill the target mid-stream.
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (Root(b->address()).second < 20000 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  b->Kill();
  int status = 0;
  waitpid(repair, &status, 0);
  EXPECT_NE(WEXITSTATUS(status), 0) << "repair should fail when B dies";
  ASSERT_EQ(a->Stop(), 0);

  for (const std::string& dir : {dir_a.path(), dir_b.path()}) {
    const CommandResult verify = RunTally({"verify", "--data-dir", dir});
    EXPECT_EQ(verify.exit_code, 0) << dir << ": " << verify.out << verify.err;
  }
  a = StartNode("node-a", dir_a.path(), {});
  b = StartNode("node-b", dir_b.path(), {});
  ASSERT_TRUE(a && b);
  const CommandResult again = RunDiffCommand(
      GetParam(),
      {"repair", a->address(), b->address(), "--keyspace", kKeyspace});
  EXPECT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_EQ(Root(a->address()), Root(b->address()));
  EXPECT_EQ(Root(b->address()).second, 200000u);
}

INSTANTIATE_TEST_SUITE_P(BothPaths, ClusterRepair, kBothDiffPaths,
                         DiffPathName);

TEST(Cluster, BadRequestsGetClearErrorsAndTheNodeKeepsServing) {
  TempDir dir;
  auto n = StartNode("node-a", dir.path());
  ASSERT_TRUE(n);
  auto c = Connect(n->address());
  ASSERT_TRUE(c->Put(kKeyspace, "k", "v").ok());

  auto put = c->Put(kKeyspace, std::string(20000, 'k'), "v");
  EXPECT_EQ(put.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(put.status().message(), HasSubstr("limit"));

  auto bad_keyspace = c->Put("no spaces allowed", "k", "v");
  EXPECT_EQ(bad_keyspace.status().code(), absl::StatusCode::kInvalidArgument);

  v1::ExchangeRequest unknown;
  unknown.set_keyspace("nope");
  unknown.add_list()->set_level(3);
  EXPECT_EQ(c->Exchange(unknown).status().code(), absl::StatusCode::kNotFound);

  v1::ExchangeRequest bad_level;
  bad_level.set_keyspace(kKeyspace);
  bad_level.add_list()->set_level(70);
  EXPECT_EQ(c->Exchange(bad_level).status().code(),
            absl::StatusCode::kInvalidArgument);

  v1::ExchangeRequest bad_index;
  bad_index.set_keyspace(kKeyspace);
  v1::NodeRef* node = bad_index.add_list();
  node->set_level(2);
  node->set_index(4);
  EXPECT_EQ(c->Exchange(bad_index).status().code(),
            absl::StatusCode::kInvalidArgument);

  v1::ExchangeRequest too_deep;
  too_deep.set_keyspace(kKeyspace);
  too_deep.add_descend()->set_levels_ahead(17);
  EXPECT_EQ(c->Exchange(too_deep).status().code(),
            absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(c->Handshake({kKeyspace}, 9).status().code(),
            absl::StatusCode::kInvalidArgument);

  v1::FetchRowsRequest many;
  many.set_keyspace(kKeyspace);
  for (int i = 0; i < 10001; ++i) many.add_keys(absl::StrCat(i));
  EXPECT_EQ(
      c->FetchRows(
           many, [](const v1::FetchRowsResponse&) { return absl::OkStatus(); })
          .code(),
      absl::StatusCode::kResourceExhausted);

  std::vector<v1::Row> unversioned(1);
  unversioned[0].set_key("k");
  EXPECT_EQ(
      c->PushRows(kKeyspace, v1::APPLY_MODE_LAST_WRITER_WINS, unversioned, {})
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c->PushRows(kKeyspace, v1::APPLY_MODE_LAST_WRITER_WINS, {}, {"k"})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);

  // Still serving.
  auto got = c->Get(kKeyspace, "k");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->row().value(), "v");
}

TEST(Cluster, CliRejectsBadArgumentsWithOneLineAndExitTwo) {
  TempDir dir;
  auto n = StartNode("node-a", dir.path());
  ASSERT_TRUE(n);
  const std::vector<std::vector<std::string>> bad = {
      {"frobnicate"},
      {"--node", n->address(), "get"},
      {"--node", "no-port", "get", "k"},
      {"--node", "127.0.0.1:1", "get", "k"},  // unreachable
      {"diff", n->address(), n->address(), "--keyspace", "missing"},
      {"load", "--node", n->address(), "--count", "many"},
      {"verify"},
  };
  for (const std::vector<std::string>& args : bad) {
    const CommandResult r = RunTally(args, absl::Seconds(60));
    EXPECT_EQ(r.exit_code, 2) << absl::StrJoin(args, " ") << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("tally: ")) << absl::StrJoin(args, " ");
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1)
        << absl::StrJoin(args, " ") << ": " << r.err;
  }
}

grpc::ByteBuffer Bytes(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::string ToString(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  (void)buffer.Dump(&slices);
  std::string out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

TEST(Cluster, HealthServiceAndReflectionAreOn) {
  TempDir dir;
  auto n = StartNode("node-a", dir.path());
  ASSERT_TRUE(n);
  auto channel =
      grpc::CreateChannel(n->address(), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);

  // grpc.health.v1.Health/Check with an empty request (the whole server):
  // the answer is HealthCheckResponse{status: SERVING} = 08 01.
  grpc::ClientContext health_context;
  health_context.set_deadline(std::chrono::system_clock::now() +
                              std::chrono::seconds(10));
  const grpc::ByteBuffer request = Bytes("");
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&health_context, "/grpc.health.v1.Health/Check",
                 grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(ToString(response), std::string("\x08\x01", 2));

  // Server reflection lists the services: ServerReflectionRequest with
  // list_services = "" (field 7) is 3a 00.
  grpc::ClientContext reflection_context;
  reflection_context.set_deadline(std::chrono::system_clock::now() +
                                  std::chrono::seconds(10));
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(
      &reflection_context,
      "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag;
  bool ok;
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  call->Write(Bytes(std::string("\x3a\x00", 2)), reinterpret_cast<void*>(2));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  grpc::ByteBuffer answer;
  call->Read(&answer, reinterpret_cast<void*>(3));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  const std::string listed = ToString(answer);
  EXPECT_THAT(listed, HasSubstr("tally.v1.Peer"));
  EXPECT_THAT(listed, HasSubstr("tally.v1.Admin"));
  reflection_context.TryCancel();
  call->Finish(&status, reinterpret_cast<void*>(4));
  while (cq.Next(&tag, &ok) && tag != reinterpret_cast<void*>(4)) {
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

TEST(Cluster, NonLoopbackListenIsRefusedWithoutInsecure) {
  TempDir dir;
  const CommandResult refused = ::tally::testing::RunCommand(
      {::tally::testing::TallydPath(), "--name", "n", "--data-dir", dir.path(),
       "--listen", "0.0.0.0:0"});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_THAT(refused.err, HasSubstr("--insecure"));
  const CommandResult bad_flag = ::tally::testing::RunCommand(
      {::tally::testing::TallydPath(), "--name", "n", "--data-dir", dir.path(),
       "--sync-interval", "soon"});
  EXPECT_EQ(bad_flag.exit_code, 2);
  EXPECT_THAT(bad_flag.err, HasSubstr("sync-interval"));
  auto insecure =
      NodeProcess::Start("n", dir.path(), {"--insecure"}, "0.0.0.0:0");
  ASSERT_TRUE(insecure.ok()) << insecure.status();
  EXPECT_EQ((*insecure)->Stop(), 0);
}

// gRPC sets SO_REUSEPORT by default, so a second tallyd on
// a held port used to start and take half of the new connections.
TEST(Cluster, ASecondTallydOnAHeldPortExitsNonZeroNamingTheAddress) {
  TempDir first_dir;
  TempDir second_dir;
  std::unique_ptr<NodeProcess> first = StartNode("first", first_dir.path());
  ASSERT_NE(first, nullptr);
  const CommandResult second = ::tally::testing::RunCommand(
      {::tally::testing::TallydPath(), "--name", "second", "--data-dir",
       second_dir.path(), "--listen", first->address()},
      absl::Seconds(20));
  EXPECT_NE(second.exit_code, 0) << second.err;
  EXPECT_NE(second.exit_code, 128 + SIGKILL) << "still running: " << second.err;
  EXPECT_THAT(second.err, HasSubstr("cannot listen on " + first->address()));
  EXPECT_THAT(second.err, HasSubstr("in use"));
  // The first node still answers every connection.
  for (int i = 0; i < 10; ++i) {
    std::unique_ptr<NodeClient> client = Connect(first->address());
    ASSERT_NE(client, nullptr);
    absl::StatusOr<v1::StatusResponse> status = client->Status();
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_EQ(status->node_name(), "first");
  }
  EXPECT_EQ(first->Stop(), 0);
}

// On a real node: a client once opened Scans and stopped
// reading; all four worker threads parked and every Put, Get and Status
// timed out until the client disconnected.
TEST(Cluster, UnreadScansLeaveARunningNodeAnswering) {
  TempDir dir;
  std::unique_ptr<NodeProcess> node = StartNode("n", dir.path());
  ASSERT_NE(node, nullptr);
  std::unique_ptr<NodeClient> client = Connect(node->address());
  ASSERT_NE(client, nullptr);
  // 16 MB of scan entries (keys of 2 KB): a stream nobody reads stalls.
  int i = 0;
  absl::StatusOr<v1::LoadResponse> loaded =
      client->Load("big", [&](std::string* key, std::string* value) {
        if (i == 8000) return false;
        *key = absl::StrCat(std::string(2000, 'k'), i++);
        *value = "v";
        return true;
      });
  ASSERT_TRUE(loaded.ok()) << loaded.status();

  // Another client: its own connection, eight Scans of the whole keyspace
  // (twice the node's four worker threads), never read.
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(node->address(), grpc::InsecureChannelCredentials());
  std::unique_ptr<v1::Peer::Stub> peer = v1::Peer::NewStub(channel);
  v1::ScanRequest scan;
  scan.set_keyspace("big");
  node::ToProto(tree::NodeRef{0, 0}, scan.add_ranges());
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::ScanResponse>>> readers;
  for (int s = 0; s < 8; ++s) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    readers.push_back(peer->Scan(contexts.back().get(), scan));
  }
  absl::SleepFor(absl::Milliseconds(500));

  // A frozen node never answers (the defect: every pool thread blocked on
  // an unread scan). 1 s tells that from a slow answer on a loaded 2-core
  // machine, where 100 ms failed 5 times in a day of parallel builds.
  const absl::Duration answers_within = absl::Seconds(1);
  for (int round = 0; round < 3; ++round) {
    absl::Time start = absl::Now();
    absl::StatusOr<v1::StatusResponse> status = client->Status();
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_LT(absl::Now() - start, answers_within) << "Status";
    start = absl::Now();
    ASSERT_TRUE(client->Put("users", absl::StrCat("k", round), "v").ok());
    EXPECT_LT(absl::Now() - start, answers_within) << "Put";
    start = absl::Now();
    ASSERT_TRUE(client->Get("users", absl::StrCat("k", round)).ok());
    EXPECT_LT(absl::Now() - start, answers_within) << "Get";
  }
  for (auto& context : contexts) context->TryCancel();
  for (auto& reader : readers) {
    v1::ScanResponse message;
    while (reader->Read(&message)) {
    }
    reader->Finish();
  }
  EXPECT_EQ(node->Stop(), 0);
}

TEST(Cluster, ChangeFeedCarriesWritesAroundARingWithoutEchoes) {
  // Four nodes in a ring, each peering its two neighbours. Sessions run
  // once at start and then only every minute: what converges the ring in
  // the test's seconds is the change feed.
  constexpr int kNodes = 4;
  std::vector<std::string> addresses;
  for (int i = 0; i < kNodes; ++i) {
    addresses.push_back(FreeLoopbackAddress());
  }
  std::vector<TempDir> dirs(kNodes);
  std::vector<std::unique_ptr<NodeProcess>> nodes;
  for (int i = 0; i < kNodes; ++i) {
    nodes.push_back(StartNode(absl::StrCat("ring-", i), dirs[i].path(),
                              {"--sync-writes", "false", "--sync-interval",
                               "60s", "--peer", addresses[(i + 1) % kNodes],
                               "--peer", addresses[(i + kNodes - 1) % kNodes]},
                              addresses[i]));
    ASSERT_TRUE(nodes.back());
  }
  std::vector<std::unique_ptr<NodeClient>> clients;
  for (const std::string& a : addresses) clients.push_back(Connect(a));
  // Let the feeds connect (and the start-up sessions pass).
  absl::SleepFor(absl::Seconds(2));

  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(clients[rng() % kNodes]
                    ->Put(kKeyspace, absl::StrCat("ring-key-", i), "v")
                    .ok());
  }
  // Concurrent writes of the same keys on two nodes: last writer wins.
  for (int i = 0; i < 20; ++i) {
    const std::string key = absl::StrCat("contested-", i);
    ASSERT_TRUE(clients[0]->Put(kKeyspace, key, "from-0").ok());
    ASSERT_TRUE(clients[2]->Put(kKeyspace, key, "from-2").ok());
  }

  auto all_equal = [&] {
    const auto first = Root(addresses[0]);
    if (first.second != 220) return false;
    for (const std::string& a : addresses) {
      if (Root(a) != first) return false;
    }
    return true;
  };
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!all_equal() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_TRUE(all_equal());
  for (const auto& c : clients) {
    auto got = c->Get(kKeyspace, "contested-7");
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->row().value(), "from-2");  // the later write
  }

  // No echoes: once converged, the logs stay still. Each node applied each
  // change at most once: 200 keys once, contested keys at most twice.
  std::vector<uint64_t> sequences;
  for (const auto& c : clients) {
    auto status = c->Status();
    ASSERT_TRUE(status.ok());
    EXPECT_LE(status->last_sequence(), 200u + 2 * 20u);
    sequences.push_back(status->last_sequence());
  }
  absl::SleepFor(absl::Seconds(2));
  uint64_t sent = 0;
  for (size_t i = 0; i < clients.size(); ++i) {
    auto status = clients[i]->Status();
    ASSERT_TRUE(status.ok());
    EXPECT_EQ(status->last_sequence(), sequences[i]) << i;
    // Each node serves its two neighbours and follows both, caught up.
    EXPECT_EQ(status->subscriptions_size(), 2) << i;
    sent += status->feed().sent();
    for (const auto& peer : status->peers()) {
      EXPECT_TRUE(peer.feed_connected()) << i << " " << peer.address();
      EXPECT_EQ(peer.feed_lag_entries(), 0u) << i << " " << peer.address();
      EXPECT_EQ(peer.feed_lag_seconds(), 0.0) << i << " " << peer.address();
    }
  }
  // 240 changes over 8 directed links (sessions may have carried some).
  EXPECT_GT(sent, 0u);
  EXPECT_LE(sent, 8u * 240u);
  for (auto& n : nodes) EXPECT_EQ(n->Stop(), 0);
}

// A node at its keyspace limit (max-keyspaces) refuses a peer's rows of one
// more keyspace; that must not stop the rest. The feed stopped at the first
// change of such a keyspace and reconnected to the same change for ever, so
// no later write of the peer arrived; a session stopped at that keyspace,
// so the keyspaces after it (by name) were never synced again.
TEST(Cluster, APeersKeyspaceOverTheLimitDoesNotStopTheOthers) {
  TempDir dir_x, dir_y;
  const std::string addr_y = FreeLoopbackAddress();
  auto y = StartNode("y", dir_y.path(), kNoSync, addr_y);
  ASSERT_TRUE(y);
  auto y_client = Connect(addr_y);
  ASSERT_TRUE(y_client->Put(kKeyspace, "d0", "v").ok());
  const std::vector<std::string> x_flags = {
      "--sync-writes",   "false", "--max-keyspaces", "2",
      "--sync-interval", "1h",    "--peer",          addr_y};
  auto x = StartNode("x", dir_x.path(), x_flags);
  ASSERT_TRUE(x);
  auto x_client = Connect(x->address());
  auto x_has = [&](const std::string& key) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      if (x_client->Get(kKeyspace, key).ok()) return true;
      absl::SleepFor(absl::Milliseconds(100));
    }
    return false;
  };
  ASSERT_TRUE(x_has("d0"));  // the start-up session

  // The feed: a1 fits (default, a1), a2 does not; d1 comes after both.
  ASSERT_TRUE(y_client->Put("a1", "k", "v").ok());
  ASSERT_TRUE(y_client->Put("a2", "k", "v").ok());
  ASSERT_TRUE(y_client->Put(kKeyspace, "d1", "v").ok());
  EXPECT_TRUE(x_has("d1")) << "the feed stopped at keyspace a2";

  // A session: with y's log trimmed, x's feed cannot bring d2; only the
  // start-up session can, after it has been refused keyspace a2.
  EXPECT_EQ(x->Stop(), 0);
  ASSERT_TRUE(y_client->Put(kKeyspace, "d2", "v").ok());
  EXPECT_EQ(y->Stop(), 0);
  y = StartNode("y", dir_y.path(),
                {"--sync-writes", "false", "--log-retention-entries", "1",
                 "--maintenance-interval", "100ms"},
                addr_y);
  ASSERT_TRUE(y);
  y_client = Connect(addr_y);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(y_client->Put("a2", absl::StrCat("more-", i), "v").ok());
  }
  absl::SleepFor(absl::Milliseconds(500));  // y trims its log
  x = StartNode("x", dir_x.path(), x_flags);
  ASSERT_TRUE(x);
  x_client = Connect(x->address());
  EXPECT_TRUE(x_has("d2")) << "the session stopped at keyspace a2";
  EXPECT_THAT(x->Log(), HasSubstr("keyspace=a2"));
  EXPECT_EQ(x->Stop(), 0);
  EXPECT_EQ(y->Stop(), 0);
}

TEST(Cluster, PeersConvergeOnTheirOwn) {
  TempDir dir_a, dir_b;
  const std::string addr_a = FreeLoopbackAddress();
  const std::string addr_b = FreeLoopbackAddress();
  // At debug: a session that finds the nodes equal logs its line there.
  auto a = StartNode("node-a", dir_a.path(),
                     {"--sync-writes", "false", "--sync-interval", "300ms",
                      "--peer", addr_b, "--log-level", "debug"},
                     addr_a);
  auto b = StartNode(
      "node-b", dir_b.path(),
      {"--sync-writes", "false", "--sync-interval", "300ms", "--peer", addr_a},
      addr_b);
  ASSERT_TRUE(a && b);
  Load(addr_a, 0, 2000);
  Load(addr_b, 1000, 2000);  // overlapping keys: the later load wins
  ASSERT_TRUE(Connect(addr_a)->Delete(kKeyspace, Key(10)).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while ((Root(addr_a) != Root(addr_b) || Root(addr_a).second != 3000) &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(200));
  }
  EXPECT_EQ(Root(addr_a), Root(addr_b));
  EXPECT_EQ(Root(addr_a).second, 3000u);
  EXPECT_TRUE(Connect(addr_b)->Get(kKeyspace, Key(10))->row().deleted());
  // The change feed usually converges them first; anti-entropy sessions run
  // on their interval all the same.
  const absl::Time session_deadline = absl::Now() + absl::Seconds(10);
  while (a->Log().find("session peer=" + addr_b + " name=node-b keyspace") ==
             std::string::npos &&
         absl::Now() < session_deadline) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_THAT(a->Log(), HasSubstr("session peer=" + addr_b));
  EXPECT_EQ(a->Stop(), 0);
  EXPECT_EQ(b->Stop(), 0);
}

std::string Scrape(int port) {
  httplib::Client client("127.0.0.1", port);
  httplib::Result r = client.Get("/metrics");
  if (!r) return "scrape failed: " + httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"),
            "text/plain; version=0.0.4; charset=utf-8");
  return r->body;
}

TEST(Cluster, StatusAndMetricsShowTheFeedAndRowsPerOrigin) {
  TempDir dir_a, dir_b;
  const std::string addr_a = FreeLoopbackAddress();
  const std::string addr_b = FreeLoopbackAddress();
  auto a = StartNode(
      "node-a", dir_a.path(),
      {"--sync-writes", "false", "--sync-interval", "1s", "--peer", addr_b},
      addr_a);
  auto b = StartNode("node-b", dir_b.path(),
                     {"--sync-writes", "false", "--sync-interval", "1s",
                      "--peer", addr_a, "--metrics-listen", "127.0.0.1:0"},
                     addr_b);
  ASSERT_TRUE(a && b);
  const int port = MetricsPort(*b);
  ASSERT_GT(port, 0) << b->Log();

  for (int i = 0; i < 3; ++i) {
    const CommandResult put =
        RunTally({"put", "--node", addr_a, absl::StrCat("k", i), "v"});
    ASSERT_EQ(put.exit_code, 0) << put.err;
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (Root(addr_b).second != 3 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_EQ(Root(addr_b).second, 3u);

  const CommandResult text = RunTally({"status", "--node", addr_b});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("  feed sent  "));
  EXPECT_THAT(text.out, HasSubstr("  feed received  "));
  EXPECT_THAT(text.out, HasSubstr("ROOT CHANGES"));
  EXPECT_TRUE(std::regex_search(text.out, std::regex("\n  ORIGIN +ROWS\n"
                                                     "  node-a +3\n")))
      << text.out;
  EXPECT_TRUE(std::regex_search(
      text.out,
      std::regex("\n  FEED FROM +CONNECTED +POSITION +LAG .*\n  " +
                 std::regex_replace(addr_a, std::regex("\\."), "\\.") +
                 " +(yes|no) ")))
      << text.out;
  // a follows b's feed: b lists it once the feed reports subscriptions.
  EXPECT_TRUE(std::regex_search(
      text.out, std::regex("\n  (SUBSCRIBER .*\n  node-a |no subscribers)")))
      << text.out;

  const CommandResult json = RunTally({"status", "--node", addr_b, "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_THAT(json.out,
              HasSubstr(R"("origins":[{"origin":"node-a","rows":3}])"));
  for (const char* field :
       {R"("feed":{"sent":)", R"("lag_entries":)", R"("lag_seconds":)",
        R"("connected":)", R"("root_changes":)", R"("bytes_repaired":)",
        R"("subscriptions":[)", R"("sessions_ok":)"}) {
    EXPECT_THAT(json.out, HasSubstr(field));
  }

  const std::string before = Scrape(port);
  EXPECT_THAT(before,
              HasSubstr("tally_keyspace_rows{keyspace=\"default\"} 3\n"));
  EXPECT_THAT(before, HasSubstr("tally_origin_rows{origin=\"node-a\"} 3\n"));
  EXPECT_THAT(before, HasSubstr(absl::StrCat("tally_feed_connected{peer=\"",
                                             addr_a, "\"}")));
  // A row written on b itself shows up under b's own origin.
  ASSERT_EQ(RunTally({"put", "--node", addr_b, "mine", "v"}).exit_code, 0);
  const std::string after = Scrape(port);
  EXPECT_THAT(after,
              HasSubstr("tally_keyspace_rows{keyspace=\"default\"} 4\n"));
  EXPECT_THAT(after, HasSubstr("tally_origin_rows{origin=\"node-b\"} 1\n"));
  httplib::Client client("127.0.0.1", port);
  // Another path is 404 (`/` is the status page).
  httplib::Result other = client.Get("/nothing");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
  EXPECT_EQ(a->Stop(), 0);
  EXPECT_EQ(b->Stop(), 0);
}

TEST(Cluster, NonLoopbackMetricsListenIsRefusedWithoutInsecure) {
  TempDir dir;
  const CommandResult refused = ::tally::testing::RunCommand(
      {::tally::testing::TallydPath(), "--name", "n", "--data-dir", dir.path(),
       "--listen", "127.0.0.1:0", "--metrics-listen", "0.0.0.0:0"});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_THAT(refused.err, HasSubstr("--metrics-listen 0.0.0.0:0"));
  EXPECT_THAT(refused.err, HasSubstr("--insecure"));
  const CommandResult malformed = ::tally::testing::RunCommand(
      {::tally::testing::TallydPath(), "--name", "n", "--data-dir", dir.path(),
       "--listen", "127.0.0.1:0", "--metrics-listen", "9400"});
  EXPECT_EQ(malformed.exit_code, 2);
  EXPECT_THAT(malformed.err, HasSubstr("--metrics-listen '9400'"));
}

}  // namespace
}  // namespace tally

namespace tally {
namespace {

// How a key looks on one node: "live", "tombstone" or "absent".
std::string KeyState(NodeClient& client, const std::string& key) {
  auto got = client.Get(kKeyspace, key);
  if (!got.ok()) return absl::IsNotFound(got.status()) ? "absent" : "error";
  return got->row().deleted() ? "tombstone" : "live";
}

// A tombstone is purged only once every peer has synced
// past it; a node that missed the delete and comes back receives it and
// never brings the row back.
TEST(Cluster, TombstonesOutliveADownPeerAndThenGo) {
  const std::vector<std::string> addresses = {
      FreeLoopbackAddress(), FreeLoopbackAddress(), FreeLoopbackAddress()};
  std::vector<TempDir> dirs(3);
  auto start = [&](int i) {
    std::vector<std::string> flags = {
        "--sync-writes",          "false", "--sync-interval",  "1s",
        "--tombstone-min-age",    "1s",    "--max-clock-skew", "1s",
        "--maintenance-interval", "200ms"};
    for (int j = 0; j < 3; ++j) {
      if (j != i) flags.insert(flags.end(), {"--peer", addresses[j]});
    }
    return StartNode(absl::StrCat("site-", i), dirs[i].path(), flags,
                     addresses[i]);
  };
  std::vector<std::unique_ptr<NodeProcess>> nodes;
  for (int i = 0; i < 3; ++i) nodes.push_back(start(i));
  for (const auto& n : nodes) ASSERT_TRUE(n);
  std::vector<std::unique_ptr<NodeClient>> clients;
  for (const std::string& a : addresses) clients.push_back(Connect(a));

  ASSERT_TRUE(clients[0]->Put(kKeyspace, "doomed", "v").ok());
  ASSERT_TRUE(clients[0]->Put(kKeyspace, "kept", "v").ok());
  auto everywhere = [&](const std::string& key, const std::string& state,
                        absl::Duration timeout, int skip = -1) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      bool all = true;
      for (int i = 0; i < 3; ++i) {
        if (i != skip && KeyState(*clients[i], key) != state) all = false;
      }
      if (all) return true;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  };
  ASSERT_TRUE(everywhere("doomed", "live", absl::Seconds(10)));

  // site-2 goes down; the row is deleted meanwhile.
  ASSERT_EQ(nodes[2]->Stop(), 0);
  ASSERT_TRUE(clients[0]->Delete(kKeyspace, "doomed").ok());
  ASSERT_TRUE(everywhere("doomed", "tombstone", absl::Seconds(10), 2));

  // Well past the minimum age, and with sessions between the two live
  // nodes every second, the tombstone stays: site-2 has not synced.
  absl::SleepFor(absl::Seconds(4));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(KeyState(*clients[i], "doomed"), "tombstone") << i;
    EXPECT_EQ(clients[i]->Status()->tombstones_purged(), 0u) << i;
  }

  // site-2 comes back with the live row: it receives the delete, and once
  // every node has synced the tombstone is purged everywhere. The row is
  // never live again on any node.
  nodes[2] = start(2);
  ASSERT_TRUE(nodes[2]);
  bool resurrected = false;
  bool gone = false;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!gone && absl::Now() < deadline) {
    int absent = 0;
    for (int i = 0; i < 3; ++i) {
      const std::string state = KeyState(*clients[i], "doomed");
      // site-2 is live only until its first sync after the restart.
      if (state == "live" && i != 2) resurrected = true;
      if (state == "absent") ++absent;
    }
    gone = absent == 3;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_FALSE(resurrected);
  ASSERT_TRUE(gone) << "tombstone not purged everywhere";
  // And it stays gone: no peer hands the row or the tombstone back.
  absl::SleepFor(absl::Seconds(2));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(KeyState(*clients[i], "doomed"), "absent") << i;
    EXPECT_EQ(KeyState(*clients[i], "kept"), "live") << i;
  }
  EXPECT_EQ(Root(addresses[0]), Root(addresses[1]));
  EXPECT_EQ(Root(addresses[0]), Root(addresses[2]));
  uint64_t purged = 0;
  for (const auto& c : clients) purged += c->Status()->tombstones_purged();
  EXPECT_GE(purged, 3u);
  for (auto& n : nodes) EXPECT_EQ(n->Stop(), 0);
}

// A subscriber whose position fell out of the publisher's retained log is
// told so, falls back to anti-entropy and follows from the head.
TEST(Cluster, ASubscriberBehindTheRetainedLogFallsBackToAntiEntropy) {
  TempDir dir_a, dir_b;
  const std::string addr_a = FreeLoopbackAddress();
  const std::string addr_b = FreeLoopbackAddress();
  auto a = StartNode("pub", dir_a.path(),
                     {"--sync-writes", "false", "--log-retention-entries", "10",
                      "--maintenance-interval", "100ms"},
                     addr_a);
  ASSERT_TRUE(a);
  auto start_b = [&] {
    return StartNode(
        "sub", dir_b.path(),
        {"--sync-writes", "false", "--sync-interval", "1h", "--peer", addr_a},
        addr_b);
  };
  auto b = start_b();
  ASSERT_TRUE(b);
  auto client_a = Connect(addr_a);
  auto client_b = Connect(addr_b);
  ASSERT_TRUE(client_a->Put(kKeyspace, "first", "v").ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (KeyState(*client_b, "first") != "live" && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_EQ(KeyState(*client_b, "first"), "live");
  ASSERT_EQ(b->Stop(), 0);

  Load(addr_a, 0, 200);
  // The publisher keeps 10 entries.
  const absl::Time trimmed_by = absl::Now() + absl::Seconds(10);
  while (client_a->Status()->first_sequence() < 190 &&
         absl::Now() < trimmed_by) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  auto status = client_a->Status();
  ASSERT_TRUE(status.ok());
  EXPECT_GE(status->first_sequence(), 190u);
  EXPECT_GE(status->log_entries_trimmed(), 180u);

  b = start_b();
  ASSERT_TRUE(b);
  client_b = Connect(addr_b);
  const absl::Time converged_by = absl::Now() + absl::Seconds(20);
  while (Root(addr_b) != Root(addr_a) && absl::Now() < converged_by) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(Root(addr_b), Root(addr_a));
  EXPECT_THAT(b->Log(), HasSubstr("older than the retained change log"));
  // And it follows the feed again from the head.
  ASSERT_TRUE(client_a->Put(kKeyspace, "after", "v").ok());
  const absl::Time followed_by = absl::Now() + absl::Seconds(10);
  while (KeyState(*client_b, "after") != "live" && absl::Now() < followed_by) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(KeyState(*client_b, "after"), "live");
  EXPECT_EQ(b->Stop(), 0);
  EXPECT_EQ(a->Stop(), 0);
}

}  // namespace
}  // namespace tally
