// The mesh's multi-process tests: real tallyd processes on loopback wired
// into rings, full meshes and chains, converging through the change feed;
// a subscriber killed mid-stream, a publisher whose data is wiped, and a
// link cut by a proxy in between.
//
// Sessions run once at start-up and then only every hour (--sync-interval
// 1h), so that what converges a mesh within a test's seconds is the feed,
// unless a test says otherwise. Counters come from Admin.Status.
#include "support/mesh.h"

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/client/client.h"
#include "support/tcp_proxy.h"

namespace tally {
namespace {

using ::tally::testing::Mesh;
using ::tally::testing::TcpProxy;

constexpr char kKeyspace[] = "default";

// Fast writes (nothing here tests durability across machine crashes) and
// sessions only at start-up.
const std::vector<std::string> kFeedOnly = {"--sync-writes", "false",
                                            "--sync-interval", "1h"};

// ---------------------------------------------------------------- workload

struct Write {
  std::string key;
  std::string value;
  int node = 0;
  uint64_t hlc = 0;  // the version the node gave it
  std::string origin;
};

Write Planned(std::string key, std::string value, int node) {
  Write w;
  w.key = std::move(key);
  w.value = std::move(value);
  w.node = node;
  return w;
}

bool Newer(const Write& a, const Write& b) {
  return std::tie(a.hlc, a.origin) > std::tie(b.hlc, b.origin);
}

constexpr int kWriters = 8;
// Writes of each contested key, each at another node at about the same time.
constexpr int kWritesPerContestedKey = 4;

// Makes `total` writes at random nodes from kWriters threads: keys written
// once, and `contested_keys` keys written kWritesPerContestedKey times each
// from different nodes at about the same moment (their writes sit side by
// side in the plan, so different threads make them together). Returns every
// write with the version its node gave it.
std::vector<Write> WriteAtRandomNodes(Mesh& mesh, int total, int contested_keys,
                                      uint32_t seed) {
  std::mt19937 rng(seed);
  const int n = mesh.size();
  // Units of kWritesPerContestedKey writes, shuffled; a unit lands on that
  // many different threads because kWriters is a multiple of its size.
  std::vector<std::vector<Write>> units;
  for (int k = 0; k < contested_keys; ++k) {
    std::vector<Write> unit;
    const int first = static_cast<int>(rng() % n);
    for (int w = 0; w < kWritesPerContestedKey; ++w) {
      const int node = (first + w) % n;
      unit.push_back(Planned(absl::StrCat("contested-", k),
                             absl::StrCat("v", k, "-", w, "-at-", node), node));
    }
    units.push_back(std::move(unit));
  }
  const int single = total - contested_keys * kWritesPerContestedKey;
  for (int i = 0; i < single; i += kWritesPerContestedKey) {
    std::vector<Write> unit;
    for (int j = i; j < std::min(single, i + kWritesPerContestedKey); ++j) {
      const int node = static_cast<int>(rng() % n);
      unit.push_back(Planned(absl::StrFormat("key-%05d", j),
                             absl::StrCat("value-", j, "-at-", node), node));
    }
    units.push_back(std::move(unit));
  }
  std::shuffle(units.begin(), units.end(), rng);
  std::vector<Write> plan;
  for (auto& unit : units) {
    for (Write& w : unit) plan.push_back(std::move(w));
  }

  absl::Mutex mu;
  std::vector<std::string> errors;
  std::vector<std::thread> writers;
  for (int t = 0; t < kWriters; ++t) {
    writers.emplace_back([&, t] {
      for (size_t i = t; i < plan.size(); i += kWriters) {
        Write& w = plan[i];
        auto put = mesh.client(w.node).Put(kKeyspace, w.key, w.value);
        if (!put.ok()) {
          absl::MutexLock lock(&mu);
          errors.push_back(put.status().ToString());
          continue;
        }
        w.hlc = put->version().hlc();
        w.origin = put->version().origin();
      }
    });
  }
  for (std::thread& t : writers) t.join();
  EXPECT_THAT(errors, ::testing::IsEmpty());
  return plan;
}

// ------------------------------------------------------------- assertions

// The feed counters of every node, to check that they stay still.
std::vector<uint64_t> FeedCounters(Mesh& mesh) {
  std::vector<uint64_t> counters;
  for (int i = 0; i < mesh.size(); ++i) {
    auto status = mesh.Status(i);
    EXPECT_TRUE(status.ok()) << status.status();
    if (!status.ok()) continue;
    const v1::FeedTotals& f = status->feed();
    for (uint64_t c :
         {status->last_sequence(), f.sent(), f.skipped_own(),
          f.skipped_superseded(), f.received(), f.applied(), f.not_newer()}) {
      counters.push_back(c);
    }
    for (const v1::PeerStatus& p : status->peers()) {
      for (uint64_t c : {p.feed_received(), p.feed_applied(), p.feed_position(),
                         p.rows_received()}) {
        counters.push_back(c);
      }
    }
  }
  return counters;
}

// The assertions of the topology tests, after WriteAtRandomNodes:
//  - every root becomes equal, with every key;
//  - every key holds its last-writer-wins winner on every node;
//  - each change is applied at most once per node: what a node applied
//    (feed and sessions) is at most the changes born elsewhere, and its log
//    (one entry per change it wrote or applied) at most all changes;
//  - the feed sends each change over each link at most once: entries sent
//    over all nodes <= links x changes;
//  - once converged, the mesh is quiet: the counters stay still for 2 s.
void ExpectConvergedOnWinners(Mesh& mesh, const std::vector<Write>& writes) {
  const uint64_t changes = writes.size();
  std::map<std::string, const Write*> winner;
  for (const Write& w : writes) {
    const Write*& best = winner[w.key];
    if (best == nullptr || Newer(w, *best)) best = &w;
  }
  const absl::Time start = absl::Now();
  ASSERT_TRUE(
      Mesh::WaitUntil([&] { return mesh.RootsEqual(kKeyspace, winner.size()); },
                      absl::Seconds(60)))
      << "rows on node 0: " << mesh.Root(0, kKeyspace).second << " of "
      << winner.size();
  std::printf(
      "[ mesh ] %d nodes, %d links: converged %.2f s after the "
      "last write\n",
      mesh.size(), mesh.links(), absl::ToDoubleSeconds(absl::Now() - start));

  // Last writer wins, on every node: every key fetched from each node.
  v1::FetchRowsRequest fetch;
  fetch.set_keyspace(kKeyspace);
  for (const auto& [key, w] : winner) fetch.add_keys(key);
  for (int i = 0; i < mesh.size(); ++i) {
    int wrong = 0;
    std::string example;
    const absl::Status fetched = mesh.client(i).FetchRows(
        fetch, [&](const v1::FetchRowsResponse& response) {
          wrong += response.missing_size();
          for (const v1::Row& row : response.rows()) {
            const Write* w = winner.at(row.key());
            if (row.version().hlc() == w->hlc &&
                row.version().origin() == w->origin &&
                row.value() == w->value) {
              continue;
            }
            if (wrong++ == 0) {
              example = absl::StrCat(row.key(), " holds ", row.value(),
                                     ", not ", w->value);
            }
          }
          return absl::OkStatus();
        });
    ASSERT_TRUE(fetched.ok()) << fetched;
    EXPECT_EQ(wrong, 0) << "node " << i << ", e.g. " << example;
  }
  // At most once per node; at most once per link.
  uint64_t sent = 0;
  uint64_t received = 0;
  uint64_t session_rows = 0;
  for (int i = 0; i < mesh.size(); ++i) {
    auto status = mesh.Status(i);
    ASSERT_TRUE(status.ok()) << status.status();
    const uint64_t born_here =
        std::count_if(writes.begin(), writes.end(),
                      [i](const Write& w) { return w.node == i; });
    uint64_t applied = 0;
    uint64_t repaired = 0;
    for (const v1::PeerStatus& p : status->peers()) {
      applied += p.feed_applied();
      repaired += p.rows_received();
      received += p.feed_received();
      // Over one link, each change at most once.
      EXPECT_LE(p.feed_received(), changes - born_here)
          << "node " << i << " from " << p.address();
    }
    EXPECT_EQ(status->feed().applied(), applied) << "node " << i;
    EXPECT_LE(applied + repaired, changes - born_here) << "node " << i;
    EXPECT_LE(status->last_sequence(), changes) << "node " << i;
    EXPECT_GE(status->last_sequence(), winner.size()) << "node " << i;
    sent += status->feed().sent();
    session_rows += repaired;
  }
  const uint64_t bound = static_cast<uint64_t>(mesh.links()) * changes;
  EXPECT_GT(sent, 0u);
  EXPECT_LE(sent, bound);
  EXPECT_LE(received, sent);
  std::printf(
      "[ mesh ] %llu changes, %zu keys: feed entries sent %llu, "
      "received %llu (bound links x changes = %llu); rows repaired "
      "by sessions %llu\n",
      static_cast<unsigned long long>(changes), winner.size(),
      static_cast<unsigned long long>(sent),
      static_cast<unsigned long long>(received),
      static_cast<unsigned long long>(bound),
      static_cast<unsigned long long>(session_rows));

  // Quiet: no echoes, nothing moving.
  const std::vector<uint64_t> before = FeedCounters(mesh);
  absl::SleepFor(absl::Seconds(2));
  EXPECT_EQ(FeedCounters(mesh), before);
}

// Waits until every feed is connected and the start-up sessions are over.
void WaitForFeeds(Mesh& mesh) {
  ASSERT_TRUE(
      Mesh::WaitUntil([&] { return mesh.FeedsConnected(); }, absl::Seconds(20)))
      << "feeds did not connect";
  ASSERT_TRUE(
      Mesh::WaitUntil([&] { return mesh.SessionsIdle(); }, absl::Seconds(20)))
      << "start-up sessions did not finish";
}

// Starts `mesh` with `links` and waits for its feeds.
void StartAndConnect(Mesh& mesh,
                     const std::vector<std::pair<int, int>>& links) {
  for (auto [follower, publisher] : links) mesh.Follow(follower, publisher);
  ASSERT_TRUE(mesh.StartAll().ok());
  WaitForFeeds(mesh);
}

// -------------------------------------------------------------- topologies

TEST(Mesh, RingOfFiveConvergesOnLastWriterWinsWithoutEchoes) {
  Mesh mesh("ring", 5, kFeedOnly);
  StartAndConnect(mesh, testing::RingLinks(5));
  const std::vector<Write> writes =
      WriteAtRandomNodes(mesh, 5000, /*contested_keys=*/300, /*seed=*/1);
  ExpectConvergedOnWinners(mesh, writes);
}

TEST(Mesh, FullMeshOfFourConvergesOnLastWriterWinsWithoutEchoes) {
  Mesh mesh("full", 4, kFeedOnly);
  StartAndConnect(mesh, testing::FullMeshLinks(4));
  const std::vector<Write> writes =
      WriteAtRandomNodes(mesh, 5000, /*contested_keys=*/300, /*seed=*/2);
  ExpectConvergedOnWinners(mesh, writes);
}

TEST(Mesh, ChainOfFourConvergesOnLastWriterWinsWithoutEchoes) {
  Mesh mesh("chain", 4, kFeedOnly);
  StartAndConnect(mesh, testing::ChainLinks(4));
  const std::vector<Write> writes =
      WriteAtRandomNodes(mesh, 5000, /*contested_keys=*/300, /*seed=*/3);
  ExpectConvergedOnWinners(mesh, writes);
}

// ------------------------------------------------------------------ faults

// Loads keys key-00000.. [first, first + count) at node i in one stream.
void Load(Mesh& mesh, int i, int first, int count) {
  int k = first;
  auto loaded =
      mesh.client(i).Load(kKeyspace, [&](std::string* key, std::string* v) {
        if (k >= first + count) return false;
        *key = absl::StrFormat("key-%06d", k);
        *v = absl::StrCat("value-", k, std::string(40, 'x'));
        ++k;
        return true;
      });
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->rows(), static_cast<uint64_t>(count));
}

// Node i's status of its feed from (and sessions with) `address`.
v1::PeerStatus PeerOf(Mesh& mesh, int i, const std::string& address) {
  auto status = mesh.Status(i);
  EXPECT_TRUE(status.ok()) << status.status();
  if (status.ok()) {
    for (const v1::PeerStatus& p : status->peers()) {
      if (p.address() == address) return p;
    }
  }
  ADD_FAILURE() << "node " << i << " has no peer " << address;
  return v1::PeerStatus();
}

TEST(Mesh, SubscriberKilledMidStreamResumesFromItsStoredProgress) {
  // Node 1 follows node 0; node 0 takes a stream of loaded rows and node 1
  // is killed with SIGKILL while they flow to it.
  constexpr int kRows = 60000;
  Mesh mesh("kill", 2, kFeedOnly);
  StartAndConnect(mesh, {{1, 0}});
  std::thread loader([&] { Load(mesh, 0, 0, kRows); });
  uint64_t position_before = 0;
  Mesh::WaitUntil(
      [&] {
        position_before = PeerOf(mesh, 1, mesh.address(0)).feed_position();
        return position_before >= kRows / 5;
      },
      absl::Seconds(30));
  mesh.Kill(1);
  loader.join();
  ASSERT_GE(position_before, static_cast<uint64_t>(kRows / 5));
  ASSERT_LT(position_before, static_cast<uint64_t>(kRows))
      << "the feed finished before the kill; nothing was mid-stream";

  ASSERT_TRUE(mesh.Start(1).ok());
  ASSERT_TRUE(Mesh::WaitUntil([&] { return mesh.RootsEqual(kKeyspace, kRows); },
                              absl::Seconds(30)));
  // Let the counters settle: the feed's last batch counted, the start-up
  // session (which may race the feed for the missing rows) over.
  v1::PeerStatus after;
  ASSERT_TRUE(Mesh::WaitUntil(
      [&] {
        after = PeerOf(mesh, 1, mesh.address(0));
        return after.feed_position() == kRows && after.sessions_ok() > 0 &&
               !after.session_running();
      },
      absl::Seconds(20)))
      << after.DebugString();
  auto status = mesh.Status(1);
  ASSERT_TRUE(status.ok());
  // Nothing applied twice over both lives: node 1 writes nothing itself, so
  // its log holds exactly the changes it applied, one entry each.
  EXPECT_EQ(status->last_sequence(), static_cast<uint64_t>(kRows));
  // It resumed from its stored position (at or after the one seen before
  // the kill), not from the start of the log: since the restart it
  // received at most what lay after that position. Nor from the head (the
  // publisher took no writes after the kill): it received something.
  EXPECT_GT(after.feed_received(), 0u);
  EXPECT_LE(after.feed_received(), kRows - position_before);
  EXPECT_EQ(after.feed_position(), static_cast<uint64_t>(kRows));
  EXPECT_EQ(after.feed_applied() + after.feed_not_newer(),
            after.feed_received());
  // Each missing row was applied once, by the feed or by the start-up
  // session (which may race it); without the session every change the feed
  // brought was new.
  EXPECT_GE(after.feed_applied() + after.rows_received(),
            after.feed_received());
  // The publisher's side agrees: the subscription it serves now (the one
  // since the restart) sent exactly what node 1 received since then.
  std::vector<v1::FeedSubscriptionStatus> served;
  EXPECT_TRUE(Mesh::WaitUntil(
      [&] {
        served.clear();
        auto publisher = mesh.Status(0);
        if (!publisher.ok()) return false;
        for (const v1::FeedSubscriptionStatus& s : publisher->subscriptions()) {
          if (s.subscriber() == mesh.name(1)) served.push_back(s);
        }
        return served.size() == 1 && served[0].position() == kRows;
      },
      absl::Seconds(10)));
  if (served.size() == 1) {
    EXPECT_EQ(served[0].sent(), after.feed_received());
  }
  if (after.rows_received() == 0) {
    EXPECT_EQ(after.feed_not_newer(), 0u);
  }
  std::printf(
      "[ mesh ] killed at position >= %llu of %d; after restart the "
      "feed brought %llu (applied %llu), the start-up session %llu\n",
      static_cast<unsigned long long>(position_before), kRows,
      static_cast<unsigned long long>(after.feed_received()),
      static_cast<unsigned long long>(after.feed_applied()),
      static_cast<unsigned long long>(after.rows_received()));
}

TEST(Mesh, WipedPublisherIsRefilledAndItsSubscribersFollowItsNewEpoch) {
  // Node 0 and its two subscribers follow each other both ways.
  constexpr int kRows = 2000;
  Mesh mesh("wipe", 3, kFeedOnly);
  StartAndConnect(mesh, {{0, 1}, {1, 0}, {0, 2}, {2, 0}});
  Load(mesh, 0, 0, kRows);
  ASSERT_TRUE(Mesh::WaitUntil([&] { return mesh.RootsEqual(kKeyspace, kRows); },
                              absl::Seconds(30)));
  auto old_status = mesh.Status(0);
  ASSERT_TRUE(old_status.ok());
  const uint64_t sessions_before[] = {
      PeerOf(mesh, 1, mesh.address(0)).sessions_ok(),
      PeerOf(mesh, 2, mesh.address(0)).sessions_ok()};

  ASSERT_EQ(mesh.Stop(0), 0);
  mesh.WipeData(0);
  ASSERT_TRUE(mesh.Start(0).ok());
  auto new_status = mesh.Status(0);
  ASSERT_TRUE(new_status.ok());
  EXPECT_NE(new_status->epoch(), old_status->epoch());

  // The wiped node is filled again from its peers by anti-entropy.
  ASSERT_TRUE(Mesh::WaitUntil([&] { return mesh.RootsEqual(kKeyspace, kRows); },
                              absl::Seconds(30)))
      << "node 0 holds " << mesh.Root(0, kKeyspace).second << " rows";
  // Its subscribers noticed the new epoch and fell back to a session each,
  // long before their hourly one.
  for (int s : {1, 2}) {
    EXPECT_TRUE(Mesh::WaitUntil(
        [&] {
          return PeerOf(mesh, s, mesh.address(0)).sessions_ok() >
                 sessions_before[s - 1];
        },
        absl::Seconds(10)))
        << "node " << s << " ran no session with the wiped node";
  }
  // And they follow its new log.
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(
        mesh.client(0).Put(kKeyspace, absl::StrCat("after-", i), "v").ok());
  }
  ASSERT_TRUE(
      Mesh::WaitUntil([&] { return mesh.RootsEqual(kKeyspace, kRows + 100); },
                      absl::Seconds(20)));
  for (int s : {1, 2}) {
    EXPECT_GE(PeerOf(mesh, s, mesh.address(0)).feed_received(), 100u);
  }
}

