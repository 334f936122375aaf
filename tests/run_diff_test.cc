// Admin.RunDiff with real tallyd processes: what `tally diff` and `tally
// repair` rely on when node A runs them (node/sync/diff_run.h,
// node/rpc/diff_runner.h) — bad requests refused, the tool's fallback when A
// cannot reach B, a tool that goes away stopping A's run, and the bound on
// runs at once.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>

#include <cmath>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/client/client.h"
#include "node/client/tls.h"
#include "node/rpc/admin_service.h"
#include "node/rpc/peer_service.h"
#include "node/worker_pool.h"
#include "storage/store.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "tally/v1/tally.grpc.pb.h"
#include "tests/node_connect.h"
#include "tests/test_certs.h"

namespace tally {
namespace {

using ::tally::node::NodeClient;
using ::tally::testing::CertFiles;
using ::tally::testing::CommandResult;
using ::tally::testing::Connect;
using ::tally::testing::FreeLoopbackAddress;
using ::tally::testing::NodeProcess;
using ::tally::testing::RunTally;
using ::tally::testing::TempDir;
using ::tally::testing::TestCa;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kKeyspace[] = "default";

std::unique_ptr<NodeProcess> StartNode(
    const std::string& name, const std::string& dir,
    std::vector<std::string> extra = {},
    const std::string& listen = "127.0.0.1:0") {
  extra.insert(extra.end(), {"--sync-writes", "false"});
  auto node = NodeProcess::Start(name, dir, extra, listen);
  EXPECT_TRUE(node.ok()) << node.status();
  return node.ok() ? std::move(*node) : nullptr;
}

// Loads `count` rows; `key_prefix` makes the keys (and so each difference
// a diff streams) as long as a test needs.
void LoadRows(NodeClient& client, int count,
              absl::string_view key_prefix = "key-") {
  int i = 0;
  auto loaded = client.Load(kKeyspace, [&](std::string* k, std::string* v) {
    if (i >= count) return false;
    *k = absl::StrCat(key_prefix, i++);
    *v = std::string(100, 'v');
    return true;
  });
  ASSERT_TRUE(loaded.ok()) << loaded.status();
}

uint64_t Rows(NodeClient& client) {
  auto hs = client.Handshake({kKeyspace}, 0);
  if (!hs.ok() || hs->keyspaces_size() == 0) return 0;
  return hs->keyspaces(0).row_count();
}

// Diffs running on the node, or -1 when Status fails.
int DiffsRunning(NodeClient& client) {
  auto status = client.Status();
  return status.ok() ? static_cast<int>(status->diffs_running()) : -1;
}

template <typename Condition>
bool WaitFor(Condition condition, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

absl::Status RunDiff(NodeClient& client, const v1::RunDiffRequest& request) {
  return client.RunDiff(request,
                        [](v1::RunDiffEvent&) { return absl::OkStatus(); });
}

// The lines of `out` that name a key (dry-run actions), without the
// summary.
std::set<std::string> KeyLines(const std::string& out) {
  std::set<std::string> lines;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    if (absl::StartsWith(line, "would ") ||
        absl::StartsWith(line, "conflict")) {
      lines.insert(std::string(line));
    }
  }
  return lines;
}

TEST(RunDiff, BadRequestsGetInvalidArgumentAndTheNodeKeepsServing) {
  TempDir dir;
  auto a = StartNode("node-a", dir.path());
  ASSERT_TRUE(a);
  auto client = Connect(a->address());
  ASSERT_TRUE(client->Put(kKeyspace, "k", "v").ok());
  const std::string port = a->address().substr(a->address().rfind(':') + 1);

  struct Case {
    std::string what;
    std::function<void(v1::RunDiffRequest*)> spoil;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"empty peer", [](v1::RunDiffRequest* r) { r->clear_peer(); },
       "peer is empty"},
      {"peer without a port",
       [](v1::RunDiffRequest* r) { r->set_peer("no-port"); }, "no port"},
      {"peer with a bad port",
       [](v1::RunDiffRequest* r) { r->set_peer("127.0.0.1:70000"); },
       "invalid port"},
      {"over-long peer",
       [](v1::RunDiffRequest* r) {
         r->set_peer(std::string(2000, 'h') + ":1");
       },
       "the limit is 1024"},
      {"this node's address",
       [&](v1::RunDiffRequest* r) { r->set_peer(a->address()); }, "itself"},
      {"this node by another name",
       [&](v1::RunDiffRequest* r) { r->set_peer("localhost:" + port); },
       "this node itself"},
      {"bad keyspace",
       [](v1::RunDiffRequest* r) { r->set_keyspace("no spaces allowed"); },
       "bad keyspace"},
      {"empty keyspace", [](v1::RunDiffRequest* r) { r->clear_keyspace(); },
       "bad keyspace"},
      {"unknown mode",
       [](v1::RunDiffRequest* r) {
         r->set_mode(static_cast<v1::RunDiffMode>(99));
       },
       "unknown mode 99"},
      {"dry run of a diff",
       [](v1::RunDiffRequest* r) {
         r->set_mode(v1::RUN_DIFF_MODE_DIFF);
         r->set_dry_run(true);
       },
       "dry_run"},
      {"negative bandwidth",
       [](v1::RunDiffRequest* r) { r->set_bandwidth_mb(-1); }, "bandwidth_mb"},
      {"bandwidth that is not a number",
       [](v1::RunDiffRequest* r) { r->set_bandwidth_mb(std::nan("")); },
       "bandwidth_mb"},
      {"bandwidth of a diff",
       [](v1::RunDiffRequest* r) {
         r->set_mode(v1::RUN_DIFF_MODE_DIFF);
         r->set_bandwidth_mb(1);
       },
       "bandwidth_mb applies to repairs"},
      {"range backwards",
       [](v1::RunDiffRequest* r) {
         r->mutable_range()->set_first(10);
         r->mutable_range()->set_last(9);
       },
       "after its last"},
      {"range and keys",
       [](v1::RunDiffRequest* r) {
         r->mutable_range()->set_last(9);
         r->add_keys("k");
       },
       "not both"},
      {"empty key", [](v1::RunDiffRequest* r) { r->add_keys(""); },
       "keys are 1.."},
      {"too many keys",
       [](v1::RunDiffRequest* r) {
         for (int i = 0; i <= 10000; ++i) r->add_keys(absl::StrCat("k", i));
       },
       "the limit is 10000"},
      {"keys too long in all",
       [](v1::RunDiffRequest* r) {
         for (int i = 0; i < 40; ++i) {
           r->add_keys(absl::StrCat(i, std::string(60000, 'k')));
         }
       },
       "bytes in all"},
  };
  for (const Case& c : cases) {
    v1::RunDiffRequest request;
    request.set_peer("127.0.0.1:1");
    request.set_keyspace(kKeyspace);
    request.set_mode(v1::RUN_DIFF_MODE_REPAIR);
    c.spoil(&request);
    const absl::Status s = RunDiff(*client, request);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
        << c.what << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(c.says)) << c.what;
    // Refused before any peer is dialled or any row moved.
    EXPECT_FALSE(node::UnreachablePeer(s).has_value()) << c.what;
    // Only a peer that is A itself is marked so (the tool then compares A
    // with itself from where it is).
    EXPECT_EQ(node::PeerIsSelf(s), absl::StrContains(c.what, "this node"))
        << c.what;
  }
  // Still serving, nothing left running.
  auto got = client->Get(kKeyspace, "k");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->row().value(), "v");
  EXPECT_EQ(DiffsRunning(*client), 0);
}

