// Real tallyd processes against damage and bad clocks: a byte flipped in a
// node's table file is never served and is repaired from its peer; a node
// whose clock runs 600 s behind deletes rows while a peer is down, and the
// rows do not come back when it returns.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/client/client.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "tests/disk_damage.h"
#include "tests/node_connect.h"

namespace tally {
namespace {

using ::tally::node::NodeClient;
using ::tally::testing::Connect;
using ::tally::testing::FlipByteInTable;
using ::tally::testing::FreeLoopbackAddress;
using ::tally::testing::NodeProcess;
using ::tally::testing::TempDir;

constexpr char kKeyspace[] = "default";

std::unique_ptr<NodeProcess> StartNode(const std::string& name,
                                       const std::string& dir,
                                       const std::vector<std::string>& extra,
                                       const std::string& listen) {
  auto node = NodeProcess::Start(name, dir, extra, listen);
  EXPECT_TRUE(node.ok()) << node.status();
  return node.ok() ? std::move(*node) : nullptr;
}

// Incompressible, so that a flipped byte in a table stays one.
std::string ValueOf(int i) {
  return ::tally::testing::IncompressibleValue(4242 + i, 64,
                                               absl::StrCat("value-", i, "-"));
}

std::string KeyState(NodeClient& client, const std::string& key) {
  auto got = client.Get(kKeyspace, key);
  if (!got.ok()) return absl::IsNotFound(got.status()) ? "absent" : "error";
  return got->row().deleted() ? "tombstone" : "live";
}

bool Eventually(const std::function<bool()>& condition,
                absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return condition();
}

TEST(Integrity, AFlippedValueIsNeverServedAndIsRepairedFromThePeer) {
  constexpr int kRows = 3000;
  TempDir dir_a, dir_b;
  const std::string addr_a = FreeLoopbackAddress();
  const std::string addr_b = FreeLoopbackAddress();
  auto flags = [](const std::string& peer, const std::string& scrub) {
    return std::vector<std::string>{
        "--sync-writes",    "false", "--sync-interval", "1s",
        "--scrub-interval", scrub,   "--peer",          peer};
  };
  auto a = StartNode("site-a", dir_a.path(), flags(addr_b, "0"), addr_a);
  auto b = StartNode("site-b", dir_b.path(), flags(addr_a, "0"), addr_b);
  ASSERT_TRUE(a && b);
  {
    // Enough rows that a session lists only the ranges around a difference
    // (k23 is then found by the scrubber alone).
    auto client = Connect(addr_a);
    for (int i = 0; i < kRows; ++i) {
      ASSERT_TRUE(
          client->Put(kKeyspace, absl::StrCat("k", i), ValueOf(i)).ok());
    }
    auto peer = Connect(addr_b);
    ASSERT_TRUE(Eventually(
        [&] {
          auto got = peer->Get(kKeyspace, absl::StrCat("k", kRows - 1));
          return got.ok() && got->row().value() == ValueOf(kRows - 1);
        },
        absl::Seconds(15)));
  }
  // Twice stopped: the second open turns site-a's log into a table file.
  ASSERT_EQ(a->Stop(), 0);
  a = StartNode("site-a", dir_a.path(), flags(addr_b, "0"), addr_a);
  ASSERT_TRUE(a);
  ASSERT_EQ(a->Stop(), 0);
  // k7 will be read; k23 is read by nobody but the scrubber.
  ASSERT_TRUE(FlipByteInTable(dir_a.path(), ValueOf(7)));
  ASSERT_TRUE(FlipByteInTable(dir_a.path(), ValueOf(23)));

  a = StartNode("site-a", dir_a.path(), flags(addr_b, "1s"), addr_a);
  ASSERT_TRUE(a);
  auto client = Connect(addr_a);
  // Every answer is the right value or DATA_LOSS, never the damaged bytes.
  bool saw_data_loss = false;
  auto sound = [&](int i) {
    auto got = client->Get(kKeyspace, absl::StrCat("k", i));
    if (got.status().code() == absl::StatusCode::kDataLoss) {
      saw_data_loss = true;
      return false;
    }
    EXPECT_TRUE(got.ok()) << got.status();
    if (!got.ok()) return false;
    EXPECT_EQ(got->row().value(), ValueOf(i)) << "k" << i;
    return got->row().value() == ValueOf(i);
  };
  (void)sound(7);
  EXPECT_TRUE(saw_data_loss) << "the damaged k7 was served";
  ASSERT_TRUE(Eventually([&] { return sound(7); }, absl::Seconds(30)))
      << a->Log();
  // k23 is left unread until the scrubber has found it.
  ASSERT_TRUE(Eventually(
      [&] {
        auto status = client->Status();
        return status.ok() && status->scrub().damaged_rows_found() >= 1;
      },
      absl::Seconds(30)))
      << a->Log();
  // Then the next session brings site-b's copy.
  ASSERT_TRUE(Eventually(
      [&] {
        auto status = client->Status();
        return status.ok() && status->scrub().damaged_rows() == 0;
      },
      absl::Seconds(30)))
      << a->Log();
  EXPECT_TRUE(sound(23));
  // The scrubber found k23 part way through its pass, and the session may
  // repair it before the pass ends: wait for the whole pass before
  // counting what it checked.
  ASSERT_TRUE(Eventually(
      [&] {
        auto status = client->Status();
        return status.ok() && status->scrub().passes() >= 1;
      },
      absl::Seconds(30)))
      << a->Log();
  auto status = client->Status();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_GE(status->scrub().damaged_rows_found(), 1u);  // k23
  EXPECT_GE(status->scrub().rows_checked(), static_cast<uint64_t>(kRows - 1));
  for (int i = 0; i < kRows; ++i) ASSERT_TRUE(sound(i)) << i;
  // The peer was never handed the damage.
  auto peer = Connect(addr_b);
  for (int i : {7, 23}) {
    auto got = peer->Get(kKeyspace, absl::StrCat("k", i));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->row().value(), ValueOf(i));
  }
  EXPECT_EQ(a->Stop(), 0);
  EXPECT_EQ(b->Stop(), 0);
}

// A run of bad bytes inside a compressed block of rows: LevelDB cannot
// decode the block at all. Before, the node started without complaint,
// every session failed with DATA_LOSS ("reading a row before writing it",
// logged at INFO), the first compaction over the block then failed and the
// store refused every write, at every restart, until an operator ran
// `tally recover`. Now the node salvages the table itself (a restart in
// its own process) and its peer refills the rows of the damaged block.
TEST(Integrity, AnUndecodableBlockIsSalvagedAndRefilledFromThePeer) {
  constexpr int kRows = 4000;
  TempDir dir_a, dir_b;
  const std::string addr_a = FreeLoopbackAddress();
  const std::string addr_b = FreeLoopbackAddress();
  auto flags = [](const std::string& peer) {
    return std::vector<std::string>{
        "--sync-writes", "false", "--sync-interval", "1s", "--peer", peer};
  };
  // Compressible but for a random tail: snappy blocks, which a bad byte
  // run makes undecodable, and a tail to find a row's block by.
  auto value_of = [](int i) {
    return ::tally::testing::IncompressibleValue(
        7000 + i, 150, absl::StrCat("value-", i, "-", std::string(100, 'v')));
  };
  auto a = StartNode("site-a", dir_a.path(), flags(addr_b), addr_a);
  auto b = StartNode("site-b", dir_b.path(), flags(addr_a), addr_b);
  ASSERT_TRUE(a && b);
  {
    auto client = Connect(addr_a);
    for (int i = 0; i < kRows; ++i) {
      ASSERT_TRUE(
          client->Put(kKeyspace, absl::StrCat("k", i), value_of(i)).ok());
    }
    auto peer = Connect(addr_b);
    ASSERT_TRUE(Eventually(
        [&] {
          auto got = peer->Get(kKeyspace, absl::StrCat("k", kRows - 1));
          return got.ok() && got->row().value() == value_of(kRows - 1);
        },
        absl::Seconds(15)));
  }
  // Twice stopped: the second open turns site-a's log into a table file.
  ASSERT_EQ(a->Stop(), 0);
  a = StartNode("site-a", dir_a.path(), flags(addr_b), addr_a);
  ASSERT_TRUE(a);
  ASSERT_EQ(a->Stop(), 0);
  // A row's block: the last copy of a value's text in the table (rows sort
  // after the change log's entries).
  std::vector<std::filesystem::path> tables;
  for (const auto& e : std::filesystem::directory_iterator(dir_a.path())) {
    if (e.path().extension() == ".ldb") tables.push_back(e.path());
  }
  ASSERT_EQ(tables.size(), 1u);
  std::string bytes;
  {
    std::ifstream in(tables.front(), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in),
                 std::istreambuf_iterator<char>());
  }
  const std::string value = value_of(kRows / 2);
  const size_t row_at = bytes.rfind(value.substr(value.size() - 24));
  ASSERT_NE(row_at, std::string::npos);
  ASSERT_EQ(::tally::testing::InvertByteRun(dir_a.path(), row_at, 64), 1);

