// What an operator trips over: loading from a
// pipe, signals and --version, exit codes and bad flags — each run against
// the real tallyd and tally binaries, as an operator's shell runs them.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/client/client.h"
#include "node/observe/version.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "tests/diff_paths.h"
#include "tests/health_check.h"
#include "tests/node_connect.h"
#include "tests/node_metrics.h"
#include "tree/hlc.h"

namespace tally {
namespace {

using ::tally::testing::CommandResult;
using ::tally::testing::Connect;
using ::tally::testing::DiffPath;
using ::tally::testing::DiffPathName;
using ::tally::testing::HealthCheck;
using ::tally::testing::HealthWatch;
using ::tally::testing::kBothDiffPaths;
using ::tally::testing::kNotServing;
using ::tally::testing::kServing;
using ::tally::testing::MetricsPort;
using ::tally::testing::NodeProcess;
using ::tally::testing::RunCommand;
using ::tally::testing::RunDiffCommand;
using ::tally::testing::RunTally;
using ::tally::testing::Scrape;
using ::tally::testing::TallydPath;
using ::tally::testing::TallyPath;
using ::tally::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

const std::vector<std::string> kNoSync = {"--sync-writes", "false"};

std::unique_ptr<NodeProcess> StartNode(const std::string& name,
                                       const std::string& dir) {
  auto node = NodeProcess::Start(name, dir, kNoSync);
  EXPECT_TRUE(node.ok()) << node.status();
  return node.ok() ? std::move(*node) : nullptr;
}

uint64_t RowCount(const std::string& address, const std::string& keyspace) {
  auto hs = Connect(address)->Handshake({keyspace}, 0);
  if (!hs.ok() || hs->keyspaces_size() == 0) return 0;
  return hs->keyspaces(0).row_count();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

std::string JsonlRows(int first, int count) {
  std::string text;
  for (int i = first; i < first + count; ++i) {
    absl::StrAppendFormat(&text, "{\"key\": \"k%05d\", \"value\": \"v%d\"}\n",
                          i, i);
  }
  return text;
}

// `tally` promises exactly one "tally: ..." line on stderr for trouble.
void ExpectOneTroubleLine(const CommandResult& r) {
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, ::testing::StartsWith("tally: "));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// ---------------------------------------------------------------------- load

// `cat rows.jsonl | tally load --file /dev/stdin` loaded 0 rows and exited
// 0: the check pass had read the pipe empty. Now the input is read once.
TEST(Operator, LoadFromAPipeLoadsEveryRow) {
  TempDir dir;
  auto node = StartNode("a", dir.path() + "/a");
  ASSERT_NE(node, nullptr);
  const std::string rows = dir.path() + "/rows.jsonl";
  WriteFile(rows, JsonlRows(0, 2500));

  for (const std::string file : {"/dev/stdin", "-"}) {
    const std::string keyspace = file == "-" ? "dash" : "stdin";
    const CommandResult r = RunCommand(
        {"/bin/bash", "-c",
         absl::StrFormat("cat '%s' | '%s' --node %s --keyspace %s load "
                         "--file %s --json --create-keyspace",
                         rows, TallyPath(), node->address(), keyspace, file)});
    EXPECT_EQ(r.exit_code, 0) << file << ": " << r.out << r.err;
    EXPECT_THAT(r.out, HasSubstr("\"rows\":2500")) << file;
    EXPECT_EQ(RowCount(node->address(), keyspace), 2500u) << file;
  }
}

// Read once means a bad line in a pipe cannot be found before the rows
// ahead of it are sent: the load stops there, exits 2, and says which line
// and how many rows went in — never exit 0 with fewer rows than read.
TEST(Operator, LoadStoppedByABadLineNamesTheLineAndTheRowsLoaded) {
  TempDir dir;
  auto node = StartNode("a", dir.path() + "/a");
  ASSERT_NE(node, nullptr);
  const std::string rows = dir.path() + "/rows.jsonl";
  WriteFile(rows, JsonlRows(0, 10) + "{\"key\": \"k\", \"valeu\": \"x\"}\n" +
                      JsonlRows(10, 10));
  const CommandResult r =
      RunCommand({"/bin/bash", "-c",
                  absl::StrFormat("'%s' --node %s load --file - < '%s'",
                                  TallyPath(), node->address(), rows)});
  ExpectOneTroubleLine(r);
  EXPECT_THAT(r.err, AllOf(HasSubstr("line 11"), HasSubstr("valeu"),
                           HasSubstr("10 rows")));
  EXPECT_EQ(RowCount(node->address(), "default"), 10u);

  // A file that cannot be opened is trouble too, and names itself.
  const CommandResult missing =
      RunTally({"--node", node->address(), "load", "--file",
                dir.path() + "/nope.jsonl"});
  ExpectOneTroubleLine(missing);
  EXPECT_THAT(missing.err, HasSubstr("nope.jsonl"));
  // A directory opens as an empty file: refused, not "loaded 0 rows".
  const CommandResult directory =
      RunTally({"--node", node->address(), "load", "--file", dir.path()});
  ExpectOneTroubleLine(directory);
  EXPECT_THAT(directory.err, HasSubstr("is a directory"));
}

// A load the node refused said "nothing was committed; some of the N rows
// sent may have been written": the node names what its earlier messages
// committed, so the client adds its doubt only for a call lost on the way.
TEST(Operator, LoadRefusedByTheNodeSaysOnlyWhatTheNodeCommitted) {
  TempDir dir;
  std::vector<std::string> flags = kNoSync;
  flags.insert(flags.end(), {"--max-keyspaces", "1"});
  auto node = NodeProcess::Start("a", dir.path() + "/a", flags);
  ASSERT_TRUE(node.ok()) << node.status();
  const std::string address = (*node)->address();
  ASSERT_EQ(RunTally({"--node", address, "put", "k", "v"}).exit_code, 0);
  const CommandResult r =
      RunTally({"--node", address, "--keyspace", "second", "load", "--count",
                "10", "--create-keyspace"});
  ExpectOneTroubleLine(r);
  EXPECT_THAT(r.err, HasSubstr("nothing was committed"));
  EXPECT_THAT(r.err, Not(HasSubstr("may have been written")));
}

// `--file -` read a failing standard input as an empty one: a directory on
// stdin, or a closed stdin, "loaded 0 rows" and exited 0. (A named file
// that is a directory was already refused.) A read error is trouble.
TEST(Operator, LoadFromAStdinThatCannotBeReadIsTrouble) {
  TempDir dir;
  auto node = StartNode("a", dir.path() + "/a");
  ASSERT_NE(node, nullptr);
  for (const std::string& redirect :
       std::vector<std::string>{"< '" + dir.path() + "'", "<&-"}) {
    const CommandResult r =
        RunCommand({"/bin/bash", "-c",
                    absl::StrFormat("'%s' --node %s load --file - %s",
                                    TallyPath(), node->address(), redirect)});
    ExpectOneTroubleLine(r);
    EXPECT_THAT(r.err, HasSubstr("standard input")) << redirect;
  }
  EXPECT_EQ(node->Stop(), 0);
}

// ------------------------------------------------------------- health checks

// Health answered only for the whole server (""): a probe that names the
// service (Kubernetes' gRPC probe, an Envoy health check) got NOT_FOUND.
TEST(Operator, HealthAnswersForTheServerAndEachServiceByName) {
  TempDir dir;
  auto node = StartNode("a", dir.path() + "/a");
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(HealthCheck(node->address(), ""), kServing);
  EXPECT_EQ(HealthCheck(node->address(), "tally.v1.Admin"), kServing);
  EXPECT_EQ(HealthCheck(node->address(), "tally.v1.Peer"), kServing);
  EXPECT_EQ(HealthCheck(node->address(), "tally.v1.Nothing"),
            absl::StrCat("error: ", grpc::StatusCode::NOT_FOUND));
  EXPECT_EQ(node->Stop(), 0);
}

// A node that starts to shut down says NOT_SERVING to whoever watches its
// health before its server stops; before, the watch just ended with the
// server, and a load balancer learnt of the shutdown from refused calls.
TEST(Operator, HealthTurnsNotServingWhenShutdownStarts) {
  TempDir dir;
  auto node = StartNode("a", dir.path() + "/a");
  ASSERT_NE(node, nullptr);
  for (const std::string service : {"", "tally.v1.Admin", "tally.v1.Peer"}) {
    SCOPED_TRACE(service);
    if (node == nullptr) node = StartNode("a", dir.path() + "/a");
    ASSERT_NE(node, nullptr);
    HealthWatch watch(node->address(), service);
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (watch.statuses().empty() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_EQ(watch.statuses(), std::vector<std::string>{kServing});
    EXPECT_EQ(node->Stop(), 0);
    node.reset();
    if (!watch.WaitDone(absl::Seconds(10))) {
      watch.Cancel();
      watch.WaitDone(absl::Seconds(10));
    }
    EXPECT_EQ(watch.statuses(),
              (std::vector<std::string>{kServing, kNotServing}));
  }
}

// --------------------------------------------------------- systemd readiness

// Listens where systemd would (NOTIFY_SOCKET, a datagram socket) and
// collects what the node tells it.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
    bound_ = fd_ >= 0 &&
             bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~NotifySocket() {
    if (fd_ >= 0) close(fd_);
  }
  bool bound() const { return bound_; }

  // The next datagram, or "" after `timeout`.
  std::string Next(absl::Duration timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) !=
        1) {
      return "";
    }
    char buf[4096];
    const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    return n > 0 ? std::string(buf, n) : "";
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool bound_ = false;
};

// Under systemd with Type=notify, tallyd says READY=1 once its store is
// open and it listens (with its address as STATUS), RELOADING=1 then
// READY=1 around a SIGHUP, and STOPPING=1 when it starts to shut down.
TEST(Operator, TallydTellsSystemdWhenItIsReadyReloadingAndStopping) {
  TempDir dir;
  NotifySocket notify(dir.path() + "/notify");
  ASSERT_TRUE(notify.bound());
  ASSERT_EQ(setenv("NOTIFY_SOCKET", (dir.path() + "/notify").c_str(), 1), 0);
  auto node = StartNode("a", dir.path() + "/a");
  unsetenv("NOTIFY_SOCKET");
  ASSERT_NE(node, nullptr);
  const std::string ready = notify.Next(absl::Seconds(10));
  EXPECT_THAT(ready, HasSubstr("READY=1"));
  EXPECT_THAT(ready, HasSubstr("STATUS=listening on " + node->address()));
  EXPECT_THAT(ready, HasSubstr(absl::StrCat("MAINPID=", node->pid())));

  ASSERT_EQ(kill(node->pid(), SIGHUP), 0);
  EXPECT_EQ(notify.Next(absl::Seconds(10)), "RELOADING=1");
  EXPECT_EQ(notify.Next(absl::Seconds(10)), "READY=1");

  EXPECT_EQ(node->Stop(), 0);
  EXPECT_THAT(notify.Next(absl::Seconds(10)), HasSubstr("STOPPING=1"));
}

// ----------------------------------------------------------- SIGHUP, version

// SIGHUP's default action ended tallyd (exit 129) without a log line; now
// it reloads (tests/logging_test.cc has what it reloads).
TEST(Operator, SighupReloadsAndNeverStopsTheNode) {
  TempDir dir;
  auto node = StartNode("a", dir.path() + "/a");
  ASSERT_NE(node, nullptr);
  ASSERT_EQ(kill(node->pid(), SIGHUP), 0);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (node->Log().find("SIGHUP") == std::string::npos &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_THAT(node->Log(), HasSubstr("SIGHUP: config reloaded"));
  // Still serving, and still stops cleanly.
  const CommandResult put =
      RunTally({"--node", node->address(), "put", "k", "v"});
  EXPECT_EQ(put.exit_code, 0) << put.err;
  EXPECT_EQ(node->Stop(), 0);
}

// Adding a node to a mesh used to take a restart of every node that was
// to list it. Now the peers of a running node change with SIGHUP: an added
// peer is followed and synced with at once, a removed one is dropped, and
// the node never stops serving (same process, no second start-up line). A
// reload that would change a role or add a source changes nothing.
TEST(Operator, SighupAddsAndRemovesPeersWithoutARestart) {
  TempDir dir;
  // B and C list nobody: rows reach A only through A's own sessions.
  auto b = StartNode("b", dir.path() + "/b");
  auto c = StartNode("c", dir.path() + "/c");
  ASSERT_TRUE(b != nullptr && c != nullptr);
  const std::string config = dir.path() + "/tallyd.conf";
  WriteFile(config, absl::StrCat("peer = ", b->address(), "\n"));
  auto a = NodeProcess::Start(
      "a", dir.path() + "/a",
      {"--config", config, "--sync-writes", "false", "--sync-interval", "1s"});
  ASSERT_TRUE(a.ok()) << a.status();
  auto a_client = Connect((*a)->address());
  auto has = [&](const std::string& key) {
    return a_client->Get("default", key).ok();
  };
  auto eventually = [](const std::function<bool()>& condition) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (!condition()) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return true;
  };
  auto put = [](NodeProcess& node, const std::string& key) {
    return RunTally({"--node", node.address(), "put", key, "v"}).exit_code;
  };
  ASSERT_EQ(put(*b, "from-b-1"), 0);
  ASSERT_EQ(put(*c, "from-c-1"), 0);
  ASSERT_TRUE(eventually([&] { return has("from-b-1"); })) << (*a)->Log();
  EXPECT_FALSE(has("from-c-1"));

  // C joins A's peers, B leaves them.
  WriteFile(config, absl::StrCat("peer = ", c->address(), "\n"));
  ASSERT_EQ(kill((*a)->pid(), SIGHUP), 0);
  ASSERT_TRUE(eventually([&] { return has("from-c-1"); })) << (*a)->Log();
  EXPECT_THAT((*a)->Log(),
              HasSubstr(absl::StrCat("peers=\"added [", c->address(),
                                     "] removed [", b->address(), "]\"")));
  absl::StatusOr<v1::StatusResponse> status = a_client->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->peers_size(), 1);
  EXPECT_EQ(status->peers(0).address(), c->address());
  EXPECT_GE(status->sessions_ok(), 1u);  // B's sessions still counted
  // The change feed from C is followed too: a write on C arrives within a
  // second, well before a second session would be due... and B's no more.
  ASSERT_EQ(put(*c, "from-c-2"), 0);
  ASSERT_EQ(put(*b, "from-b-2"), 0);
  ASSERT_TRUE(eventually([&] { return has("from-c-2"); })) << (*a)->Log();
  absl::SleepFor(absl::Seconds(3));
  EXPECT_FALSE(has("from-b-2"));