// A trusts only its own CA, and B's certificate comes from another: A
// cannot reach B, though the tool, which trusts both, reaches each.
class UnreachablePeer : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ca_a = TestCa::Create(certs_.path(), "ca-a");
    auto ca_b = TestCa::Create(certs_.path(), "ca-b");
    ASSERT_TRUE(ca_a.ok() && ca_b.ok());
    auto node_a = ca_a->Issue("node-a");
    auto node_b = ca_b->Issue("node-b");
    auto client = ca_a->Issue("client");
    ASSERT_TRUE(node_a.ok() && node_b.ok() && client.ok());
    both_cas_ = certs_.path() + "/both-cas.pem";
    {
      std::ofstream out(both_cas_);
      for (const std::string& ca : {ca_a->cert(), ca_b->cert()}) {
        std::ifstream in(ca);
        out << in.rdbuf();
      }
    }
    client_ = *client;
    a_ = StartNode("node-a", dir_a_.path(),
                   {"--tls-cert", node_a->cert, "--tls-key", node_a->key,
                    "--tls-ca", ca_a->cert()});
    b_ = StartNode("node-b", dir_b_.path(),
                   {"--tls-cert", node_b->cert, "--tls-key", node_b->key,
                    "--tls-ca", both_cas_});
    ASSERT_TRUE(a_ && b_);
  }

  std::vector<std::string> ToolTls() const {
    return {"--tls-cert", client_.cert, "--tls-key",
            client_.key,  "--tls-ca",   both_cas_};
  }

  std::unique_ptr<NodeClient> TlsClient(const std::string& address) const {
    node::ClientOptions options;
    auto credentials = node::MakeChannelCredentials(
        node::TlsFiles{client_.cert, client_.key, both_cas_});
    EXPECT_TRUE(credentials.ok()) << credentials.status();
    options.credentials = *credentials;
    auto client = NodeClient::Connect(address, options);
    EXPECT_TRUE(client.ok()) << client.status();
    return std::move(*client);
  }

  CommandResult Tally(std::vector<std::string> args) const {
    for (const std::string& flag : ToolTls()) args.push_back(flag);
    return RunTally(args);
  }

  TempDir certs_, dir_a_, dir_b_;
  std::string both_cas_;
  CertFiles client_;
  std::unique_ptr<NodeProcess> a_, b_;
};

