// Dropping a keyspace in a running mesh (`tally keyspaces drop`), with real
// tallyd processes and the real tally: a keyspace made by a typo spreads to
// every node; dropped everywhere it is gone for good (sessions and feeds
// never bring it back) while the other keyspaces flow on; dropped on one
// node only, both sides say so, and the feed of the node that still holds
// it is not held back by its rows.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/client/client.h"
#include "support/mesh.h"
#include "support/process.h"

namespace tally {
namespace {

using ::tally::testing::CommandResult;
using ::tally::testing::Mesh;
using ::tally::testing::RunTally;
using ::testing::HasSubstr;

// Sessions every second (so that a test sees several), fast writes.
const std::vector<std::string> kFlags = {"--sync-writes", "false",
                                         "--sync-interval", "1s"};

std::string Key(int i) { return absl::StrFormat("k%05d", i); }

void PutRows(Mesh& mesh, int node, const std::string& keyspace, int first,
             int count) {
  for (int i = first; i < first + count; ++i) {
    ASSERT_TRUE(mesh.client(node).Put(keyspace, Key(i), "v").ok());
  }
}

bool Holds(Mesh& mesh, int node, const std::string& keyspace) {
  absl::StatusOr<v1::StatusResponse> s = mesh.Status(node);
  if (!s.ok()) return false;
  for (const v1::KeyspaceSummary& ks : s->keyspaces()) {
    if (ks.name() == keyspace) return true;
  }
  return false;
}

bool ListsDropped(Mesh& mesh, int node, const std::string& keyspace) {
  absl::StatusOr<v1::StatusResponse> s = mesh.Status(node);
  if (!s.ok()) return false;
  for (const v1::DroppedKeyspace& ks : s->dropped_keyspaces()) {
    if (ks.name() == keyspace) return true;
  }
  return false;
}

// The node's trouble record of `keyspace` (empty if none).
v1::KeyspaceTroubleStatus Trouble(Mesh& mesh, int node,
                                  const std::string& keyspace) {
  absl::StatusOr<v1::StatusResponse> s = mesh.Status(node);
  if (s.ok()) {
    for (const v1::KeyspaceTroubleStatus& t : s->keyspace_trouble()) {
      if (t.keyspace() == keyspace) return t;
    }
  }
  return v1::KeyspaceTroubleStatus{};
}

// Sessions with every peer that succeeded, summed.
uint64_t SessionsOk(Mesh& mesh, int node) {
  absl::StatusOr<v1::StatusResponse> s = mesh.Status(node);
  uint64_t ok = 0;
  if (s.ok()) {
    for (const v1::PeerStatus& p : s->peers()) ok += p.sessions_ok();
  }
  return ok;
}

TEST(KeyspaceDrop, ATypoDroppedEverywhereStaysGoneWhileTheRestFlows) {
  Mesh mesh("drop", 3, kFlags);
  for (auto [follower, publisher] : testing::FullMeshLinks(3)) {
    mesh.Follow(follower, publisher);
  }
  ASSERT_TRUE(mesh.StartAll().ok());
  ASSERT_NO_FATAL_FAILURE(PutRows(mesh, 0, "users", 0, 100));
  // The typo: created on node 1 on purpose, carried to every node.
  const CommandResult typo =
      RunTally({"--node", mesh.address(1), "--keyspace", "usres", "put",
                "k-typo", "v", "--create-keyspace"});
  ASSERT_EQ(typo.exit_code, 0) << typo.err;
  ASSERT_NO_FATAL_FAILURE(PutRows(mesh, 1, "usres", 0, 300));
  ASSERT_TRUE(Mesh::WaitUntil(
      [&] {
        return mesh.RootsEqual("usres", 301) && mesh.RootsEqual("users", 100);
      },
      absl::Seconds(30)));

  // Without --yes nothing is dropped.
  const CommandResult unconfirmed =
      RunTally({"--node", mesh.address(0), "keyspaces", "drop", "usres",
                "--everywhere"});
  EXPECT_EQ(unconfirmed.exit_code, 2);
  EXPECT_THAT(unconfirmed.err, HasSubstr("--yes"));
  EXPECT_TRUE(Holds(mesh, 0, "usres"));

  const CommandResult dropped =
      RunTally({"--node", mesh.address(0), "keyspaces", "drop", "usres",
                "--yes", "--everywhere"});
  ASSERT_EQ(dropped.exit_code, 0) << dropped.out << dropped.err;
  for (int i = 0; i < 3; ++i) {
    EXPECT_THAT(dropped.out,
                HasSubstr(absl::StrCat("on node ", mesh.address(i))));
  }
  EXPECT_THAT(dropped.out, HasSubstr("301 rows removed"));

  // Writes go on in the other keyspace, on every node, while sessions run.
  const uint64_t sessions_before = SessionsOk(mesh, 2);
  for (int node = 0; node < 3; ++node) {
    ASSERT_NO_FATAL_FAILURE(PutRows(mesh, node, "users", 100 + node * 50, 50));
  }
  ASSERT_TRUE(Mesh::WaitUntil(
      [&] {
        return mesh.RootsEqual("users", 250) &&
               SessionsOk(mesh, 2) >= sessions_before + 4;
      },
      absl::Seconds(30)));
  for (int node = 0; node < 3; ++node) {
    EXPECT_FALSE(Holds(mesh, node, "usres")) << node;
    EXPECT_TRUE(ListsDropped(mesh, node, "usres")) << node;
    EXPECT_FALSE(Trouble(mesh, node, "usres").in_trouble()) << node;
  }

  // A writer that names it is refused, with the reason.
  const CommandResult again =
      RunTally({"--node", mesh.address(1), "--keyspace", "usres", "put",
                "k-typo", "v", "--create-keyspace"});
  EXPECT_EQ(again.exit_code, 2) << again.out;
  EXPECT_THAT(again.err, HasSubstr("dropped"));
  EXPECT_FALSE(Holds(mesh, 1, "usres"));

  // The listing names it as dropped.
  const CommandResult listed =
      RunTally({"--node", mesh.address(2), "keyspaces"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_THAT(listed.out, HasSubstr("dropped: usres"));
  // Dropping it again is no error: each node says it was done.
  const CommandResult twice =
      RunTally({"--node", mesh.address(0), "keyspaces", "drop", "usres",
                "--yes", "--everywhere"});
  EXPECT_EQ(twice.exit_code, 0) << twice.err;
  EXPECT_THAT(twice.out, HasSubstr("already dropped"));

  // Undone everywhere, the name can be written again and flows.
  const CommandResult undone = RunTally({"--node", mesh.address(0), "keyspaces",
                                         "undrop", "usres", "--everywhere"});
  ASSERT_EQ(undone.exit_code, 0) << undone.err;
  ASSERT_NO_FATAL_FAILURE(PutRows(mesh, 2, "usres", 0, 10));
  EXPECT_TRUE(Mesh::WaitUntil([&] { return mesh.RootsEqual("usres", 10); },
                              absl::Seconds(30)));
}

// Dropped on node 0 only: node 1 still holds it and writes to it. Node 0
// takes none of its rows (from the feed or sessions), both nodes report
// the keyspace's trouble naming the other, and node 1's feed still brings
// node 0 its other rows. Dropped on node 1 too, the reports end.
TEST(KeyspaceDrop, DroppedOnOneNodeOnlyBothSayHowAndTheFeedFlows) {
  Mesh mesh("half", 2, kFlags);
  mesh.Follow(0, 1);
  mesh.Follow(1, 0);
  ASSERT_TRUE(mesh.StartAll().ok());
  ASSERT_NO_FATAL_FAILURE(PutRows(mesh, 1, "usres", 0, 50));
  ASSERT_NO_FATAL_FAILURE(PutRows(mesh, 1, "users", 0, 10));
  ASSERT_TRUE(Mesh::WaitUntil(
      [&] {
        return mesh.RootsEqual("usres", 50) && mesh.RootsEqual("users", 10);
      },
      absl::Seconds(30)));
  const CommandResult dropped = RunTally(
      {"--node", mesh.address(0), "keyspaces", "drop", "usres", "--yes"});
  ASSERT_EQ(dropped.exit_code, 0) << dropped.err;

  // Node 1 writes both keyspaces, interleaved: feed batches carry both,
  // and some only the dropped one.
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(mesh.client(1).Put("usres", Key(100 + i), "v").ok());
    if (i % 4 == 0) {
      ASSERT_TRUE(mesh.client(1).Put("users", Key(100 + i), "v").ok());
    }
  }
  ASSERT_TRUE(Mesh::WaitUntil(
      [&] {
        return mesh.RootsEqual("users", 20) &&
               Trouble(mesh, 0, "usres").in_trouble() &&
               Trouble(mesh, 1, "usres").in_trouble();
      },
      absl::Seconds(30)))
      << "node 0: " << Trouble(mesh, 0, "usres").DebugString()
      << "node 1: " << Trouble(mesh, 1, "usres").DebugString();
  const uint64_t sessions_before = SessionsOk(mesh, 0);
  ASSERT_TRUE(Mesh::WaitUntil(
      [&] { return SessionsOk(mesh, 0) >= sessions_before + 2; },
      absl::Seconds(30)));
  EXPECT_FALSE(Holds(mesh, 0, "usres"));
  EXPECT_EQ(mesh.Root(1, "usres").second, 90u);
  const v1::KeyspaceTroubleStatus here = Trouble(mesh, 0, "usres");
  EXPECT_EQ(here.reason(), "dropped");
  EXPECT_THAT(here.last_error(), HasSubstr("dropped on"));
  const v1::KeyspaceTroubleStatus there = Trouble(mesh, 1, "usres");
  EXPECT_EQ(there.reason(), "dropped");
  EXPECT_THAT(there.last_error(), HasSubstr("this node still holds it"));
  // The rows written after them in the other keyspace still came (the
  // feed did not stop at the dropped keyspace's batches).
  ASSERT_TRUE(mesh.client(1).Put("users", "last", "v").ok());
  EXPECT_TRUE(Mesh::WaitUntil([&] { return mesh.RootsEqual("users", 21); },
                              absl::Seconds(10)));

  const CommandResult there_too = RunTally(
      {"--node", mesh.address(1), "keyspaces", "drop", "usres", "--yes"});
  ASSERT_EQ(there_too.exit_code, 0) << there_too.err;
  EXPECT_TRUE(Mesh::WaitUntil(
      [&] {
        return !Trouble(mesh, 0, "usres").in_trouble() &&
               !Trouble(mesh, 1, "usres").in_trouble();
      },
      absl::Seconds(30)))
      << "node 0: " << Trouble(mesh, 0, "usres").DebugString()
      << "node 1: " << Trouble(mesh, 1, "usres").DebugString();
}

}  // namespace
}  // namespace tally