  // A source cannot be added by a reload: nothing changes.
  WriteFile(config, absl::StrCat("peer = ", b->address(), ",role=source\n"));
  ASSERT_EQ(kill((*a)->pid(), SIGHUP), 0);
  ASSERT_TRUE(eventually([&] {
    return absl::StrContains((*a)->Log(), "SIGHUP: the peers were not changed");
  })) << (*a)->Log();
  status = a_client->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->peers_size(), 1);

  // One process and one start all along.
  const std::string log = (*a)->Log();
  size_t starts = 0;
  for (size_t at = log.find("listening on"); at != std::string::npos;
       at = log.find("listening on", at + 1)) {
    ++starts;
  }
  EXPECT_EQ(starts, 1u) << log;
  EXPECT_EQ((*a)->Stop(), 0);
  EXPECT_EQ(b->Stop(), 0);
  EXPECT_EQ(c->Stop(), 0);
}

// SIGHUP sets the node's repair bandwidth (node-bandwidth)
// without a restart. Status and /metrics read the rate from the limiter the
// sessions share, not from the config, so they show the change took; and
// the reload no longer names it among the settings that need a restart.
TEST(Operator, SighupReloadsTheNodeBandwidth) {
  TempDir dir;
  const std::string config = dir.path() + "/tallyd.conf";
  WriteFile(config, "node-bandwidth = 5\n");
  auto node = NodeProcess::Start("a", dir.path() + "/a",
                                 {"--config", config, "--sync-writes", "false",
                                  "--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(node.ok()) << node.status();
  const int port = MetricsPort(**node);
  ASSERT_GT(port, 0) << (*node)->Log();
  EXPECT_THAT(Scrape(port),
              HasSubstr("\ntally_node_bandwidth_bytes_per_second 5000000\n"));
  // Waits for the `n`-th reload line.
  const auto reloaded = [&](int n) {
    const absl::Time deadline = absl::Now() + absl::Seconds(15);
    while (absl::Now() < deadline) {
      const std::string log = (*node)->Log();
      int lines = 0;
      for (size_t at = log.find("SIGHUP: config reloaded");
           at != std::string::npos;
           at = log.find("SIGHUP: config reloaded", at + 1)) {
        ++lines;
      }
      if (lines >= n) return true;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  };

  WriteFile(config, "node-bandwidth = 0.5\nsync-interval = 45s\n");
  ASSERT_EQ(kill((*node)->pid(), SIGHUP), 0);
  ASSERT_TRUE(reloaded(1)) << (*node)->Log();
  EXPECT_THAT((*node)->Log(),
              HasSubstr("node_bandwidth=5MB/s->0.5MB/s need_restart="
                        "sync-interval\n"));
  EXPECT_THAT(Scrape(port),
              HasSubstr("\ntally_node_bandwidth_bytes_per_second 500000\n"));
  absl::StatusOr<v1::StatusResponse> status =
      Connect((*node)->address())->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->node_bandwidth_bytes_per_second(), 0.5e6);
  EXPECT_THAT(RunTally({"status", "--node", (*node)->address()}).out,
              HasSubstr("node bandwidth  0.5 MB/s over all repairs"));

  // Lifted: 0 is unlimited, as at start.
  WriteFile(config, "node-bandwidth = 0\n");
  ASSERT_EQ(kill((*node)->pid(), SIGHUP), 0);
  ASSERT_TRUE(reloaded(2)) << (*node)->Log();
  EXPECT_THAT((*node)->Log(),
              HasSubstr("node_bandwidth=0.5MB/s->unlimited need_restart="));
  EXPECT_THAT(Scrape(port),
              HasSubstr("\ntally_node_bandwidth_bytes_per_second 0\n"));
  EXPECT_THAT(RunTally({"status", "--node", (*node)->address()}).out,
              HasSubstr("node bandwidth  unlimited"));
  EXPECT_EQ((*node)->Stop(), 0);
}

// `tallyd --version` said "needs a value"; `tally --version` printed
// "Debug build (NDEBUG not #defined)".
TEST(Operator, VersionPrintsTheProjectVersionAndBuild) {
  const CommandResult tallyd = RunCommand({TallydPath(), "--version"});
  EXPECT_EQ(tallyd.exit_code, 0) << tallyd.err;
  EXPECT_EQ(tallyd.out, node::VersionText("tallyd") + "\n");
  const CommandResult tally = RunTally({"--version"});
  EXPECT_EQ(tally.exit_code, 0) << tally.err;
  EXPECT_EQ(tally.out, node::VersionText("tally") + "\n");
  EXPECT_THAT(tally.out, AllOf(HasSubstr(std::string(node::ProjectVersion())),
                               Not(HasSubstr("NDEBUG"))));
}

// ----------------------------------------------------------- codes and flags

// absl reported a missing --flagfile itself, with exit 1 ("absent").
TEST(Operator, UnreadableFlagfileExitsTwo) {
  TempDir dir;
  const CommandResult missing =
      RunTally({"--flagfile=" + dir.path() + "/nope", "get", "k"});
  ExpectOneTroubleLine(missing);
  EXPECT_THAT(missing.err, HasSubstr("nope"));

  const std::string bad = dir.path() + "/bad.flags";
  WriteFile(bad, "--json\n--no-such-flag=1\n");
  const CommandResult unknown = RunTally({"--flagfile", bad, "get", "k"});
  ExpectOneTroubleLine(unknown);
  EXPECT_THAT(unknown.err,
              AllOf(HasSubstr("unknown flag"), HasSubstr("such_flag")));
}

TEST(Operator, FlagfileFlagsApply) {
  TempDir dir;
  auto node = StartNode("a", dir.path() + "/a");
  ASSERT_NE(node, nullptr);
  const std::string flags = dir.path() + "/tally.flags";
  // absl's format: one flag a line, `#` comments, blank lines skipped.
  WriteFile(flags, absl::StrFormat("# the node\n--node=%s\n\n  --keyspace=users"
                                   "\n",
                                   node->address()));
  ASSERT_EQ(
      RunTally({"--flagfile=" + flags, "put", "k", "v", "--create-keyspace"})
          .exit_code,
      0);
  const CommandResult got = RunTally({"--flagfile=" + flags, "get", "k"});
  EXPECT_EQ(got.exit_code, 0) << got.err;
  EXPECT_EQ(got.out, "v\n");
  EXPECT_EQ(RowCount(node->address(), "users"), 1u);
}

// repair exited 0 after printing "A and B still differ". A tombstone older
// than what the other node has purged is one repair cannot move (the other
// node refuses it, so that a peer that has not purged yet cannot bring it
// back), so the nodes still differ afterwards, deterministically. (Two rows
// with the same version and different content used to serve here; the tie
// rule now settles those: the higher row digest wins on both sides.)
// Runs on A and from the tool (tests/diff_paths.h).
class OperatorRepair : public ::testing::TestWithParam<DiffPath> {};

TEST_P(OperatorRepair, RepairThatLeavesTheNodesDifferentExitsOne) {
  TempDir dir;
  auto a = StartNode("a", dir.path() + "/a");
  // b purges every tombstone as soon as it arrived (it has no peers).
  auto started =
      NodeProcess::Start("b", dir.path() + "/b",
                         {"--sync-writes", "false", "--tombstone-min-age",
                          "1ms", "--maintenance-interval", "50ms"});
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<NodeProcess> b = std::move(*started);
  ASSERT_NE(a, nullptr);
  const uint64_t an_hour_ago =
      tree::HlcTimestamp::FromParts(
          absl::ToUnixMillis(absl::Now() - absl::Hours(1)), 0)
          .raw();
  const auto tombstone = [&](const std::string& key) {
    v1::Row row;
    row.set_key(key);
    row.set_deleted(true);
    row.mutable_version()->set_hlc(an_hour_ago);
    row.mutable_version()->set_origin("node-x");
    return row;
  };
  // Once b has purged a tombstone, its horizon is past the hour-old ones.
  auto probe = Connect(b->address())
                   ->PushRows("default", v1::APPLY_MODE_LAST_WRITER_WINS,
                              {tombstone("probe")}, {});
  ASSERT_TRUE(probe.ok()) << probe.status();
  // (Refused already: a purge pass ran first, and its horizon is past.)
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (probe->applied() == 1) {
    auto status = Connect(b->address())->Status();
    if (status.ok() && status->tombstones_purged() >= 1) break;
    ASSERT_LT(absl::Now(), deadline) << "b never purged its tombstone";
    absl::SleepFor(absl::Milliseconds(50));
  }
  auto pushed = Connect(a->address())
                    ->PushRows("default", v1::APPLY_MODE_LAST_WRITER_WINS,
                               {tombstone("purged-on-b")}, {});
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  ASSERT_EQ(pushed->applied(), 1u);
  const CommandResult text =
      RunDiffCommand(GetParam(), {"repair", a->address(), b->address()});
  EXPECT_THAT(text.out, HasSubstr("still differ"));
  EXPECT_EQ(text.exit_code, 1) << text.out << text.err;
  const CommandResult json = RunDiffCommand(
      GetParam(), {"repair", a->address(), b->address(), "--json"});
  EXPECT_THAT(json.out, HasSubstr("\"equal\":false"));
  // Embedded stores: no application changes rows under a repair.
  EXPECT_THAT(json.out, HasSubstr("\"rows_changed_during_repair\":0"));
  EXPECT_EQ(json.exit_code, 1) << json.out << json.err;
  // A dry run changes nothing: differences found mean they still differ.
  const CommandResult dry = RunDiffCommand(
      GetParam(), {"repair", a->address(), b->address(), "--dry-run"});
  EXPECT_EQ(dry.exit_code, 1) << dry.out << dry.err;

  // Equal after the repair: 0, as before.
  ASSERT_EQ(RunTally({"--node", a->address(), "put", "k", "v"}).exit_code, 0);
  const CommandResult other =
      RunTally({"--keyspace", "other", "--node", a->address(), "put", "k", "v",
                "--create-keyspace"});
  ASSERT_EQ(other.exit_code, 0) << other.err;
  const CommandResult equal = RunDiffCommand(
      GetParam(),
      {"--keyspace", "other", "repair", a->address(), b->address()});
  EXPECT_THAT(equal.out, HasSubstr("A and B are equal"));
  EXPECT_EQ(equal.exit_code, 0) << equal.out << equal.err;
  EXPECT_EQ(
      RunDiffCommand(GetParam(), {"--keyspace", "other", "repair", a->address(),
                                  b->address(), "--dry-run"})
          .exit_code,
      0);
}

INSTANTIATE_TEST_SUITE_P(BothPaths, OperatorRepair, kBothDiffPaths,
                         DiffPathName);

// `--sync-interval nan|inf|1e30` were accepted as "never", and
// `--max-clock-skew inf` turned the guard off; `--config DIR` said
// "--name is required".
TEST(Operator, TallydRefusesNonFiniteDurationsAndADirectoryAsConfig) {
  TempDir dir;
  for (const auto& [flag, value] :
       std::vector<std::pair<std::string, std::string>>{
           {"--sync-interval", "nan"},
           {"--sync-interval", "inf"},
           {"--sync-interval", "1e30"},
           {"--max-clock-skew", "inf"}}) {
    // A node that starts anyway would run until killed: a short timeout.
    const CommandResult r =
        RunCommand({TallydPath(), "--name", "a", "--data-dir",
                    dir.path() + "/a", flag, value},
                   absl::Seconds(10));
    EXPECT_EQ(r.exit_code, 2) << flag << " " << value << ": " << r.err;
    EXPECT_THAT(r.err, AllOf(HasSubstr(flag), HasSubstr(value)));
  }
  const CommandResult config =
      RunCommand({TallydPath(), "--config", dir.path()}, absl::Seconds(10));
  EXPECT_EQ(config.exit_code, 2) << config.err;
  EXPECT_THAT(config.err, HasSubstr("is a directory"));
  EXPECT_THAT(config.err, Not(HasSubstr("--name is required")));
}

// A typo in --keyspace (`usres` for `users`) made a keyspace on the node,
// and sessions carried it to every node of the mesh, for good, with no way
// to list it. Now a write to a keyspace the node lacks is refused naming
// its keyspaces, unless --create-keyspace; `tally keyspaces` lists them.
TEST(Operator, AWriteToAnAbsentKeyspaceIsRefusedUnlessCreatedOnPurpose) {
  TempDir dir;
  auto node = NodeProcess::Start("a", dir.path(), {"--sync-writes", "false"});
  ASSERT_TRUE(node.ok()) << node.status();
  const std::string at = (*node)->address();
  ASSERT_EQ(RunTally({"--node", at, "put", "k", "v"}).exit_code, 0);
  ASSERT_EQ(RunTally({"--node", at, "--keyspace", "users", "put", "k", "v",
                      "--create-keyspace"})
                .exit_code,
            0);
  for (const std::vector<std::string>& write :
       {std::vector<std::string>{"put", "k", "v"},
        std::vector<std::string>{"del", "k"},
        std::vector<std::string>{"load", "--count", "3"}}) {
    std::vector<std::string> args = {"--node", at, "--keyspace", "usres"};
    args.insert(args.end(), write.begin(), write.end());
    const CommandResult refused = RunTally(args);
    EXPECT_EQ(refused.exit_code, 2) << write[0];
    EXPECT_THAT(refused.err, HasSubstr("keyspace 'usres' is not on node " + at +
                                       " (its keyspaces: default, users)"));
    EXPECT_THAT(refused.err, HasSubstr("--create-keyspace"));
  }
  const CommandResult listed = RunTally({"--node", at, "keyspaces"});
  EXPECT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_THAT(listed.out, HasSubstr("KEYSPACE"));
  EXPECT_THAT(listed.out, HasSubstr("users"));
  EXPECT_THAT(listed.out, Not(HasSubstr("usres")));
  const CommandResult json = RunTally({"--node", at, "keyspaces", "--json"});
  EXPECT_THAT(json.out, HasSubstr(R"("keyspace":"users","rows":1,"depth":)"));
  EXPECT_EQ((*node)->Stop(), 0);
}

// File descriptors used up by idle connections to the gRPC port: gRPC
// (1.51) then stops accepting for good ("Failed accept4: Too many open
// files") while the node looks healthy. Before the fix the node stayed up
// and no client or peer ever reached it again; now it finds its listener
// stuck and stops with exit 1 (its service manager restarts it), and a
// restart serves again.
TEST(Operator, AListenerThatStopsAcceptingStopsTheNodeForARestart) {
  TempDir dir;
  const std::string limited = dir.path() + "/tallyd-with-64-files";
  {
    std::ofstream script(limited);
    script << "#!/bin/sh\nulimit -n 64\nexec '" << TallydPath() << "' \"$@\"\n";
  }
  ASSERT_EQ(chmod(limited.c_str(), 0755), 0);
  const std::vector<std::string> flags = {"--sync-writes", "false",
                                          "--listener-check-interval", "500ms"};
  auto node = NodeProcess::Start("a", dir.path() + "/data", flags,
                                 "127.0.0.1:0", limited);
  ASSERT_TRUE(node.ok()) << node.status();
  const std::string port =
      (*node)->address().substr((*node)->address().rfind(':') + 1);
  std::vector<int> idle;
  for (int i = 0; i < 100; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(std::stoi(port)));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    idle.push_back(fd);
  }
  absl::SleepFor(absl::Seconds(1));
  for (int fd : idle) close(fd);
  // Stopped by itself within the checks (6 x 500 ms) and the stop.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while ((*node)->Log().find("stopped: the gRPC") == std::string::npos &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(200));
  }
  EXPECT_THAT((*node)->Log(), HasSubstr("Failed accept4"));
  EXPECT_THAT((*node)->Log(),
              HasSubstr("the gRPC listener stopped accepting connections"));
  EXPECT_EQ((*node)->Stop(), 1) << (*node)->Log();

  auto again = NodeProcess::Start("a", dir.path() + "/data", flags,
                                  "127.0.0.1:0", limited);
  ASSERT_TRUE(again.ok()) << again.status();
  const CommandResult status =
      RunTally({"--node", (*again)->address(), "status"});
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_EQ((*again)->Stop(), 0);
}

}  // namespace
}  // namespace tally