TEST_F(UnreachablePeer, NodeSaysItCannotReachThePeer) {
  auto a = TlsClient(a_->address());
  v1::RunDiffRequest request;
  request.set_peer(b_->address());
  request.set_keyspace(kKeyspace);
  const absl::Status s = RunDiff(*a, request);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("cannot reach " + b_->address()));
  EXPECT_EQ(node::UnreachablePeer(s), b_->address()) << s;
  // A failure of the tool's own link to A is not marked: no fallback then.
  auto nowhere = TlsClient(FreeLoopbackAddress());
  const absl::Status own = RunDiff(*nowhere, request);
  EXPECT_EQ(own.code(), absl::StatusCode::kUnavailable) << own;
  EXPECT_FALSE(node::UnreachablePeer(own).has_value()) << own;
}

TEST_F(UnreachablePeer, ToolDiffsAndRepairsFromHereAndSaysSoInOneLine) {
  ASSERT_TRUE(TlsClient(a_->address())->Put(kKeyspace, "only-a", "1").ok());
  ASSERT_TRUE(TlsClient(b_->address())->Put(kKeyspace, "only-b", "2").ok());

  const CommandResult diff = Tally({"diff", a_->address(), b_->address()});
  EXPECT_EQ(diff.exit_code, 1) << diff.out << diff.err;
  EXPECT_THAT(diff.out, HasSubstr("only-a"));
  EXPECT_THAT(diff.out, HasSubstr("only-b"));
  EXPECT_THAT(diff.out, HasSubstr("2 keys differ"));
  EXPECT_THAT(diff.err, HasSubstr("cannot reach " + b_->address()));
  EXPECT_THAT(diff.err, HasSubstr("ran it from here instead"));
  EXPECT_EQ(std::count(diff.err.begin(), diff.err.end(), '\n'), 1) << diff.err;

  const CommandResult repair = Tally({"repair", a_->address(), b_->address()});
  EXPECT_EQ(repair.exit_code, 0) << repair.out << repair.err;
  EXPECT_THAT(repair.out, HasSubstr("A and B are equal"));
  EXPECT_THAT(repair.err, HasSubstr("ran it from here instead"));
  const CommandResult equal =
      Tally({"diff", a_->address(), b_->address(), "--third-party"});
  EXPECT_EQ(equal.exit_code, 0) << equal.out << equal.err;
  EXPECT_EQ(equal.err, "");
}

