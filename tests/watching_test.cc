// Multi-process tests of what a node tells its operator about its sessions:
// the peer roles it refuses at start, and the rows erased, conflicts and
// rows sent that `tally status` and /metrics report.
#include <httplib.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "node/client/client.h"
#include "node/sync/repair_heat.h"
#include "storage/write_request.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "tests/node_connect.h"
#include "tests/node_metrics.h"
#include "tests/node_under_test.h"
#include "tests/wait_for.h"
#include "tree/digest.h"
#include "tree/hlc.h"
#include "tree/token.h"

namespace tally {
namespace {

using ::tally::testing::CommandResult;
using ::tally::testing::Connect;
using ::tally::testing::FreeLoopbackAddress;
using ::tally::testing::MetricsPort;
using ::tally::testing::NodeProcess;
using ::tally::testing::Rows;
using ::tally::testing::RunCommand;
using ::tally::testing::RunTally;
using ::tally::testing::Scrape;
using ::tally::testing::StartNode;
using ::tally::testing::Status;
using ::tally::testing::TallydPath;
using ::tally::testing::TempDir;
using ::tally::testing::WaitFor;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kKeyspace[] = "default";

bool Has(const std::string& address, const std::string& key) {
  return Connect(address)->Get(kKeyspace, key).ok();
}

// The README's first example, `--peer X --peer
// Y,role=source`, flapped forever: every interval the source's session
// erased the rows X brought and X's session brought them back. The
// combination is refused at start, with the way out in the message. (On
// the old code tallyd ran, and was killed at the timeout.)
TEST(Watching, ReadmeFirstExampleFlapsForeverIsRefusedAtStart) {
  TempDir dir;
  const std::string x = FreeLoopbackAddress();
  const std::string y = FreeLoopbackAddress();
  const CommandResult refused =
      RunCommand({TallydPath(), "--name", "eu-west/db-3", "--data-dir",
                  dir.path(), "--listen", "127.0.0.1:0", "--peer", x, "--peer",
                  y + ",role=source", "--sync-interval", "300ms"},
                 absl::Seconds(10));
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_THAT(refused.err, HasSubstr(y + " is role=source"));
  EXPECT_THAT(refused.err, HasSubstr("two-way from peer " + x));
  EXPECT_THAT(refused.err, HasSubstr("only --peer"));
}

// The README's example as it now reads: a and b peer two-way, c is a's
// copy. Rows written anywhere but c reach c and stay; a row written on c
// is erased once, and c's status and metrics say so; over several
// intervals nothing is erased again (the flap is gone).
TEST(Watching, ErasedRowsShowInStatusAndMetricsAndStopRising) {
  TempDir dir_a, dir_b, dir_c;
  auto a = StartNode("node-a", dir_a.path(), {"--sync-interval", "300ms"});
  ASSERT_TRUE(a);
  auto b = StartNode("node-b", dir_b.path(),
                     {"--sync-interval", "300ms", "--peer", a->address()});
  ASSERT_TRUE(b);
  auto c = StartNode(
      "node-c", dir_c.path(),
      {"--sync-interval", "300ms", "--peer", a->address() + ",role=source",
       "--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(c);
  const int port = MetricsPort(*c);
  ASSERT_GT(port, 0) << c->Log();

  ASSERT_TRUE(Connect(b->address())->Put(kKeyspace, "from-b", "v").ok());
  ASSERT_TRUE(Connect(a->address())->Put(kKeyspace, "from-a", "v").ok());
  ASSERT_TRUE(Connect(c->address())->Put(kKeyspace, "stray", "v").ok());
  ASSERT_TRUE(WaitFor([&] {
    return Has(c->address(), "from-b") && Has(c->address(), "from-a") &&
           !Has(c->address(), "stray");
  })) << c->Log();
  ASSERT_TRUE(WaitFor([&] { return Status(c->address()).rows_erased() == 1; }));

  // Four sessions later: still one, and c still has every row.
  const v1::StatusResponse erased = Status(c->address());
  ASSERT_EQ(erased.peers_size(), 1);
  const uint64_t sessions = erased.peers(0).sessions_ok();
  ASSERT_TRUE(WaitFor([&] {
    return Status(c->address()).peers(0).sessions_ok() >= sessions + 4;
  }));
  const v1::StatusResponse later = Status(c->address());
  EXPECT_EQ(later.rows_erased(), 1u);
  EXPECT_EQ(later.peers(0).rows_erased(), 1u);
  EXPECT_TRUE(Has(c->address(), "from-b"));
  EXPECT_EQ(Rows(c->address()), 2u);

  const CommandResult json =
      RunTally({"status", "--node", c->address(), "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_THAT(json.out, HasSubstr(R"("rows_erased":1,"conflicts":0)"));
  const CommandResult text = RunTally({"status", "--node", c->address()});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("(1 rows erased, 0 conflicts)"));
  EXPECT_THAT(text.out, HasSubstr("ROWS IN/OUT  ERASED  CONFLICTS"));
  const std::string metrics = Scrape(port);
  EXPECT_THAT(metrics, HasSubstr("\ntally_rows_erased_total 1\n"));
  EXPECT_THAT(metrics,
              HasSubstr(absl::StrCat("\ntally_peer_rows_erased_total{peer=\"",
                                     a->address(), "\"} 1\n")));
  EXPECT_EQ(c->Stop(), 0);
  EXPECT_EQ(b->Stop(), 0);
  EXPECT_EQ(a->Stop(), 0);
}

// Conflicts (equal versions, different content) were only in a log line.
// The tie rule now settles them (the higher row digest wins on both nodes,
// whether the feed or a session brings the other row first): the node that
// took the other row counts it in status, JSON and metrics.
TEST(Watching, ConflictsShowInStatusAndMetrics) {
  TempDir dir_a, dir_b;
  auto b = StartNode("node-b", dir_b.path());
  ASSERT_TRUE(b);
  auto a = StartNode("node-a", dir_a.path(),
                     {"--sync-interval", "300ms", "--peer", b->address(),
                      "--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(a);
  const int port = MetricsPort(*a);
  ASSERT_GT(port, 0) << a->Log();
  // The same version on both nodes with different values: what a bug or a
  // restored backup in another origin's name can leave, and what a first
  // scan's bootstrap version gives two replicas that differ.
  v1::Row row;
  row.set_key("twin");
  const tree::Version version{
      tree::HlcTimestamp::FromParts(absl::ToUnixMillis(absl::Now()), 7),
      "elsewhere"};
  row.mutable_version()->set_hlc(version.timestamp.raw());
  row.mutable_version()->set_origin(version.origin);
  // Values such that b's row wins the tie, so that a (the node with the
  // metrics) is the one that replaces its row.
  std::string value_a = "one";
  std::string value_b;
  for (int n = 0;; ++n) {
    value_b = absl::StrCat("two-", n);
    if (storage::CompareRows(
            version,
            tree::RowDigest(kKeyspace, "twin", version, false, value_b),
            version,
            tree::RowDigest(kKeyspace, "twin", version, false, value_a)) > 0) {
      break;
    }
  }
  for (const auto& [node, value] :
       {std::pair{a.get(), value_a}, std::pair{b.get(), value_b}}) {
    row.set_value(value);
    auto pushed =
        Connect(node->address())
            ->PushRows(kKeyspace, v1::APPLY_MODE_LAST_WRITER_WINS, {row}, {});
    ASSERT_TRUE(pushed.ok()) << pushed.status();
    ASSERT_EQ(pushed->applied(), 1u);
  }
  ASSERT_TRUE(
      WaitFor([&] { return Status(a->address()).ties_resolved() >= 1; }));
  auto got = Connect(a->address())->Get(kKeyspace, "twin");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->row().value(), value_b);
  const std::string metrics = Scrape(port);
  EXPECT_THAT(metrics, HasSubstr("\ntally_ties_resolved_total 1\n")) << metrics;
  const CommandResult json =
      RunTally({"status", "--node", a->address(), "--json"});
  EXPECT_THAT(json.out, HasSubstr(R"("ties_resolved":1)")) << json.out;
  const CommandResult text = RunTally({"status", "--node", a->address()});
  EXPECT_THAT(text.out, HasSubstr("ties resolved      1")) << text.out;
  EXPECT_EQ(a->Stop(), 0);
  EXPECT_EQ(b->Stop(), 0);
}

// A one-sided link: b lists a as its peer, a does not list b. b's writes
// then reach a only with b's sessions (a never follows b's feed), which
// made a new node's writes take ~21 s instead of milliseconds, silently.
// Now a shows b in status, in /metrics and once in its log; a node that
// only asks a for a diff (tally diff) is no such caller.
TEST(Watching, AOneSidedLinkIsShownOnTheNodeThatDoesNotListThePeer) {
  TempDir dir_a, dir_b, dir_c;
  auto a =
      StartNode("node-a", dir_a.path(),
                {"--sync-interval", "1h", "--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(a);
  auto b = StartNode("node-b", dir_b.path(),
                     {"--sync-interval", "200ms", "--peer", a->address()});
  ASSERT_TRUE(b);
  auto c = StartNode("node-c", dir_c.path(), {"--sync-interval", "1h"});
  ASSERT_TRUE(c);
  for (const NodeProcess* node : {a.get(), c.get()}) {
    ASSERT_EQ(RunTally({"--node", node->address(), "put", "k", "v"}).exit_code,
              0);
  }
  const CommandResult diff = RunTally({"diff", c->address(), a->address()});
  EXPECT_EQ(diff.exit_code, 1) << diff.err;  // the two puts' versions
  ASSERT_TRUE(WaitFor([&] {
    return Status(a->address()).unlisted_callers_size() == 1;
  })) << a->Log();
  const v1::StatusResponse status = Status(a->address());
  EXPECT_EQ(status.unlisted_callers(0).name(), "node-b");
  const CommandResult text = RunTally({"status", "--node", a->address()});
  EXPECT_THAT(text.out,
              HasSubstr("WARNING: node 'node-b' (from ipv4:127.0.0.1:"));
  EXPECT_THAT(text.out, HasSubstr("is not among its peers"));
  EXPECT_THAT(text.out, Not(HasSubstr("node-c")));
  const CommandResult json =
      RunTally({"status", "--node", a->address(), "--json"});
  EXPECT_THAT(json.out, HasSubstr(R"("unlisted_callers":[{"name":"node-b")"));
  EXPECT_THAT(Scrape(MetricsPort(*a)),
              HasSubstr("\ntally_unlisted_callers 1\n"));
  absl::SleepFor(absl::Seconds(1));  // more sessions: still one log line
  const std::string log = a->Log();
  size_t lines = 0;
  for (size_t at = log.find("one-sided"); at != std::string::npos;
       at = log.find("one-sided", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 1u) << log;
  // b's own status names nobody: it lists a, and a does not call it.
  EXPECT_EQ(Status(b->address()).unlisted_callers_size(), 0);
  EXPECT_EQ(a->Stop(), 0);
  EXPECT_EQ(b->Stop(), 0);
  EXPECT_EQ(c->Stop(), 0);
}

// A peer given twice was once refused only by its spelling: one
// node given as 127.0.0.1:PORT and localhost:PORT ran two feed subscriptions
// under one subscriber name, and since a newer subscription replaces the
// older each kept ending the other: the feed reconnected forever
// and its lag flapped. The second address of a node is now refused, by
// name, once its handshake names it.
TEST(Watching, OneNodeGivenAsTwoPeersIsRefusedByNameAndDoesNotFlap) {
  TempDir dir_a, dir_b;
  auto b = StartNode("node-b", dir_b.path());
  ASSERT_TRUE(b);
  const std::string alias =
      "localhost" + b->address().substr(b->address().rfind(':'));
  auto a = StartNode(
      "node-a", dir_a.path(),
      {"--sync-interval", "300ms", "--peer", b->address(), "--peer", alias});
  ASSERT_TRUE(a);
  ASSERT_TRUE(WaitFor([&] {
    const v1::StatusResponse s = Status(a->address());
    return s.peers_size() == 2 && s.peers(0).feed_connected() &&
           absl::StrContains(s.peers(1).last_outcome(), "same node");
  })) << a->Log();
  const v1::StatusResponse before = Status(a->address());
  EXPECT_THAT(before.peers(1).last_outcome(), HasSubstr("give each peer once"));
  absl::SleepFor(absl::Seconds(4));
  const v1::StatusResponse after = Status(a->address());
  EXPECT_TRUE(after.peers(0).feed_connected());
  EXPECT_EQ(after.peers(0).feed_reconnects(),
            before.peers(0).feed_reconnects());
  EXPECT_FALSE(after.peers(1).feed_connected());
  EXPECT_GT(after.peers(0).sessions_ok(), before.peers(0).sessions_ok());
  EXPECT_EQ(after.peers(1).sessions_ok(), 0u);
  EXPECT_EQ(a->Stop(), 0);
  EXPECT_EQ(b->Stop(), 0);
}

// A session that pushed rows and then failed (here: past
// its deadline, slowed by the repair bandwidth limit) reported rows_sent 0,
// because the counters of a failed keyspace sync were dropped.
TEST(Watching, FailedSessionThatPushedRowsReportsRowsSent) {
  TempDir dir_a, dir_b;
  {
    // 5,000 rows of 1 KB on a, written while it has no peers.
    auto a = StartNode("node-a", dir_a.path());
    ASSERT_TRUE(a);
    int i = 0;
    auto loaded = Connect(a->address())
                      ->Load(kKeyspace, [&](std::string* k, std::string* v) {
                        if (i == 5000) return false;
                        *k = absl::StrCat("key-", i++);
                        *v = std::string(1000, 'x');
                        return true;
                      });
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(a->Stop(), 0);
  }
  auto b = StartNode("node-b", dir_b.path());
  ASSERT_TRUE(b);
  // 1 MB/s moves about 1,000 rows a second: the 2.5 s session pushes a few
  // batches to b, then runs out of time.
  auto a =
      StartNode("node-a", dir_a.path(),
                {"--peer", b->address(), "--sync-interval", "1h",
                 "--repair-bandwidth", "1", "--session-timeout", "2500ms"});
  ASSERT_TRUE(a);
  ASSERT_TRUE(WaitFor([&] {
    const v1::StatusResponse s = Status(a->address());
    return s.peers_size() == 1 && s.peers(0).sessions_failed() >= 1;
  })) << a->Log();
  const v1::PeerStatus peer = Status(a->address()).peers(0);
  EXPECT_EQ(peer.sessions_ok(), 0u);
  const uint64_t on_b = Rows(b->address());
  EXPECT_GT(on_b, 0u);
  EXPECT_LT(on_b, 5000u);
  EXPECT_EQ(peer.rows_sent(), on_b);
  EXPECT_GT(peer.bytes_repaired(), 0u);
  EXPECT_EQ(a->Stop(), 0);
  EXPECT_EQ(b->Stop(), 0);
}

// When did the last session with a peer succeed? A peer that
// goes down keeps failing; status and /metrics keep the last success, and
// the last attempt moves on past it (alert on the success's age).
TEST(Watching, TheLastSuccessfulSessionStaysWhileLaterOnesFail) {
  TempDir dir_a, dir_b;
  auto b = StartNode("node-b", dir_b.path());
  ASSERT_TRUE(b);
  auto a = StartNode("node-a", dir_a.path(),
                     {"--peer", b->address(), "--sync-interval", "300ms",
                      "--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(a);
  ASSERT_TRUE(WaitFor([&] {
    const v1::StatusResponse s = Status(a->address());
    return s.peers_size() == 1 && s.peers(0).sessions_ok() >= 1 &&
           !s.peers(0).session_running();
  })) << a->Log();
  EXPECT_GT(Status(a->address()).peers(0).last_success_unix_ms(), 0);
  EXPECT_EQ(b->Stop(), 0);
  // The first failure may be the session that was due as b stopped; wait
  // for one that started after.
  const int64_t stopped_ms = absl::ToUnixMillis(absl::Now());
  ASSERT_TRUE(WaitFor([&] {
    const v1::StatusResponse s = Status(a->address());
    return s.peers(0).last_session_unix_ms() > stopped_ms &&
           !s.peers(0).session_running();
  })) << a->Log();
  const v1::PeerStatus peer = Status(a->address()).peers(0);
  EXPECT_GT(peer.last_success_unix_ms(), 0);
  EXPECT_LT(peer.last_success_unix_ms(), stopped_ms);
  EXPECT_GT(peer.last_session_unix_ms(), peer.last_success_unix_ms());
  EXPECT_NE(peer.last_outcome(), "ok");

  const std::string metrics = Scrape(MetricsPort(*a));
  const std::string label = absl::StrCat("{peer=\"", b->address(), "\"} ");
  EXPECT_THAT(metrics,
              HasSubstr(absl::StrFormat(
                  "tally_peer_last_success_timestamp_seconds%s%d.%03d\n", label,
                  peer.last_success_unix_ms() / 1000,
                  peer.last_success_unix_ms() % 1000)));
  EXPECT_THAT(metrics,
              HasSubstr("tally_peer_last_session_timestamp_seconds" + label));
  EXPECT_EQ(a->Stop(), 0);
}

// An operator can see what a session is doing. Node a's peer b
// is down at first: a's sessions fail in the handshake, and status says so.
// Then b starts empty; a's session pushes a's rows to it under a repair
// bandwidth limit that keeps it in the repair for a few seconds, and the
// Admin Status RPC, `tally status` and /metrics all show the phase, the
// keyspace and the time in it, until the session is done.
TEST(Watching, RunningSessionShowsItsPhaseInStatusAndMetrics) {
  TempDir dir_a, dir_b;
  const std::string b_address = FreeLoopbackAddress();
  // 3,000 rows of ~40 bytes at 0.02 MB/s: each batch of 1,000 takes ~2 s.
  // A session every 2 s: the first ones fail (b is down).
  auto a = StartNode(
      "node-a", dir_a.path(),
      {"--peer", b_address, "--sync-interval", "2s", "--repair-bandwidth",
       "0.02", "--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(a);
  const int port = MetricsPort(*a);
  ASSERT_GT(port, 0) << a->Log();
  int i = 0;
  auto loaded = Connect(a->address())
                    ->Load(kKeyspace, [&](std::string* k, std::string* v) {
                      if (i == 3000) return false;
                      *k = absl::StrFormat("key-%04d", i++);
                      *v = std::string(30, 'x');
                      return true;
                    });
  ASSERT_TRUE(loaded.ok()) << loaded.status();

  auto session = [&] {
    const v1::StatusResponse s = Status(a->address());
    return s.peers_size() == 1 ? s.peers(0).session() : v1::SessionProgress{};
  };
  auto phase_metric = [&](const std::string& phase) {
    return absl::StrCat("tally_session_phase{peer=\"", b_address, "\",phase=\"",
                        phase, "\"} 1\n");
  };
  v1::SessionProgress failed;
  ASSERT_TRUE(WaitFor([&] {
    failed = session();
    return failed.phase() == "failed";
  })) << a->Log();
  EXPECT_EQ(failed.failed_in(), "handshake");
  EXPECT_EQ(failed.keyspaces_done(), 0u);
  EXPECT_TRUE(WaitFor([&] {
    return absl::StrContains(Scrape(port), phase_metric("failed"));
  })) << Scrape(port);

  auto b = NodeProcess::Start("node-b", dir_b.path(),
                              {"--sync-writes", "false"}, b_address);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(WaitFor([&] { return session().phase() == "repair"; }))
      << a->Log();
  const v1::SessionProgress repairing = session();
  EXPECT_EQ(repairing.keyspace(), kKeyspace);
  EXPECT_EQ(repairing.failed_in(), "");
  EXPECT_GE(repairing.phase_seconds(), 0);
  EXPECT_GT(repairing.phase_since_unix_ms(), 0);
  EXPECT_GE(repairing.phase_since_unix_ms(), repairing.started_unix_ms());
  EXPECT_EQ(repairing.keyspaces(), 1u);
  EXPECT_EQ(repairing.keyspaces_done(), 0u);
  EXPECT_TRUE(Status(a->address()).peers(0).session_running());
  // The metric and the CLI, while the repair still runs.
  EXPECT_TRUE(WaitFor([&] {
    return absl::StrContains(Scrape(port), phase_metric("repair"));
  })) << Scrape(port);
  EXPECT_TRUE(WaitFor([&] {
    const CommandResult text = RunTally({"status", "--node", a->address()});
    return std::regex_search(
        text.out, std::regex(b_address + " +repair +default +[0-9.]+ s"));
  })) << RunTally({"status", "--node", a->address()}).out;

  // That session ends done (the next starts about 2 s later).
  v1::SessionProgress done;
  ASSERT_TRUE(WaitFor([&] {
    done = session();
    return done.phase() == "done" &&
           done.started_unix_ms() == repairing.started_unix_ms();
  })) << a->Log();
  EXPECT_EQ(done.keyspace(), "");
  EXPECT_EQ(done.keyspaces_done(), 1u);
  EXPECT_EQ(done.differences(), 3000u);
  EXPECT_EQ(done.rows_sent(), 3000u);
  EXPECT_EQ(Rows((*b)->address()), 3000u);
  EXPECT_THAT(Scrape(port), HasSubstr(phase_metric("done")));
  const CommandResult json =
      RunTally({"status", "--node", a->address(), "--json"});
  EXPECT_THAT(json.out, HasSubstr("\"phase\":\"done\""));
  EXPECT_EQ(a->Stop(), 0);
  EXPECT_EQ((*b)->Stop(), 0);
}

// How long sessions take, and what the process uses, as a
// running node's metrics — valid for promtool when it is installed.
TEST(Watching, SessionDurationsAndTheProcessAreInTheMetrics) {
  TempDir dir_a, dir_b;
  auto a = StartNode("node-a", dir_a.path(), {});
  ASSERT_TRUE(a);
  auto b = StartNode("node-b", dir_b.path(),
                     {"--sync-interval", "200ms", "--peer", a->address(),
                      "--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(b);
  const int port = MetricsPort(*b);
  ASSERT_GT(port, 0) << b->Log();
  const std::string count =
      "tally_session_duration_seconds_count{peer=\"" + a->address() + "\"} ";
  std::string text;
  ASSERT_TRUE(WaitFor([&] {
    text = Scrape(port);
    const size_t at = text.find(count);
    return at != std::string::npos &&
           std::stoi(text.substr(at + count.size())) >= 3;
  })) << text;
  EXPECT_THAT(text, HasSubstr("tally_session_duration_seconds_bucket{peer=\"" +
                              a->address() + "\",le=\"+Inf\"}"));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      text, m,
      std::regex("tally_process_resident_memory_bytes\\{kind=\"anon\"\\} "
                 "(\\d+)")));
  EXPECT_GT(std::stoull(m[1]), 1u << 20);
  ASSERT_TRUE(
      std::regex_search(text, m, std::regex("process_open_fds (\\d+)")));
  EXPECT_GT(std::stoull(m[1]), 3u);
  ASSERT_TRUE(std::regex_search(
      text, m, std::regex("process_start_time_seconds (\\d+)\\.\\d{3}\n")));
  EXPECT_NEAR(std::stod(m[1]), absl::ToUnixSeconds(absl::Now()), 120);

  // Prometheus's own checker: the exposition parses and follows its lint.
  // scripts/test.sh provides promtool and names it in TALLY_PROMTOOL, which
  // makes the check required; elsewhere it runs when the machine has
  // Debian's `prometheus` package.
  const char* required = std::getenv("TALLY_PROMTOOL");
  const std::string promtool = required != nullptr && *required != '\0'
                                   ? std::string(required)
                                   : std::string("/usr/bin/promtool");
  if (access(promtool.c_str(), X_OK) == 0) {
    const std::string file = dir_b.path() + "/scrape.txt";
    {
      std::ofstream out(file);
      out << text;
    }
    const CommandResult check = RunCommand(
        {"/bin/sh", "-c", "'" + promtool + "' check metrics < '" + file + "'"});
    EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  } else if (required != nullptr && *required != '\0') {
    ADD_FAILURE() << "TALLY_PROMTOOL=" << promtool
                  << " is not an executable: the promtool check cannot be "
                     "skipped (scripts/fetch-promtool.sh provides it)";
  }
  EXPECT_EQ(b->Stop(), 0);
  EXPECT_EQ(a->Stop(), 0);
}

// A client writing to a copy of a source is a warning sign
// (its next session undoes the write): counted per origin in status and
// metrics, logged once; --read-only refuses it.
TEST(Watching, WritesToACopyAreCountedAndReadOnlyRefusesThem) {
  TempDir dir_a, dir_c, dir_r;
  auto a = StartNode("node-a", dir_a.path(), {});
  ASSERT_TRUE(a);
  auto c = StartNode(
      "node-c", dir_c.path(),
      {"--sync-interval", "1h", "--peer", a->address() + ",role=source",
       "--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(c);
  for (const char* key : {"k1", "k2"}) {
    const CommandResult put =
        RunTally({"--node", c->address(), "put", key, "v"});
    EXPECT_EQ(put.exit_code, 0) << put.err;
  }
  absl::StatusOr<v1::StatusResponse> status = Connect(c->address())->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->copy_writes_size(), 1);
  EXPECT_EQ(status->copy_writes(0).origin(), "node-c");
  EXPECT_EQ(status->copy_writes(0).rows(), 2u);
  EXPECT_FALSE(status->read_only());
  EXPECT_THAT(Scrape(MetricsPort(*c)),
              HasSubstr("tally_copy_writes_total{origin=\"node-c\"} 2\n"));
  EXPECT_THAT(RunTally({"status", "--node", c->address()}).out,
              HasSubstr("WARNING: 2 rows written directly to this copy"));
  // Logged once, not per write.
  int warnings = 0;
  for (absl::string_view line : absl::StrSplit(c->Log(), '\n')) {
    warnings += absl::StrContains(line, "a client wrote to a copy");
  }
  EXPECT_EQ(warnings, 1) << c->Log();
  // A node with peers of its own role writes freely, counting nothing.
  ASSERT_TRUE(Connect(a->address())->Put(kKeyspace, "k3", "v").ok());
  status = Connect(a->address())->Status();
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->copy_writes_size(), 0);

  auto r = StartNode("node-r", dir_r.path(),
                     {"--sync-interval", "200ms", "--peer",
                      a->address() + ",role=source", "--read-only"});
  ASSERT_TRUE(r);
  const CommandResult refused =
      RunTally({"--node", r->address(), "put", "k4", "v"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.err, HasSubstr("read-only"));
  EXPECT_THAT(refused.err, HasSubstr("write to its source " + a->address()));
  const CommandResult del = RunTally({"--node", r->address(), "del", "k3"});
  EXPECT_NE(del.exit_code, 0);
  EXPECT_THAT(del.err, HasSubstr("read-only"));
  const std::string rows = dir_r.path() + "/rows.jsonl";
  {
    std::ofstream out(rows);
    out << "{\"key\": \"k5\", \"value\": \"v\"}\n";
  }
  const CommandResult load =
      RunTally({"--node", r->address(), "load", "--file", rows});
  EXPECT_NE(load.exit_code, 0);
  EXPECT_THAT(load.err, HasSubstr("read-only"));
  // Rows from its source still arrive.
  EXPECT_TRUE(WaitFor([&] { return Has(r->address(), "k3"); }));
  EXPECT_FALSE(Has(r->address(), "k4"));
  status = Connect(r->address())->Status();
  ASSERT_TRUE(status.ok());
  EXPECT_TRUE(status->read_only());
  EXPECT_GE(status->writes_refused(), 3u);
  EXPECT_EQ(r->Stop(), 0);
  EXPECT_EQ(c->Stop(), 0);
  EXPECT_EQ(a->Stop(), 0);
}

// A key of `keyspace` whose token lies in heat segment `segment` (of the
// 64 a node sends), the `n`-th such.
std::string KeyInSegment(int segment, int n) {
  for (int i = 0;; ++i) {
    std::string key = absl::StrCat("row-", i);
    if (node::HeatSegmentOf(tree::TokenOf(key)) == segment && n-- == 0) {
      return key;
    }
  }
}

// `tally status` of a real node shows what Admin.Status
// carries of the process, the session durations and the heat map — the
// token space drawn as a strip where the session found the differences.
TEST(Watching, StatusShowsTheProcessSessionTimesAndAHeatStrip) {
  TempDir dir_a, dir_b;
  auto b = StartNode("node-b", dir_b.path(), {});
  ASSERT_TRUE(b);
  // The rows go to a while it has no peer, so that no feed carries them:
  // only a session finds them — 3 in segment 9, 1 in segment 44.
  {
    auto a = StartNode("node-a", dir_a.path(), {});
    ASSERT_TRUE(a);
    auto client = Connect(a->address());
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(client->Put(kKeyspace, KeyInSegment(9, i), "v").ok());
    }
    ASSERT_TRUE(client->Put(kKeyspace, KeyInSegment(44, 0), "v").ok());
    ASSERT_EQ(a->Stop(), 0);
  }
  // One session (the first starts within a second, the next in an hour).
  auto a = StartNode("node-a", dir_a.path(),
                     {"--peer", b->address(), "--sync-interval", "1h",
                      "--node-bandwidth", "25"});
  ASSERT_TRUE(a);
  ASSERT_TRUE(WaitFor([&] {
    const v1::StatusResponse s = Status(a->address());
    return s.peers_size() == 1 && s.peers(0).heat_sessions() == 1;
  })) << a->Log();

  const CommandResult text = RunTally({"status", "--node", a->address()});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  // The process, as /proc tells it.
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(text.out, m,
                        std::regex("\n  cpu +[0-9.]+ s \\(user \\+ system\\), "
                                   "([0-9]+) threads\n")))
      << text.out;
  EXPECT_GT(std::stoi(m[1]), 1);
  ASSERT_TRUE(std::regex_search(
      text.out, m, std::regex("\n  open files +([0-9]+) open of ([0-9]+)")))
      << text.out;
  EXPECT_GT(std::stoi(m[1]), 3);
  EXPECT_GT(std::stoi(m[2]), std::stoi(m[1]));
  EXPECT_THAT(text.out, HasSubstr(" anon (heap), "));
  EXPECT_TRUE(std::regex_search(text.out, std::regex("\n  up +[0-9.]+ (ms|s) "
                                                     "\\(since 20")))
      << text.out;
  EXPECT_THAT(text.out,
              HasSubstr("node bandwidth  25.0 MB/s over all repairs"));
  // The one session's duration.
  EXPECT_TRUE(std::regex_search(
      text.out,
      std::regex("SESSION TIMES WITH +SESSIONS +MEAN +P50 +P90\n  " +
                 std::regex_replace(b->address(), std::regex("\\."), "\\.") +
                 " +1 +[0-9.]+ m?s +~[0-9.]+ m?s +~[0-9.]+ m?s\n")))
      << text.out;
  // The strip: the hottest column (3 differences) darkest, the one with 1
  // a third of the way.
  const std::string strip = std::string(9, ' ') + "@" + std::string(34, ' ') +
                            "-" + std::string(19, ' ');
  bool drawn = false;
  for (absl::string_view line : absl::StrSplit(text.out, '\n')) {
    drawn |= absl::StartsWith(line, absl::StrCat("  ", b->address(), "  ",
                                                 kKeyspace, " ")) &&
             absl::StrContains(line, " last session ") &&
             absl::StrContains(line, "|" + strip + "|  4 ");
  }
  EXPECT_TRUE(drawn) << text.out;
  EXPECT_THAT(text.out, HasSubstr("shades (differences in a column): ' ' 0  "
                                  "'-' 1  '*' 2  '@' 3\n"));

  const CommandResult json =
      RunTally({"status", "--node", a->address(), "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json parsed = nlohmann::json::parse(json.out);
  EXPECT_GT(parsed["process"]["threads"].get<int>(), 1);
  EXPECT_GT(parsed["process"]["resident_anon_bytes"].get<uint64_t>(), 1u << 20);
  EXPECT_EQ(parsed["node_bandwidth_bytes_per_second"].get<double>(), 25e6);
  const nlohmann::json& peer = parsed["peers"][0];
  EXPECT_EQ(peer["session_seconds"]["count"], 1);
  EXPECT_TRUE(peer["session_seconds"]["p50_seconds"].is_number());
  EXPECT_EQ(peer["heat"][0]["keyspace"], kKeyspace);
  EXPECT_EQ(peer["heat"][0]["last"][0]["segment"], 9);
  EXPECT_EQ(peer["heat"][0]["last"][0]["differences"], 3);
  EXPECT_EQ(a->Stop(), 0);
  EXPECT_EQ(b->Stop(), 0);
}

}  // namespace
}  // namespace tally
