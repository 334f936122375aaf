// Multi-process tests of what an operator sees of and steers in a node's
// sessions: the rows a running session has moved so far in
// status and /metrics, the line a session stopped at shutdown logs, each
// peer's last sessions, and pausing and resuming the sessions with a peer
// (`tally peer pause|resume`). Real tallyd processes and the real tally.
#include <httplib.h>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/client/client.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "tests/node_connect.h"
#include "tests/node_metrics.h"
#include "tests/node_under_test.h"
#include "tests/wait_for.h"

namespace tally {
namespace {

using ::tally::testing::CommandResult;
using ::tally::testing::Connect;
using ::tally::testing::FreeLoopbackAddress;
using ::tally::testing::MetricsPort;
using ::tally::testing::NodeProcess;
using ::tally::testing::Rows;
using ::tally::testing::RunTally;
using ::tally::testing::Scrape;
using ::tally::testing::StartNode;
using ::tally::testing::Status;
using ::tally::testing::TempDir;
using ::tally::testing::WaitFor;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kKeyspace[] = "default";

// The only peer's status (empty when the node has none or is unreachable).
v1::PeerStatus OnlyPeer(const std::string& address) {
  const v1::StatusResponse s = Status(address);
  return s.peers_size() == 1 ? s.peers(0) : v1::PeerStatus{};
}

// `rows` rows of ~40 bytes into node `address`.
void LoadRows(const std::string& address, int rows) {
  int i = 0;
  auto loaded =
      Connect(address)->Load(kKeyspace, [&](std::string* k, std::string* v) {
        if (i == rows) return false;
        *k = absl::StrFormat("key-%05d", i++);
        *v = std::string(30, 'x');
        return true;
      });
  ASSERT_TRUE(loaded.ok()) << loaded.status();
}

// The value of a number in `log`'s last line matching `pattern`, whose
// first group is the number; -1 when no line matches.
int64_t LastNumber(const std::string& log, const std::string& pattern) {
  const std::regex re(pattern);
  int64_t value = -1;
  for (std::sregex_iterator it(log.begin(), log.end(), re), end; it != end;
       ++it) {
    value = std::stoll((*it)[1]);
  }
  return value;
}

// A node whose session pushes 3,000 rows to an empty peer slowly: at 0.02
// MB/s a batch of 1,000 rows of ~40 bytes takes ~2 s. The peer is down at
// first, so that the rows are in before the first session that reaches it.
struct SlowPush {
  TempDir dir_a, dir_b;
  std::string b_address = FreeLoopbackAddress();
  std::unique_ptr<NodeProcess> a;
  std::unique_ptr<NodeProcess> b;