// A dry run prints the same actions on A as from the tool; a real repair
// on A prints no key, as from the tool.
// A node compared with itself is equal, as it was before diffs ran on A:
// A refuses to diff against itself, and the tool compares the two from
// here (exit 0), by the same address or by another spelling of it.
TEST(RunDiff, ANodeDiffedWithItselfIsEqual) {
  TempDir dir_a;
  auto a = StartNode("node-a", dir_a.path());
  ASSERT_TRUE(a);
  auto ca = Connect(a->address());
  ASSERT_TRUE(ca->Put(kKeyspace, "k", "v").ok());
  const std::string port = a->address().substr(a->address().rfind(':') + 1);
  for (const std::string& again : {a->address(), "localhost:" + port}) {
    const CommandResult diff = RunTally({"diff", a->address(), again});
    EXPECT_EQ(diff.exit_code, 0) << diff.out << diff.err;
    EXPECT_THAT(diff.err, ::testing::HasSubstr("same node")) << diff.err;
  }
}

// Before: a diff showed only versions, so a reviewer had to `tally get`
// each key on each node. --values shows both rows' values under each
// difference (on A's diff and on the tool's), as text and as JSON.
TEST(RunDiff, ValuesShowsBothSidesValues) {
  TempDir dir_a, dir_b;
  auto a = StartNode("node-a", dir_a.path());
  auto b = StartNode("node-b", dir_b.path());
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(Connect(a->address())->Put(kKeyspace, "same", "s").ok());
  ASSERT_TRUE(Connect(b->address())->Put(kKeyspace, "same", "s").ok());
  ASSERT_TRUE(Connect(a->address())->Put(kKeyspace, "k", "on a").ok());
  ASSERT_TRUE(Connect(b->address())->Put(kKeyspace, "k", "on\tb").ok());
  ASSERT_TRUE(Connect(a->address())->Put(kKeyspace, "only-a", "x").ok());
  ASSERT_TRUE(Connect(b->address())->Delete(kKeyspace, "same").ok());
  for (const bool third_party : {false, true}) {
    std::vector<std::string> args = {"--keyspace", kKeyspace,    "diff",
                                     a->address(), b->address(), "--values"};
    if (third_party) args.push_back("--third-party");
    const CommandResult text = RunTally(args);
    EXPECT_EQ(text.exit_code, 1) << text.err;
    EXPECT_THAT(text.out, HasSubstr("    A now: 'on a'\n    B now: 'on\\tb'\n"))
        << text.out;
    EXPECT_THAT(text.out, HasSubstr("    A now: 'x'\n    B now: (missing)\n"));
    EXPECT_THAT(text.out, HasSubstr("    A now: 's'\n    B now: (deleted)\n"));
    args.push_back("--json");
    const CommandResult json = RunTally(args);
    EXPECT_THAT(
        json.out,
        HasSubstr(R"("a_now":{"value":"on a"},"b_now":{"value":"on\tb"})"))
        << json.out;
    EXPECT_THAT(json.out, HasSubstr(R"("b_now":{"none":"missing"})"));
  }
  // Without --values, no values.
  const CommandResult plain =
      RunTally({"--keyspace", kKeyspace, "diff", a->address(), b->address()});
  EXPECT_THAT(plain.out, Not(HasSubstr("A now")));
}