  a = StartNode("site-a", dir_a.path(), flags(addr_b), addr_a);
  ASSERT_TRUE(a);
  auto client = Connect(addr_a);
  // Every row comes back with site-b's value: read, written and compacted
  // past the damage.
  auto all_sound = [&] {
    for (int i = 0; i < kRows; ++i) {
      auto got = client->Get(kKeyspace, absl::StrCat("k", i));
      if (!got.ok() || got->row().value() != value_of(i)) return false;
    }
    return true;
  };
  ASSERT_TRUE(Eventually(all_sound, absl::Seconds(60))) << a->Log();
  EXPECT_THAT(a->Log(), ::testing::HasSubstr("salvaged"));
  // And it takes writes, which reach the peer.
  ASSERT_TRUE(client->Put(kKeyspace, "after", "v").ok());
  auto peer = Connect(addr_b);
  EXPECT_TRUE(Eventually([&] { return peer->Get(kKeyspace, "after").ok(); },
                         absl::Seconds(15)));
  EXPECT_TRUE(std::filesystem::exists(dir_a.path() + "/lost"));
  EXPECT_EQ(a->Stop(), 0);
  EXPECT_EQ(b->Stop(), 0);
}

TEST(Integrity, DeletesOfANodeWhoseClockIsBehindAreNotResurrected) {
  constexpr int kNodes = 4;
  constexpr int kSlow = 0;  // its clock runs 600 s behind
  constexpr int kDown = 3;  // down while the rows are deleted
  constexpr int kRows = 50;
  std::vector<std::string> addresses;
  for (int i = 0; i < kNodes; ++i) addresses.push_back(FreeLoopbackAddress());
  std::vector<TempDir> dirs(kNodes);
  auto start = [&](int i) {
    std::vector<std::string> flags = {
        "--sync-writes",          "false", "--sync-interval",  "1s",
        "--tombstone-min-age",    "1s",    "--max-clock-skew", "1s",
        "--maintenance-interval", "200ms", "--scrub-interval", "0"};
    if (i == kSlow) flags.push_back("--test-clock-offset=-600s");
    for (int j = 0; j < kNodes; ++j) {
      if (j != i) flags.insert(flags.end(), {"--peer", addresses[j]});
    }
    return StartNode(absl::StrCat("site-", i), dirs[i].path(), flags,
                     addresses[i]);
  };
  std::vector<std::unique_ptr<NodeProcess>> nodes;
  for (int i = 0; i < kNodes; ++i) nodes.push_back(start(i));
  for (const auto& n : nodes) ASSERT_TRUE(n);
  std::vector<std::unique_ptr<NodeClient>> clients;
  for (const std::string& a : addresses) clients.push_back(Connect(a));
  auto all_in_state = [&](int node, const std::string& state) {
    for (int k = 0; k < kRows; ++k) {
      if (KeyState(*clients[node], absl::StrCat("k", k)) != state) {
        return false;
      }
    }
    return true;
  };

  for (int k = 0; k < kRows; ++k) {
    ASSERT_TRUE(clients[kSlow]->Put(kKeyspace, absl::StrCat("k", k), "v").ok());
  }
  for (int i = 0; i < kNodes; ++i) {
    ASSERT_TRUE(
        Eventually([&] { return all_in_state(i, "live"); }, absl::Seconds(15)))
        << i;
  }
  // The slow node knows it is behind.
  ASSERT_TRUE(Eventually(
      [&] {
        auto s = clients[kSlow]->Status();
        return s.ok() && s->clock_behind_seconds() > 590;
      },
      absl::Seconds(10)));
  EXPECT_NE(nodes[kSlow]->Log().find("behind"), std::string::npos);
  auto fast = clients[1]->Status();
  ASSERT_TRUE(fast.ok());
  EXPECT_LT(fast->clock_behind_seconds(), 5);

  // One node goes down; the slow node deletes the rows meanwhile. Its
  // tombstones look 600 s old everywhere they arrive.
  ASSERT_EQ(nodes[kDown]->Stop(), 0);
  for (int k = 0; k < kRows; ++k) {
    ASSERT_TRUE(clients[kSlow]->Delete(kKeyspace, absl::StrCat("k", k)).ok());
  }
  auto none_live = [&](int node) {
    for (int k = 0; k < kRows; ++k) {
      if (KeyState(*clients[node], absl::StrCat("k", k)) == "live") {
        return false;
      }
    }
    return true;
  };
  for (int i = 0; i < kNodes; ++i) {
    if (i == kDown) continue;
    ASSERT_TRUE(Eventually([&] { return none_live(i); }, absl::Seconds(15)))
        << i;
  }
  // Well past the minimum age, with sessions every second between the live
  // nodes: no tombstone may go while a peer has not synced.
  absl::SleepFor(absl::Seconds(4));
  for (int i = 0; i < kNodes; ++i) {
    if (i == kDown) continue;
    EXPECT_TRUE(all_in_state(i, "tombstone")) << i;
    EXPECT_EQ(clients[i]->Status()->tombstones_purged(), 0u) << i;
  }

  // The down node comes back with the live rows: they must not come back
  // on the others; it takes the deletes instead.
  nodes[kDown] = start(kDown);
  ASSERT_TRUE(nodes[kDown]);
  bool resurrected = false;
  auto settled = [&] {
    bool none_live = true;
    for (int i = 0; i < kNodes; ++i) {
      for (int k = 0; k < kRows; ++k) {
        if (KeyState(*clients[i], absl::StrCat("k", k)) == "live") {
          none_live = false;
          if (i != kDown) resurrected = true;
        }
      }
    }
    return none_live;
  };
  EXPECT_TRUE(Eventually(settled, absl::Seconds(30)));
  EXPECT_FALSE(resurrected);
  absl::SleepFor(absl::Seconds(2));
  EXPECT_TRUE(settled());
  EXPECT_FALSE(resurrected);
  for (auto& n : nodes) EXPECT_EQ(n->Stop(), 0);
}

}  // namespace
}  // namespace tally