  void Start() {
    a = StartNode(
        "node-a", dir_a.path(),
        {"--peer", b_address, "--sync-interval", "2s", "--repair-bandwidth",
         "0.02", "--metrics-listen", "127.0.0.1:0"});
    ASSERT_TRUE(a);
    LoadRows(a->address(), 3000);
    // The first session has failed (b is down) before b starts.
    ASSERT_TRUE(WaitFor([&] {
      return OnlyPeer(a->address()).sessions_failed() > 0;
    })) << a->Log();
    b = StartNode("node-b", dir_b.path(), {}, b_address);
    ASSERT_TRUE(b);
    // a's link to b is up (its channel backs off after the refused
    // connections, and a session asked for meanwhile would fail at once).
    ASSERT_TRUE(WaitFor([&] {
      return OnlyPeer(a->address()).feed_connected();
    })) << a->Log();
  }
};

// The rows a running session has moved count in status and
// /metrics as they are written (they stayed 0 until the session ended),
// and a session stopped by a shutdown logs the rows it really copied.
TEST(Control, RunningSessionsRowsCountAsTheyMoveAndAShutdownLogsThem) {
  SlowPush mesh;
  ASSERT_NO_FATAL_FAILURE(mesh.Start());
  const int port = MetricsPort(*mesh.a);
  ASSERT_GT(port, 0) << mesh.a->Log();
  // While the first session that reaches b runs (no session has succeeded
  // yet), its rows so far show in the peer's totals.
  v1::StatusResponse during;
  ASSERT_TRUE(WaitFor([&] {
    during = Status(mesh.a->address());
    return during.peers_size() == 1 && during.sessions_ok() == 0 &&
           during.peers(0).session_running() && during.peers(0).rows_sent() > 0;
  })) << mesh.a->Log();
  const v1::PeerStatus& peer = during.peers(0);
  EXPECT_LT(peer.rows_sent(), 3000u);
  EXPECT_EQ(peer.rows_sent(), peer.session().rows_sent());
  const std::regex sent_metric("tally_repair_rows_total\\{peer=\"" +
                               mesh.b_address +
                               "\",direction=\"sent\"\\} ([0-9]+)\n");
  std::smatch m;
  const std::string scraped = Scrape(port);
  ASSERT_TRUE(std::regex_search(scraped, m, sent_metric)) << scraped;
  EXPECT_GT(std::stoull(m[1]), 0u) << scraped;
  EXPECT_EQ(Status(mesh.a->address()).sessions_ok(), 0u);

  // Stopped half way: the session's line says what it did.
  EXPECT_EQ(mesh.a->Stop(), 0);
  const std::string log = mesh.a->Log();
  const int64_t logged = LastNumber(
      log, "session ended peer=" + mesh.b_address +
               " name=node-b trigger=scheduled outcome=\"CANCELLED: session "
               "stopped: the node is shutting down\" keyspaces=1 "
               "differences=[0-9]+ rows_received=0 rows_sent=([0-9]+)");
  EXPECT_GT(logged, 0) << log;
  EXPECT_LT(logged, 3000) << log;
  // b holds exactly what the line says was sent.
  EXPECT_EQ(Rows(mesh.b->address()), static_cast<uint64_t>(logged));
  EXPECT_EQ(mesh.b->Stop(), 0);
}

// The last sessions with a peer, newest first, in Admin.Status,
// `tally status` and its --json.
TEST(Control, StatusListsEachPeersLastSessionsNewestFirst) {
  TempDir dir_a, dir_b;
  auto b = StartNode("node-b", dir_b.path());
  ASSERT_TRUE(b);
  // One keyspace for the sessions to sync.
  ASSERT_TRUE(Connect(b->address())->Put(kKeyspace, "k", "v").ok());
  auto a = StartNode("node-a", dir_a.path(),
                     {"--peer", b->address(), "--sync-interval", "1s"});
  ASSERT_TRUE(a);
  v1::PeerStatus peer;
  ASSERT_TRUE(WaitFor([&] {
    peer = OnlyPeer(a->address());
    return peer.history_size() >= 3;
  })) << a->Log();
  for (int i = 0; i < peer.history_size(); ++i) {
    const v1::SessionRecord& r = peer.history(i);
    EXPECT_EQ(r.outcome(), "ok") << i;
    EXPECT_EQ(r.trigger(), "scheduled") << i;
    EXPECT_GE(r.seconds(), 0) << i;
    EXPECT_EQ(r.keyspaces(), 1u) << i;
    if (i > 0) {
      EXPECT_GT(peer.history(i - 1).started_unix_ms(), r.started_unix_ms())
          << "not newest first at " << i;
    }
  }

  const CommandResult text = RunTally({"status", "--node", a->address()});
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out,
              HasSubstr(absl::StrCat("LAST SESSIONS WITH ", b->address(),
                                     " (node-b), newest first")));
  EXPECT_TRUE(std::regex_search(
      text.out,
      std::regex("\n  [0-9T:-]+Z +[0-9.]+ s +scheduled +ok +1 +[0-9]+ "
                 "+[0-9]+/[0-9]+ ")))
      << text.out;
  const CommandResult json =
      RunTally({"status", "--node", a->address(), "--json"});
  EXPECT_EQ(json.exit_code, 0) << json.err;
  EXPECT_THAT(json.out, HasSubstr("\"history\":[{"));
  EXPECT_THAT(json.out, HasSubstr("\"trigger\":\"scheduled\""));
  EXPECT_EQ(a->Stop(), 0);
  EXPECT_EQ(b->Stop(), 0);
}

// `tally peer pause` stops the sessions with a peer (status and
// /metrics say so), also after a restart, until `tally peer resume`; the
// peer is named by its node name or its address, and a name that is no peer
// is refused with the list.
TEST(Control, PausedPeerGetsNoSessionsUntilResumed) {
  TempDir dir_a, dir_b;
  auto b = StartNode("node-b", dir_b.path());
  ASSERT_TRUE(b);
  // Rows for A's first session to find: the heat map then has a strip.
  for (const char* key : {"k1", "k2", "k3"}) {
    ASSERT_EQ(RunTally({"--node", b->address(), "put", key, "v"}).exit_code, 0);
  }
  auto a = StartNode("node-a", dir_a.path(),
                     {"--peer", b->address(), "--sync-interval", "1s",
                      "--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(a);
  int port = MetricsPort(*a);
  ASSERT_GT(port, 0) << a->Log();
  ASSERT_TRUE(WaitFor([&] { return OnlyPeer(a->address()).sessions_ok() > 0; }))
      << a->Log();
  const std::string paused_metric =
      absl::StrCat("tally_peer_paused{peer=\"", b->address(), "\"} ");
  EXPECT_THAT(Scrape(port), HasSubstr(paused_metric + "0\n"));

  CommandResult r =
      RunTally({"peer", "pause", "node-b", "--node", a->address()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("paused sessions with peer ",
                                            b->address(), " (node-b)")));
  EXPECT_TRUE(OnlyPeer(a->address()).paused());
  EXPECT_GT(OnlyPeer(a->address()).paused_since_unix_ms(), 0);
  EXPECT_THAT(Scrape(port), HasSubstr(paused_metric + "1\n"));
  ASSERT_TRUE(
      WaitFor([&] { return !OnlyPeer(a->address()).session_running(); }));
  const v1::PeerStatus before = OnlyPeer(a->address());
  const CommandResult text = RunTally({"status", "--node", a->address()});
  EXPECT_TRUE(std::regex_search(
      text.out, std::regex(b->address() + " +peer +node-b .* paused ")))
      << text.out;
  absl::SleepFor(absl::Seconds(3));  // three intervals
  const v1::PeerStatus after = OnlyPeer(a->address());
  EXPECT_EQ(after.sessions_ok() + after.sessions_failed(),
            before.sessions_ok() + before.sessions_failed());
  EXPECT_EQ(after.history_size(), before.history_size());

  r = RunTally({"peer", "pause", b->address(), "--node", a->address()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("was already paused"));
  r = RunTally({"peer", "pause", "127.0.0.1:1", "--node", a->address()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err,
              HasSubstr(absl::StrCat("'127.0.0.1:1' is not a peer of this "
                                     "node; its peers: ",
                                     b->address(), " (node-b)")));
  r = RunTally({"peer", "stop", "node-b", "--node", a->address()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("'stop' is not an action"));

  // A restart keeps the pause (the data directory's paused-peers file) and
  // the session history (its session-history file; before, a restarted
  // node showed none).
  const int kept = OnlyPeer(a->address()).history_size();
  EXPECT_GT(kept, 0);
  // And the heat map (saved with the history; before, it started empty).
  const v1::PeerStatus heat_before = OnlyPeer(a->address());
  ASSERT_EQ(heat_before.heat_size(), 1);
  EXPECT_EQ(heat_before.heat(0).keyspace(), "default");
  EXPECT_EQ(a->Stop(), 0);
  a = StartNode("node-a", dir_a.path(),
                {"--peer", b->address(), "--sync-interval", "1s",
                 "--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(a);
  EXPECT_THAT(a->Log(),
              HasSubstr(absl::StrCat("peer ", b->address(), " stays paused")));
  EXPECT_TRUE(OnlyPeer(a->address()).paused());
  EXPECT_EQ(OnlyPeer(a->address()).history_size(), kept);
  const v1::PeerStatus heat_after = OnlyPeer(a->address());
  EXPECT_EQ(heat_after.heat_sessions(), heat_before.heat_sessions());
  ASSERT_EQ(heat_after.heat_size(), 1);
  EXPECT_EQ(heat_after.heat(0).SerializeAsString(),
            heat_before.heat(0).SerializeAsString());
  absl::SleepFor(absl::Seconds(2));
  EXPECT_EQ(OnlyPeer(a->address()).history_size(), kept);  // still paused
  port = MetricsPort(*a);
  EXPECT_THAT(Scrape(port), HasSubstr(paused_metric + "1\n"));

  r = RunTally(
      {"peer", "resume", b->address(), "--node", a->address(), "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"paused\":false"));
  EXPECT_THAT(r.out, HasSubstr("\"changed\":true"));
  EXPECT_FALSE(OnlyPeer(a->address()).paused());
  EXPECT_TRUE(WaitFor([&] { return OnlyPeer(a->address()).sessions_ok() > 0; }))
      << a->Log();
  EXPECT_THAT(Scrape(port), HasSubstr(paused_metric + "0\n"));
  EXPECT_EQ(a->Stop(), 0);
  EXPECT_EQ(b->Stop(), 0);
}

// A pause the node cannot save (its paused-peers file's place taken by a
// directory here; a full or read-only disk in life): before, the tool said
// "a restart keeps the pause" all the same, and a restart ended it. Now it
// says the pause was not saved and what a restart does.
TEST(Control, APauseThatCannotBeSavedSaysSo) {
  TempDir dir_a, dir_b;
  auto b = StartNode("node-b", dir_b.path());
  ASSERT_TRUE(b);
  auto a = StartNode("node-a", dir_a.path(),
                     {"--peer", b->address(), "--sync-interval", "1h"});
  ASSERT_TRUE(a);
  ASSERT_TRUE(
      std::filesystem::create_directories(dir_a.path() + "/paused-peers/x"));
  CommandResult r =
      RunTally({"peer", "pause", b->address(), "--node", a->address()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("WARNING: the node could not save the change"));
  EXPECT_THAT(r.out, HasSubstr("a restart ends the pause"));
  EXPECT_THAT(r.out, Not(HasSubstr("a restart keeps the pause")));
  r = RunTally(
      {"peer", "resume", b->address(), "--node", a->address(), "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"saved\":false"));
  EXPECT_EQ(a->Stop(), 0);
  EXPECT_EQ(b->Stop(), 0);
}

// A pause stops the running session with the peer at its next
// step; what it copied stays copied, and its outcome says why it stopped.
TEST(Control, PauseStopsTheRunningSession) {
  SlowPush mesh;
  ASSERT_NO_FATAL_FAILURE(mesh.Start());
  ASSERT_TRUE(WaitFor([&] {
    const v1::PeerStatus p = OnlyPeer(mesh.a->address());
    return p.session_running() && p.session().phase() == "repair";
  })) << mesh.a->Log();
  const CommandResult r =
      RunTally({"peer", "pause", mesh.b_address, "--node", mesh.a->address()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("its running session stops at its next step"));
  v1::PeerStatus stopped;
  ASSERT_TRUE(WaitFor([&] {
    stopped = OnlyPeer(mesh.a->address());
    return !stopped.session_running();
  }));
  const std::string why =
      "CANCELLED: session stopped: the peer was paused (tally peer pause)";
  EXPECT_EQ(stopped.last_outcome(), why);
  ASSERT_GT(stopped.history_size(), 0);
  EXPECT_EQ(stopped.history(0).outcome(), why);
  EXPECT_LT(Rows(mesh.b->address()), 3000u);
  EXPECT_EQ(stopped.rows_sent(), Rows(mesh.b->address()));
  EXPECT_THAT(mesh.a->Log(), HasSubstr("outcome=\"" + why + "\""));
  EXPECT_EQ(mesh.a->Stop(), 0);
  EXPECT_EQ(mesh.b->Stop(), 0);
}

// `tally sync A --peer B` starts a session now (the next
// scheduled one is an hour away) and follows it to its end: the rows it
// moved, whether the nodes are equal after it, exit 0; its record says it
// was requested. --json ends with one result line.
TEST(Control, SyncRunsASessionNowAndFollowsItToItsEnd) {
  TempDir dir_a, dir_b;
  auto b = StartNode("node-b", dir_b.path());
  ASSERT_TRUE(b);
  auto a = StartNode("node-a", dir_a.path(),
                     {"--peer", b->address(), "--sync-interval", "1h"});
  ASSERT_TRUE(a);
  ASSERT_TRUE(WaitFor([&] {
    const v1::PeerStatus p = OnlyPeer(a->address());
    return p.sessions_ok() > 0 && !p.session_running();
  })) << a->Log();
  const int before = OnlyPeer(a->address()).history_size();
  // b follows no one: only a session brings a's new rows to it.
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(
        Connect(a->address())->Put(kKeyspace, absl::StrCat("k", i), "v").ok());
  }
  CommandResult r = RunTally({"sync", a->address(), "--peer", "node-b"});
  EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("sync with ", b->address(),
                                            " (node-b): ok in ")));
  EXPECT_THAT(r.out, HasSubstr("1 keyspace, 5 differences, rows in/out 0/5"));
  EXPECT_THAT(r.out, HasSubstr("the nodes are equal"));
  EXPECT_EQ(Rows(b->address()), 5u);
  v1::PeerStatus peer = OnlyPeer(a->address());
  ASSERT_EQ(peer.history_size(), before + 1);
  EXPECT_EQ(peer.history(0).trigger(), "requested");
  EXPECT_EQ(peer.history(0).rows_sent(), 5u);
  EXPECT_THAT(a->Log(), HasSubstr("sync requested tool="));

  // Every peer, one keyspace, as JSON: nothing left to move.
  r = RunTally({"sync", a->address(), "--keyspace", kKeyspace, "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("{\"result\":[{\"peer\":\"",
                                            b->address(), "\"")));
  EXPECT_THAT(r.out, HasSubstr("\"outcome\":\"ok\""));
  EXPECT_THAT(r.out, HasSubstr("\"equal_after\":true"));
  EXPECT_THAT(r.out, HasSubstr("\"differing_after\":[]"));
  EXPECT_EQ(OnlyPeer(a->address()).history_size(), before + 2);
  EXPECT_EQ(a->Stop(), 0);
  EXPECT_EQ(b->Stop(), 0);
}

// What sync refuses, each with a clear message: a keyspace
// neither node has (the session fails, naming the keyspaces there are),
// an unknown peer, a paused one, every peer paused, a bad keyspace name
// (through the RPC, which the tool's own check would not let through).
TEST(Control, SyncRefusesUnknownPausedPeersAndAbsentKeyspacesClearly) {
  TempDir dir_a, dir_b;
  auto b = StartNode("node-b", dir_b.path());
  ASSERT_TRUE(b);
  ASSERT_TRUE(Connect(b->address())->Put("users", "k", "v").ok());
  auto a = StartNode("node-a", dir_a.path(),
                     {"--peer", b->address(), "--sync-interval", "1h"});
  ASSERT_TRUE(a);

  CommandResult r = RunTally({"sync", a->address(), "--keyspace", "nope"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat(
                         "keyspace 'nope' is on neither this node nor peer ",
                         b->address(), "; keyspaces there are: users")));
  EXPECT_THAT(r.out, HasSubstr("failed after"));

  r = RunTally({"sync", a->address(), "--peer", "127.0.0.1:1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("'127.0.0.1:1' is not a peer of this node"));
  // The log line's outcome is one quoted value, as every other line's is.
  EXPECT_THAT(a->Log(), HasSubstr("peer=127.0.0.1:1 keyspace=* "
                                  "outcome=\"NOT_FOUND: '127.0.0.1:1' is not "
                                  "a peer of this node"));

  v1::SyncRequest request;
  request.set_keyspace("bad keyspace\n");
  absl::Status s = Connect(a->address())->Sync(request, [](v1::SyncEvent&) {
    return absl::OkStatus();
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("bad keyspace"));
  request.set_keyspace("");
  request.set_peer("nobody");
  s = Connect(a->address())->Sync(request, [](v1::SyncEvent&) {
    return absl::OkStatus();
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  request.set_peer(std::string(2000, 'x'));
  s = Connect(a->address())->Sync(request, [](v1::SyncEvent&) {
    return absl::OkStatus();
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("peer is 2000 bytes; the limit is 1024"));
  absl::StatusOr<v1::PeerControlResponse> paused =
      Connect(a->address())->SetPeerPaused("", true);
  EXPECT_EQ(paused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(paused.status().message(), HasSubstr("no peer given"));

  ASSERT_EQ(RunTally({"peer", "pause", b->address(), "--node", a->address()})
                .exit_code,
            0);
  r = RunTally({"sync", a->address(), "--peer", b->address()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat("sessions with peer ", b->address(),
                                            " are paused; resume them first")));
  r = RunTally({"sync", a->address()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("every peer of this node is paused"));
  EXPECT_EQ(a->Stop(), 0);
  EXPECT_EQ(b->Stop(), 0);
}

// A sync asked for while a session with the peer runs waits for
// it (its first progress says "waiting"), then runs its own.
TEST(Control, SyncWaitsForTheRunningSessionThenRunsItsOwn) {
  SlowPush mesh;
  ASSERT_NO_FATAL_FAILURE(mesh.Start());
  ASSERT_TRUE(WaitFor([&] {
    const v1::PeerStatus p = OnlyPeer(mesh.a->address());
    return p.session_running() && p.session().phase() == "repair";
  })) << mesh.a->Log();
  const CommandResult r =
      RunTally({"sync", mesh.a->address(), "--peer", mesh.b_address, "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_THAT(r.out, HasSubstr("\"state\":\"waiting\""));
  EXPECT_THAT(r.out, HasSubstr("\"outcome\":\"ok\""));
  EXPECT_THAT(r.out, HasSubstr("\"equal_after\":true"));
  EXPECT_EQ(Rows(mesh.b->address()), 3000u);
  const v1::PeerStatus peer = OnlyPeer(mesh.a->address());
  ASSERT_GE(peer.history_size(), 2);
  bool requested = false;
  for (const v1::SessionRecord& record : peer.history()) {
    if (record.trigger() == "requested") requested = record.outcome() == "ok";
  }
  EXPECT_TRUE(requested);
  EXPECT_EQ(mesh.a->Stop(), 0);
  EXPECT_EQ(mesh.b->Stop(), 0);
}

// A tool that goes away (Ctrl-C) stops the session it asked
// for, between batches.
TEST(Control, ASyncWhoseToolGoesAwayStopsItsSession) {
  TempDir dir_a, dir_b;
  auto b = StartNode("node-b", dir_b.path());
  ASSERT_TRUE(b);
  // A push slowed to ~2 s a batch of 1,000 rows; no scheduled session after
  // the first (b's feed asks for one as it connects).
  auto a = StartNode("node-a", dir_a.path(),
                     {"--peer", b->address(), "--sync-interval", "1h",
                      "--repair-bandwidth", "0.02"});
  ASSERT_TRUE(a);
  ASSERT_TRUE(WaitFor([&] {
    const v1::PeerStatus p = OnlyPeer(a->address());
    return p.sessions_ok() > 0 && !p.session_running();
  })) << a->Log();
  const int before = OnlyPeer(a->address()).history_size();
  // b follows no one: only a session brings these rows to it.
  LoadRows(a->address(), 3000);
  node::StreamCanceller canceller;
  v1::SyncRequest request;
  request.set_peer(b->address());
  const absl::Status s =
      Connect(a->address())
          ->Sync(
              request,
              [&](v1::SyncEvent& event) {
                if (event.peers(0).state() == "running" &&
                    event.peers(0).progress().rows_sent() > 0) {
                  canceller.Cancel();
                }
                return absl::OkStatus();
              },
              &canceller);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  v1::PeerStatus peer;
  ASSERT_TRUE(WaitFor([&] {
    peer = OnlyPeer(a->address());
    return peer.history_size() == before + 1;
  })) << a->Log();
  EXPECT_EQ(peer.history(0).trigger(), "requested");
  EXPECT_EQ(peer.history(0).outcome(),
            "CANCELLED: session stopped: the tool that asked for it went away");
  EXPECT_LT(Rows(b->address()), 3000u);
  EXPECT_EQ(a->Stop(), 0);
  EXPECT_EQ(b->Stop(), 0);
}

// `tally diff` and `tally repair` of a keyspace neither node
// has (the default `default`, say) name the keyspaces each node has.
TEST(Control, DiffAndRepairOfAnAbsentKeyspaceListTheKeyspacesThere) {
  TempDir dir_a, dir_b;
  auto a = StartNode("node-a", dir_a.path());
  auto b = StartNode("node-b", dir_b.path());
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(Connect(a->address())->Put("users", "k", "v").ok());
  ASSERT_TRUE(Connect(a->address())->Put("orders", "k", "v").ok());
  const std::string listed =
      absl::StrCat("; ", a->address(), " has orders, users; ", b->address(),
                   " has no keyspaces (choose one with --keyspace)");
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{"diff", a->address(), b->address()},
        std::vector<std::string>{"diff", a->address(), b->address(),
                                 "--third-party"},
        std::vector<std::string>{"repair", a->address(), b->address()},
        std::vector<std::string>{"repair", a->address(), b->address(),
                                 "--third-party"}}) {
    const CommandResult r = RunTally(command);
    EXPECT_EQ(r.exit_code, 2) << command.back() << r.out;
    EXPECT_THAT(r.err, HasSubstr("keyspace 'default' exists on neither "))
        << command.back();
    EXPECT_THAT(r.err, HasSubstr(listed)) << command.back();
  }
  EXPECT_EQ(a->Stop(), 0);
  EXPECT_EQ(b->Stop(), 0);
}

// `--all-keyspaces` diffs and repairs every keyspace either
// node has, a summary line each, with the worst exit code.
TEST(Control, DiffAndRepairOfAllKeyspacesGoKeyspaceByKeyspace) {
  TempDir dir_a, dir_b;
  auto a = StartNode("node-a", dir_a.path());
  auto b = StartNode("node-b", dir_b.path());
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(Connect(a->address())->Put("users", "k", "v").ok());
  ASSERT_TRUE(Connect(a->address())->Put("orders", "k", "v").ok());
  ASSERT_TRUE(Connect(b->address())->Put("items", "k", "v").ok());
  CommandResult r =
      RunTally({"diff", a->address(), b->address(), "--all-keyspaces"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  for (const char* keyspace : {"items", "orders", "users"}) {
    EXPECT_THAT(r.out, HasSubstr(absl::StrCat("1 key differs: keyspace '",
                                              keyspace, "'")))
        << r.out;
  }
  EXPECT_LT(r.out.find("keyspace 'items'"), r.out.find("keyspace 'orders'"));
  r = RunTally({"repair", a->address(), b->address(), "--all-keyspaces"});
  EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
  r = RunTally(
      {"diff", a->address(), b->address(), "--all-keyspaces", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"keyspace\":\"orders\""));
  EXPECT_THAT(r.out, HasSubstr("\"keyspace\":\"users\""));
  r = RunTally({"diff", a->address(), b->address(), "--all-keyspaces",
                "--keyspace", "users"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--all-keyspaces and --keyspace exclude each "
                               "other"));
  EXPECT_EQ(a->Stop(), 0);
  EXPECT_EQ(b->Stop(), 0);
}

// `count` rows of 10 kB, keys starting with `prefix`, into `address`.
void LoadBigRows(const std::string& address, const std::string& prefix,
                 int count) {
  int i = 0;
  auto loaded =
      Connect(address)->Load(kKeyspace, [&](std::string* k, std::string* v) {
        if (i == count) return false;
        *k = absl::StrFormat("%s-%05d", prefix, i++);
        *v = std::string(10'000, 'v');
        return true;
      });
  ASSERT_TRUE(loaded.ok()) << loaded.status();
}

// One repair limit for the whole node. Two peers each bring
// 1 MB at once; at 0.5 MB/s for the node (not per session) that takes at
// least 3 s (4 s of budget, less the 1 s an idle node may burst), where
// two sessions limited 0.5 MB/s each would be done in 2 s.
TEST(Control, TheNodeBandwidthIsSharedByAllItsSessions) {
  TempDir dir_a, dir_b, dir_c;
  auto b = StartNode("node-b", dir_b.path());
  auto c = StartNode("node-c", dir_c.path());
  ASSERT_TRUE(b && c);
  LoadBigRows(b->address(), "b", 100);
  LoadBigRows(c->address(), "c", 100);
  const absl::Time start = absl::Now();
  auto a = StartNode(
      "node-a", dir_a.path(),
      {"--peer", b->address(), "--peer", c->address(), "--sync-interval",
       "200ms", "--max-sessions", "2", "--node-bandwidth", "0.5"});
  ASSERT_TRUE(a);
  ASSERT_TRUE(WaitFor([&] { return Rows(a->address()) == 200; }))
      << Rows(a->address());
  EXPECT_GE(absl::Now() - start, absl::Seconds(3));
  EXPECT_EQ(a->Stop(), 0);
  EXPECT_EQ(b->Stop(), 0);
  EXPECT_EQ(c->Stop(), 0);
}

// `tally repair --bandwidth`: a limit for one repair, run by node A, and
// refused when it is not a number of MB/s.
TEST(Control, RepairBandwidthLimitsOneRepair) {
  TempDir dir_a, dir_b;
  auto a = StartNode("node-a", dir_a.path());
  auto b = StartNode("node-b", dir_b.path());
  ASSERT_TRUE(a && b);
  LoadBigRows(b->address(), "b", 150);  // 1.5 MB
  for (const char* bad : {"--bandwidth=-1", "--bandwidth=nan"}) {
    const CommandResult refused =
        RunTally({"repair", a->address(), b->address(), bad});
    EXPECT_EQ(refused.exit_code, 2) << bad;
    EXPECT_THAT(refused.err, HasSubstr("MB/s")) << bad;
  }
  EXPECT_EQ(Rows(a->address()), 0u);
  const absl::Time start = absl::Now();
  const CommandResult repaired =
      RunTally({"repair", a->address(), b->address(), "--bandwidth=0.5"});
  EXPECT_EQ(repaired.exit_code, 0) << repaired.err;
  // 1.5 MB at 0.5 MB/s, no burst for a repair's own limit.
  EXPECT_GE(absl::Now() - start, absl::Seconds(2.5));
  EXPECT_EQ(Rows(a->address()), 150u);
  EXPECT_EQ(a->Stop(), 0);
  EXPECT_EQ(b->Stop(), 0);
}

}  // namespace
}  // namespace tally