TEST(RunDiff, RepairOnTheNodePrintsWhatTheToolPrints) {
  TempDir dir_a, dir_b;
  auto a = StartNode("node-a", dir_a.path());
  auto b = StartNode("node-b", dir_b.path());
  ASSERT_TRUE(a && b);
  auto ca = Connect(a->address());
  auto cb = Connect(b->address());
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(ca->Put(kKeyspace, absl::StrCat("a-", i), "x").ok());
    ASSERT_TRUE(cb->Put(kKeyspace, absl::StrCat("b-", i), "y").ok());
  }
  for (const std::vector<std::string>& extra :
       std::vector<std::vector<std::string>>{
           {}, {"--source", "B"}, {"--source", "A"}}) {
    std::vector<std::string> args = {"repair", a->address(), b->address(),
                                     "--dry-run"};
    args.insert(args.end(), extra.begin(), extra.end());
    const CommandResult on_node = RunTally(args);
    args.push_back("--third-party");
    const CommandResult here = RunTally(args);
    EXPECT_EQ(on_node.exit_code, 1) << on_node.err;
    EXPECT_EQ(here.exit_code, 1) << here.err;
    EXPECT_EQ(KeyLines(on_node.out).size(), 40u) << on_node.out;
    EXPECT_EQ(KeyLines(on_node.out), KeyLines(here.out)) << on_node.out;
  }
  const CommandResult repair = RunTally({"repair", a->address(), b->address()});
  EXPECT_EQ(repair.exit_code, 0) << repair.out << repair.err;
  EXPECT_THAT(repair.out, HasSubstr("copied to A  20"));
  EXPECT_THAT(repair.out, HasSubstr("copied to B  20"));
  EXPECT_EQ(KeyLines(repair.out).size(), 0u) << repair.out;
}

// The payload bytes in a `tally --json diff` summary line.
uint64_t SummaryBytes(const std::string& out) {
  uint64_t total = 0;
  for (const char* field : {"\"bytes_sent\":", "\"bytes_received\":"}) {
    const size_t at = out.rfind(field);
    EXPECT_NE(at, std::string::npos) << out;
    if (at == std::string::npos) continue;
    total += std::stoull(out.substr(at + std::string(field).size()));
  }
  return total;
}

TEST(RunDiff, TheNodesLinkCarriesASessionsBytesNotAThirdPartys) {
  // Run on A, the diff asks A's store first and B answers
  // which children differ (a bitmap) and only its differing rows, as in a
  // session. Asked like a third party (both views alike), A's run cost
  // about half the tool's bytes (only B's answers travel); as a session
  // about a third (at 1M rows, d = 1,000: 172 vs 564 B a difference;
  // here 22.6 vs 62.3 KB, and 31.4 KB asked like a third party).
  TempDir dir_a, dir_b;
  auto a = StartNode("node-a", dir_a.path());
  auto b = StartNode("node-b", dir_b.path());
  ASSERT_TRUE(a && b);
  auto ca = Connect(a->address());
  auto cb = Connect(b->address());
  LoadRows(*ca, 20000);
  const CommandResult copy =
      RunTally({"repair", "--source", "A", a->address(), b->address()});
  ASSERT_EQ(copy.exit_code, 0) << copy.out << copy.err;
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(cb->Put(kKeyspace, absl::StrCat("key-", i), "changed").ok());
  }
  const CommandResult on_node =
      RunTally({"--json", "diff", a->address(), b->address()});
  const CommandResult here =
      RunTally({"--json", "diff", "--third-party", a->address(), b->address()});
  ASSERT_EQ(on_node.exit_code, 1) << on_node.err;
  ASSERT_EQ(here.exit_code, 1) << here.err;
  EXPECT_THAT(on_node.out, HasSubstr("\"differences\":200"));
  EXPECT_THAT(here.out, HasSubstr("\"differences\":200"));
  const uint64_t node_bytes = SummaryBytes(on_node.out);
  const uint64_t tool_bytes = SummaryBytes(here.out);
  std::printf("on the node %llu bytes, from the tool %llu\n",
              static_cast<unsigned long long>(node_bytes),
              static_cast<unsigned long long>(tool_bytes));
  EXPECT_LT(node_bytes * 100, tool_bytes * 43);  // 36% here; 50% before
}

// The tool goes away (SIGKILL: its connection closes) or is interrupted
// (SIGINT: it cancels the call and says so).
class ToolThatStops : public ::testing::TestWithParam<int> {};

