// What tallyd logs, read as an operator's log shipper reads it: JSON lines that
// all parse, gRPC's own lines in tally's format, a level and format that SIGHUP
// reloads, and a peer that stays down logged once, not at every session and
// reconnect.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "support/process.h"
#include "support/temp_dir.h"
#include "tests/test_certs.h"

namespace tally {
namespace {

using ::tally::testing::CommandResult;
using ::tally::testing::FreeLoopbackAddress;
using ::tally::testing::NodeProcess;
using ::tally::testing::RunTally;
using ::tally::testing::TempDir;
using ::testing::HasSubstr;

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// Waits until `node`'s log holds `text` (true) or 15 s pass (false).
bool WaitForLog(const NodeProcess& node, const std::string& text) {
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  while (absl::Now() < deadline) {
    if (absl::StrContains(node.Log(), text)) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

int CountLines(const std::string& log, const std::string& text) {
  int n = 0;
  for (const std::string& line : Lines(log)) n += absl::StrContains(line, text);
  return n;
}

TEST(Logging, JsonFormatWritesOneObjectPerLine) {
  TempDir dir;
  auto node = NodeProcess::Start(
      "a", dir.path() + "/a",
      {"--sync-writes", "false", "--log-format", "json", "--peer",
       FreeLoopbackAddress(), "--sync-interval", "200ms"});
  ASSERT_TRUE(node.ok()) << node.status();
  // A peer that is down, so that warnings with errors are written too.
  ASSERT_TRUE(WaitForLog(**node, "peer down"));
  const CommandResult put =
      RunTally({"--node", (*node)->address(), "put", "k", "v"});
  EXPECT_EQ(put.exit_code, 0) << put.err;
  EXPECT_EQ((*node)->Stop(), 0);
  const std::vector<std::string> lines = Lines((*node)->Log());
  ASSERT_GE(lines.size(), 4u);
  bool listening = false;
  for (const std::string& line : lines) {
    nlohmann::json parsed;
    ASSERT_NO_THROW(parsed = nlohmann::json::parse(line)) << line;
    EXPECT_TRUE(parsed.contains("time")) << line;
    EXPECT_TRUE(parsed.contains("level")) << line;
    EXPECT_TRUE(parsed.contains("msg")) << line;
    if (absl::StrContains(parsed["msg"].get<std::string>(), "listening on")) {
      listening = true;
      EXPECT_TRUE(parsed["peers"].is_number()) << line;
    }
    if (parsed["msg"] == "peer down") {
      EXPECT_EQ(parsed["level"], "warning");
      EXPECT_THAT(parsed["error"].get<std::string>(), HasSubstr("UNAVAILABLE"));
    }
  }
  EXPECT_TRUE(listening);
}

// A client that speaks plaintext to a TLS port makes gRPC log the failed
// handshake; that line comes out in tally's JSON, not as gRPC's own
// "E1203 05:14:10.123 ..." line.
// Why tallyd did not start is a JSON line under --log-format json (it was
// "tallyd: ..." text, which a shipper reading JSON drops), whether the
// config was refused or the store could not open; text stays text.
TEST(Logging, ARefusalAtStartIsAJsonLineUnderJson) {
  TempDir dir;
  const std::string file = dir.path() + "/not-a-dir";
  WriteFile(file, "x");
  const std::vector<std::vector<std::string>> refused = {
      // The config: no --name.
      {::tally::testing::TallydPath(), "--data-dir", dir.path() + "/d",
       "--log-format", "json"},
      // The store: its directory is a file.
      {::tally::testing::TallydPath(), "--name", "n", "--data-dir", file,
       "--listen", FreeLoopbackAddress(), "--log-format", "json"},
  };
  for (const std::vector<std::string>& argv : refused) {
    const CommandResult r = ::tally::testing::RunCommand(argv);
    EXPECT_NE(r.exit_code, 0) << r.err;
    // Every line is JSON (a store that did not open logs its shutdown
    // first); the last says why.
    const std::vector<std::string> lines = Lines(r.err);
    ASSERT_FALSE(lines.empty()) << r.err;
    for (const std::string& line : lines) {
      EXPECT_TRUE(nlohmann::json::parse(line, nullptr, false).is_object())
          << line;
    }
    const nlohmann::json j =
        nlohmann::json::parse(lines.back(), nullptr, false);
    ASSERT_TRUE(j.is_object()) << lines.back();
    EXPECT_EQ(j["level"], "error") << lines.back();
    EXPECT_EQ(j["msg"], "tallyd did not start") << lines.back();
    EXPECT_FALSE(j["error"].get<std::string>().empty()) << lines.back();
  }
  const CommandResult text = ::tally::testing::RunCommand(
      {::tally::testing::TallydPath(), "--data-dir", dir.path() + "/d"});
  EXPECT_THAT(text.err, HasSubstr("tallyd: --name is required"));
}

TEST(Logging, GrpcsOwnLinesComeThroughTallysLogger) {
  TempDir dir;
  auto ca = testing::TestCa::Create(dir.path(), "ca");
  ASSERT_TRUE(ca.ok()) << ca.status();
  auto cert = ca->Issue("127.0.0.1");
  ASSERT_TRUE(cert.ok()) << cert.status();
  auto node =
      NodeProcess::Start("a", dir.path() + "/a",
                         {"--sync-writes", "false", "--log-format", "json",
                          "--tls-cert", cert->cert, "--tls-key", cert->key});
  ASSERT_TRUE(node.ok()) << node.status();
  // Plaintext HTTP/2 through the CLI: its TLS-less call fails the
  // server's handshake.
  const CommandResult plain =
      RunTally({"--node", (*node)->address(), "status"});
  EXPECT_NE(plain.exit_code, 0);
  ASSERT_TRUE(WaitForLog(**node, "grpc: "));
  EXPECT_EQ((*node)->Stop(), 0);
  int grpc_lines = 0;
  for (const std::string& line : Lines((*node)->Log())) {
    nlohmann::json parsed;
    ASSERT_NO_THROW(parsed = nlohmann::json::parse(line)) << line;
    const std::string msg = parsed["msg"];
    if (absl::StartsWith(msg, "grpc: ")) {
      ++grpc_lines;
      EXPECT_TRUE(parsed["file"].is_string()) << line;
      EXPECT_TRUE(parsed["line"].is_number()) << line;
    }
  }
  EXPECT_GE(grpc_lines, 1);
}

TEST(Logging, SighupReloadsTheLevelAndFormatAndKeepsThemOnABadConfig) {
  TempDir dir;
  const std::string config = dir.path() + "/tallyd.conf";
  WriteFile(config, "log-level = info\nlog-format = text\n");
  auto node = NodeProcess::Start(
      "a", dir.path() + "/a", {"--config", config, "--sync-writes", "false"});
  ASSERT_TRUE(node.ok()) << node.status();

  WriteFile(config,
            "log-level = debug\nlog-format = json\nsync-interval = 45s\n");
  ASSERT_EQ(kill((*node)->pid(), SIGHUP), 0);
  ASSERT_TRUE(WaitForLog(**node, "SIGHUP: config reloaded"));
  // From the reload line on, every line is JSON.
  std::string log = (*node)->Log();
  const std::vector<std::string> lines = Lines(log);
  size_t reload = 0;
  while (reload < lines.size() &&
         !absl::StrContains(lines[reload], "config reloaded")) {
    ++reload;
  }
  ASSERT_LT(reload, lines.size());
  const nlohmann::json reloaded = nlohmann::json::parse(lines[reload]);
  EXPECT_EQ(reloaded["log_level"], "info->debug");
  EXPECT_EQ(reloaded["log_format"], "text->json");
  // What changed and waits for a restart is named.
  EXPECT_EQ(reloaded["need_restart"], "sync-interval");

  // A config that no longer validates: an error, nothing changes, the node
  // keeps serving.
  WriteFile(config, "log-level = loud\n");
  ASSERT_EQ(kill((*node)->pid(), SIGHUP), 0);
  ASSERT_TRUE(WaitForLog(**node, "does not validate"));
  const CommandResult put =
      RunTally({"--node", (*node)->address(), "put", "k", "v"});
  EXPECT_EQ(put.exit_code, 0) << put.err;
  EXPECT_EQ((*node)->Stop(), 0);
  log = (*node)->Log();
  const std::vector<std::string> after = Lines(log);
  ASSERT_GT(after.size(), reload);
  for (size_t i = reload; i < after.size(); ++i) {
    EXPECT_NO_THROW(nlohmann::json::parse(after[i])) << after[i];
  }
  EXPECT_THAT(log, HasSubstr("\"level\":\"error\""));
  EXPECT_THAT(log, HasSubstr("debug, info, warning, error"));
}

// A peer down for a while: before, every session (5 a second here) and
// every feed reconnect logged a line. Now one line per link when it goes
// down and one when it is back.
TEST(Logging, APeerThatStaysDownIsLoggedOnceAndWhenItIsBack) {
  TempDir dir;
  const std::string peer_address = FreeLoopbackAddress();
  auto a = NodeProcess::Start("a", dir.path() + "/a",
                              {"--sync-writes", "false", "--peer", peer_address,
                               "--sync-interval", "200ms"});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(WaitForLog(**a, "link=feed"));
  ASSERT_TRUE(WaitForLog(**a, "link=sessions"));
  // Long enough for ~15 sessions and several feed reconnects.
  absl::SleepFor(absl::Seconds(3));
  std::string log = (*a)->Log();
  EXPECT_EQ(CountLines(log, peer_address), 2) << log;
  EXPECT_EQ(CountLines(log, "peer down peer=" + peer_address + " link=feed"), 1)
      << log;
  EXPECT_EQ(
      CountLines(log, "peer down peer=" + peer_address + " link=sessions"), 1)
      << log;

  auto b = NodeProcess::Start("b", dir.path() + "/b",
                              {"--sync-writes", "false"}, peer_address);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(
      WaitForLog(**a, "peer back up peer=" + peer_address + " link=sessions"));
  ASSERT_TRUE(
      WaitForLog(**a, "peer back up peer=" + peer_address + " link=feed"));
  log = (*a)->Log();
  EXPECT_THAT(log, HasSubstr("down_for="));
  EXPECT_EQ((*b)->Stop(), 0);
  EXPECT_EQ((*a)->Stop(), 0);
}

// Sessions that find the nodes equal: before, each logged an INFO line per
// keyspace (418 lines in 22 minutes from three peers); now they are DEBUG
// lines, summed up at INFO every 10 minutes, while a session that moves
// rows is logged at INFO as before.
TEST(Logging, QuietSessionsAreSummedUpAndEventfulOnesLogged) {
  TempDir dir;
  const std::string address_b = FreeLoopbackAddress();
  auto b = NodeProcess::Start("b", dir.path() + "/b",
                              {"--sync-writes", "false"}, address_b);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(RunTally({"--node", address_b, "put", "k", "v"}).exit_code, 0);
  auto a = NodeProcess::Start("a", dir.path() + "/a",
                              {"--sync-writes", "false", "--peer", address_b,
                               "--sync-interval", "200ms"});
  ASSERT_TRUE(a.ok()) << a.status();
  // The first session brings the row: eventful, at INFO.
  ASSERT_TRUE(WaitForLog(**a, "rows_received=1"));
  // ~10 more sessions with nothing to do.
  absl::SleepFor(absl::Seconds(2));
  const std::string log = (*a)->Log();
  EXPECT_EQ(CountLines(log, "INFO session peer="), 1) << log;
  EXPECT_EQ(CountLines(log, "sessions quiet"), 0) << log;
  EXPECT_EQ((*a)->Stop(), 0);
  EXPECT_EQ((*b)->Stop(), 0);
}

}  // namespace
}  // namespace tally