// Node 1 follows node 0 through a proxy that cuts the link while node 0
// takes writes. Sessions run only at start-up, so what delivers the writes
// after the cut is the feed resuming.
void CutLinkTest(TcpProxy::CutMode mode, absl::Duration cut_for) {
  Mesh mesh("cut", 2, kFeedOnly);
  auto proxy = TcpProxy::Start(mesh.address(0));
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  mesh.FollowAddress(1, (*proxy)->address());
  ASSERT_TRUE(mesh.StartAll().ok());
  WaitForFeeds(mesh);
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(
        mesh.client(0).Put(kKeyspace, absl::StrCat("before-", i), "v").ok());
  }
  ASSERT_TRUE(Mesh::WaitUntil([&] { return mesh.RootsEqual(kKeyspace, 100); },
                              absl::Seconds(20)));
  const std::string via = (*proxy)->address();
  const v1::PeerStatus before = PeerOf(mesh, 1, via);

  (*proxy)->Cut(mode);
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(
        mesh.client(0).Put(kKeyspace, absl::StrCat("during-", i), "v").ok());
  }
  absl::SleepFor(cut_for);
  EXPECT_EQ(mesh.Root(1, kKeyspace).second, 100u) << "the cut let rows by";
  (*proxy)->Heal();

  const absl::Time healed = absl::Now();
  ASSERT_TRUE(Mesh::WaitUntil([&] { return mesh.RootsEqual(kKeyspace, 300); },
                              absl::Seconds(40)))
      << "node 1 holds " << mesh.Root(1, kKeyspace).second << " rows";
  std::printf(
      "[ mesh ] the rows written during the cut arrived %.2f s after "
      "it healed\n",
      absl::ToDoubleSeconds(absl::Now() - healed));
  const v1::PeerStatus after = PeerOf(mesh, 1, via);
  // The feed brought them, exactly once each, from where it stopped: no
  // session ran meanwhile.
  EXPECT_EQ(after.sessions_ok() + after.sessions_failed(),
            before.sessions_ok() + before.sessions_failed());
  EXPECT_EQ(after.rows_received(), before.rows_received());
  EXPECT_EQ(after.feed_received(), before.feed_received() + 200);
  EXPECT_EQ(after.feed_applied(), before.feed_applied() + 200);
  EXPECT_GT(after.feed_reconnects(), before.feed_reconnects());
}

TEST(Mesh, LinkCutByResetsDeliversTheWritesMadeMeanwhileOnceItHeals) {
  CutLinkTest(TcpProxy::CutMode::kReset, absl::Seconds(2));
}

TEST(Mesh, SilentlyDeadLinkDeliversTheWritesMadeMeanwhileOnceItHeals) {
  CutLinkTest(TcpProxy::CutMode::kBlackhole, absl::Seconds(2));
}

}  // namespace
}  // namespace tally