TEST_P(ToolThatStops, StopsTheNodesRepair) {
  const int signal = GetParam();
  TempDir dir_a, dir_b, scratch;
  auto a = StartNode("node-a", dir_a.path());
  auto b = StartNode("node-b", dir_b.path());
  ASSERT_TRUE(a && b);
  auto ca = Connect(a->address());
  auto cb = Connect(b->address());
  constexpr int kRows = 300000;
  LoadRows(*ca, kRows);
  const std::string out = scratch.path() + "/repair.out";
  const pid_t tool = ::tally::testing::SpawnCommand(
      {::tally::testing::TallyPath(), "repair", a->address(), b->address()},
      out);
  ASSERT_GT(tool, 0);
  // Running on A, and some rows moved.
  bool seen_running = false;
  ASSERT_TRUE(WaitFor(
      [&] {
        seen_running = seen_running || DiffsRunning(*ca) == 1;
        return seen_running && Rows(*cb) >= 10000;
      },
      absl::Seconds(30)))
      << "diffs running on A: " << DiffsRunning(*ca)
      << ", rows on B: " << Rows(*cb);
  kill(tool, signal);
  int status = 0;
  waitpid(tool, &status, 0);
  // A notices and stops: no run left, and B stops growing short of all.
  EXPECT_TRUE(
      WaitFor([&] { return DiffsRunning(*ca) == 0; }, absl::Seconds(15)))
      << DiffsRunning(*ca);
  const uint64_t stopped_at = Rows(*cb);
  absl::SleepFor(absl::Seconds(1));
  EXPECT_EQ(Rows(*cb), stopped_at);
  EXPECT_LT(stopped_at, static_cast<uint64_t>(kRows));
  EXPECT_THAT(a->Log(), HasSubstr("outcome=\"CANCELLED"));
  if (signal == SIGINT) {
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << status;
    std::ifstream err(out + ".err");
    const std::string said((std::istreambuf_iterator<char>(err)),
                           std::istreambuf_iterator<char>());
    EXPECT_THAT(said, HasSubstr("repair of keyspace 'default' interrupted"));
    EXPECT_THAT(said, HasSubstr("rows repaired so far stay repaired"));
    EXPECT_EQ(std::count(said.begin(), said.end(), '\n'), 1) << said;
  }
}

INSTANTIATE_TEST_SUITE_P(KilledOrInterrupted, ToolThatStops,
                         ::testing::Values(SIGKILL, SIGINT),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return std::string(
                               p.param == SIGKILL ? "Killed" : "Interrupted");
                         });

TEST(RunDiff, ADeadlineThatPassesStopsTheNodesRepair) {
  TempDir dir_a, dir_b;
  auto a = StartNode("node-a", dir_a.path());
  auto b = StartNode("node-b", dir_b.path());
  ASSERT_TRUE(a && b);
  auto ca = Connect(a->address());
  auto cb = Connect(b->address());
  constexpr int kRows = 300000;
  LoadRows(*ca, kRows);
  node::ClientOptions hurried;
  hurried.stream_timeout = absl::Milliseconds(1500);
  auto tool = NodeClient::Connect(a->address(), hurried);
  ASSERT_TRUE(tool.ok()) << tool.status();
  v1::RunDiffRequest request;
  request.set_peer(b->address());
  request.set_keyspace(kKeyspace);
  request.set_mode(v1::RUN_DIFF_MODE_REPAIR);
  const absl::Status s = RunDiff(**tool, request);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_TRUE(
      WaitFor([&] { return DiffsRunning(*ca) == 0; }, absl::Seconds(15)))
      << DiffsRunning(*ca);
  const uint64_t stopped_at = Rows(*cb);
  absl::SleepFor(absl::Seconds(1));
  EXPECT_EQ(Rows(*cb), stopped_at);
  EXPECT_LT(stopped_at, static_cast<uint64_t>(kRows));
}

// A node from before Admin.RunDiff: the Peer service and an Admin service
// without a DiffRunner (UNIMPLEMENTED), in this process.
class OlderNode {
 public:
  OlderNode() {
    storage::StoreOptions options;
    options.node_name = "older";
    options.sync = false;
    auto store = storage::Store::Open(dir_.path(), options);
    EXPECT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    pool_ = std::make_unique<node::WorkerPool>(2, 64);
    peer_ = std::make_unique<node::PeerService>(store_.get(), pool_.get(),
                                                /*observer=*/nullptr);
    admin_ = std::make_unique<node::AdminService>(
        store_.get(), pool_.get(), std::vector<node::StatusSource*>{});
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(peer_.get());
    builder.RegisterService(admin_.get());
    server_ = builder.BuildAndStart();
    EXPECT_NE(server_, nullptr);
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  ~OlderNode() { server_->Shutdown(); }

  const std::string& address() const { return address_; }

 private:
  TempDir dir_;
  std::unique_ptr<storage::Store> store_;
  std::unique_ptr<node::WorkerPool> pool_;
  std::unique_ptr<node::PeerService> peer_;
  std::unique_ptr<node::AdminService> admin_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

TEST(RunDiff, ToolDiffsFromHereWhenAIsAnOlderNode) {
  OlderNode older;
  TempDir dir_b;
  auto b = StartNode("node-b", dir_b.path());
  ASSERT_TRUE(b);
  auto ca = Connect(older.address());
  ASSERT_TRUE(ca->Put(kKeyspace, "only-a", "1").ok());
  ASSERT_TRUE(Connect(b->address())->Put(kKeyspace, "only-b", "2").ok());

  const CommandResult diff = RunTally({"diff", older.address(), b->address()});
  EXPECT_EQ(diff.exit_code, 1) << diff.out << diff.err;
  EXPECT_THAT(diff.out, HasSubstr("2 keys differ"));
  EXPECT_THAT(diff.err, HasSubstr("has no RunDiff"));
  EXPECT_THAT(diff.err, HasSubstr("ran it from here instead"));
  EXPECT_EQ(std::count(diff.err.begin(), diff.err.end(), '\n'), 1) << diff.err;
  const CommandResult repair =
      RunTally({"repair", older.address(), b->address()});
  EXPECT_EQ(repair.exit_code, 0) << repair.out << repair.err;
  EXPECT_THAT(repair.out, HasSubstr("A and B are equal"));
}

TEST(RunDiff, RunsPastTheLimitAreRefusedUntilOneEnds) {
  TempDir dir_a, dir_b;
  auto a = StartNode("node-a", dir_a.path(), {"--max-sessions", "1"});
  auto b = StartNode("node-b", dir_b.path());
  ASSERT_TRUE(a && b);
  auto ca = Connect(a->address());
  // 100k differences of 200-byte keys, 20 MB: more than gRPC's windows and
  // buffers hold however far its flow control lets them grow (with short
  // keys, 2.5 MB, CI once saw the unread run finish).
  LoadRows(*ca, 100000, std::string(196, 'k'));
  v1::RunDiffRequest request;
  request.set_peer(b->address());
  request.set_keyspace(kKeyspace);

  // A first run that nobody reads stays running, blocked on its reader.
  auto channel =
      grpc::CreateChannel(a->address(), grpc::InsecureChannelCredentials());
  auto stub = v1::Admin::NewStub(channel);
  grpc::ClientContext unread;
  std::unique_ptr<grpc::ClientReader<v1::RunDiffEvent>> reader =
      stub->RunDiff(&unread, request);
  ASSERT_TRUE(
      WaitFor([&] { return DiffsRunning(*ca) == 1; }, absl::Seconds(10)));
  absl::SleepFor(absl::Milliseconds(300));
  ASSERT_EQ(DiffsRunning(*ca), 1) << "the unread run ended on its own";

  const absl::Status second = RunDiff(*ca, request);
  EXPECT_EQ(second.code(), absl::StatusCode::kResourceExhausted) << second;
  EXPECT_THAT(second.message(), HasSubstr("the limit is 1"));

  unread.TryCancel();
  (void)reader->Finish();
  ASSERT_TRUE(
      WaitFor([&] { return DiffsRunning(*ca) == 0; }, absl::Seconds(15)));
  int differences = 0;
  const absl::Status third = ca->RunDiff(request, [&](v1::RunDiffEvent& e) {
    differences += e.differences_size();
    if (e.has_summary()) {
      EXPECT_EQ(e.summary().differences(), 100000u);
      EXPECT_FALSE(e.summary().b_has_keyspace());
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(third.ok()) << third;
  EXPECT_EQ(differences, 100000);
}

}  // namespace
}  // namespace tally
