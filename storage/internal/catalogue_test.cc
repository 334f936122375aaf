#include "storage/internal/catalogue.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tally {
namespace storage {
namespace internal {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

tree::Digest128 DigestOf(uint64_t n) { return tree::Digest128{n, ~n}; }

// An edit that adds keyspace `name` of depth 4 with one row in `leaf`.
CatalogueEdit AddKeyspaceWithRow(const Catalogue& catalogue,
                                 const std::string& name, uint32_t leaf) {
  CatalogueEdit edit = catalogue.StartEdit();
  const KeyspaceId id = edit.AddKeyspace(name, 4);
  edit.leaf_deltas.push_back({id, leaf, DigestOf(leaf + 1), 1});
  return edit;
}

TEST(Catalogue, EditsGiveOutIdsAfterTheOnesInUse) {
  Catalogue catalogue;
  catalogue.RecoverNextIds(KeyspaceId(5), OriginId(9));
  CatalogueEdit edit = catalogue.StartEdit();
  EXPECT_EQ(edit.AddKeyspace("a", 4), KeyspaceId(5));
  EXPECT_EQ(edit.AddKeyspace("b", 4), KeyspaceId(6));
  EXPECT_EQ(edit.AddOrigin("peer"), OriginId(9));
  EXPECT_TRUE(edit.IsNewOrigin(OriginId(9)));
  EXPECT_FALSE(edit.IsNewOrigin(OriginId(8)));
  EXPECT_EQ(edit.NewOriginName(OriginId(9)), "peer");
  EXPECT_EQ(edit.NewOriginName(OriginId(10)), "");
  catalogue.Install(edit);
  CatalogueEdit next = catalogue.StartEdit();
  EXPECT_EQ(next.AddKeyspace("c", 4), KeyspaceId(7));
  EXPECT_EQ(next.AddOrigin("other"), OriginId(10));
}

// As with VersionSet::LogAndApply: what a commit stages is seen only once
// it is installed.
TEST(Catalogue, NothingStagedIsVisibleBeforeInstall) {
  Catalogue catalogue;
  CatalogueEdit edit = AddKeyspaceWithRow(catalogue, "users", 3);
  const OriginId peer = edit.AddOrigin("peer");
  edit.origin_rows.emplace_back(peer, 1);
  EXPECT_EQ(catalogue.Find("users"), nullptr);
  EXPECT_EQ(catalogue.FindOrigin("peer"), std::nullopt);
  EXPECT_EQ(catalogue.origin_rows(peer), 0u);
  EXPECT_EQ(catalogue.keyspace_count(), 0u);

  catalogue.Install(edit);
  const Keyspace* ks = catalogue.Find("users");
  ASSERT_NE(ks, nullptr);
  EXPECT_EQ(ks->name, "users");
  EXPECT_EQ(ks->id, KeyspaceId(1));
  EXPECT_EQ(ks->depth, 4);
  EXPECT_EQ(catalogue.Find(KeyspaceId(1)), ks);
  EXPECT_EQ(catalogue.FindOrigin("peer"), peer);
  EXPECT_EQ(catalogue.OriginName(peer), "peer");
  EXPECT_EQ(catalogue.origin_rows(peer), 1u);
  absl::StatusOr<KeyspaceInfo> info = catalogue.GetKeyspace("users");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->row_count, 1u);
  EXPECT_EQ(info->root_changes, 1u);
  EXPECT_EQ(catalogue.ReadTree(
                *ks, [](const tree::MerkleTree& t) { return t.leaf(3); }),
            (tree::NodeState{DigestOf(4), 1}));
}

TEST(Catalogue, UnknownNamesAndIdsAreAbsent) {
  Catalogue catalogue;
  EXPECT_EQ(catalogue.Find("nope"), nullptr);
  EXPECT_EQ(catalogue.Find(KeyspaceId(1)), nullptr);
  EXPECT_EQ(catalogue.OriginName(OriginId(1)), "");
  EXPECT_EQ(catalogue.GetKeyspace("nope").status().code(),
            absl::StatusCode::kNotFound);
}

// Root changes count commits that changed the root, not leaf deltas.
TEST(Catalogue, RootChangesCountCommitsThatMovedTheRoot) {
  Catalogue catalogue;
  catalogue.Install(AddKeyspaceWithRow(catalogue, "a", 1));
  const Keyspace* ks = catalogue.Find("a");
  CatalogueEdit two = catalogue.StartEdit();
  two.leaf_deltas.push_back({ks->id, 2, DigestOf(7), 1});
  two.leaf_deltas.push_back({ks->id, 5, DigestOf(8), 1});
  catalogue.Install(two);
  EXPECT_EQ(catalogue.GetKeyspace("a")->root_changes, 2u);
  EXPECT_EQ(catalogue.GetKeyspace("a")->row_count, 3u);
  // A commit whose deltas cancel out leaves the root as it was.
  CatalogueEdit undo = catalogue.StartEdit();
  undo.leaf_deltas.push_back({ks->id, 6, DigestOf(9), 1});
  undo.leaf_deltas.push_back({ks->id, 6, DigestOf(9), -1});
  catalogue.Install(undo);
  EXPECT_EQ(catalogue.GetKeyspace("a")->root_changes, 2u);
}

TEST(Catalogue, OriginRowsAreReplacedAndAZeroCountRemoved) {
  Catalogue catalogue;
  catalogue.RecoverOrigin(OriginId(1), "self");
  catalogue.RecoverOrigin(OriginId(2), "b-peer");
  catalogue.RecoverOriginRows(
      {{OriginId(1), 5}, {OriginId(2), 3}, {OriginId(7), 1}});
  EXPECT_THAT(catalogue.OriginRowCounts(),
              ElementsAre(Field(&OriginRowCount::origin, "#7"),
                          Field(&OriginRowCount::origin, "b-peer"),
                          Field(&OriginRowCount::origin, "self")));
  CatalogueEdit edit = catalogue.StartEdit();
  edit.origin_rows.emplace_back(OriginId(1), 6);
  edit.origin_rows.emplace_back(OriginId(2), 0);
  catalogue.Install(edit);
  EXPECT_THAT(
      catalogue.AllOriginRows(),
      UnorderedElementsAre(Pair(OriginId(1), 6u), Pair(OriginId(7), 1u)));
}

TEST(Catalogue, KeyspaceStaysValidAsMoreAreAdded) {
  Catalogue catalogue;
  catalogue.Install(AddKeyspaceWithRow(catalogue, "first", 0));
  const Keyspace* first = catalogue.Find("first");
  for (int i = 0; i < 200; ++i) {
    catalogue.Install(
        AddKeyspaceWithRow(catalogue, "ks" + std::to_string(i), 0));
  }
  EXPECT_EQ(catalogue.Find("first"), first);
  EXPECT_EQ(first->name, "first");
  EXPECT_EQ(first->id, KeyspaceId(1));
  EXPECT_EQ(catalogue.keyspace_count(), 201u);
}

TEST(Catalogue, RecoveredKeyspacesAreListedByNameWithTheirTrees) {
  Catalogue catalogue;
  std::vector<tree::NodeState> leaves(16);
  leaves[2] = {DigestOf(1), 2};
  catalogue.RecoverKeyspace(Keyspace{"zeta", KeyspaceId(2), 4},
                            *tree::MerkleTree::FromLeaves(4, leaves));
  catalogue.RecoverKeyspace(Keyspace{"alpha", KeyspaceId(1), 4},
                            *tree::MerkleTree::Create(4));
  EXPECT_THAT(catalogue.ListKeyspaces(),
              ElementsAre(Field(&KeyspaceInfo::name, "alpha"),
                          Field(&KeyspaceInfo::name, "zeta")));
  EXPECT_EQ(catalogue.GetKeyspace("zeta")->row_count, 2u);
  const std::vector<LeafRef> refs = {{KeyspaceId(2), 2}, {KeyspaceId(1), 2}};
  EXPECT_THAT(catalogue.LeafStates(refs),
              ElementsAre(tree::NodeState{DigestOf(1), 2}, tree::NodeState{}));
  auto trees = catalogue.CopyTrees();
  ASSERT_EQ(trees.size(), 2u);
  EXPECT_EQ(trees[1].first->name, "zeta");
  EXPECT_EQ(trees[1].second.root().count, 2u);
}

TEST(Catalogue, SetLeavesCountsTheLeavesItChanged) {
  Catalogue catalogue;
  catalogue.Install(AddKeyspaceWithRow(catalogue, "a", 1));
  const Keyspace* ks = catalogue.Find("a");
  const std::vector<std::pair<uint64_t, tree::NodeState>> fixes = {
      {1, {DigestOf(2), 1}},  // as it is
      {4, {}},                // empty already
      {1, {}},                // the row was damaged: gone
  };
  EXPECT_EQ(catalogue.SetLeaves(*ks, fixes), 1u);
  EXPECT_EQ(catalogue.GetKeyspace("a")->row_count, 0u);
  EXPECT_EQ(catalogue.GetKeyspace("a")->root_changes, 2u);
}

// Readers running while commits install always see a whole commit: every
// edit adds a row to two leaves, so the root count is always even.
TEST(Catalogue, ReadersSeeWholeEditsWhileTheyInstall) {
  Catalogue catalogue;
  catalogue.Install(AddKeyspaceWithRow(catalogue, "a", 0));
  const Keyspace* ks = catalogue.Find("a");
  std::atomic<bool> done{false};
  std::atomic<int> torn{0};
  std::thread reader([&] {
    while (!done.load()) {
      const uint64_t rows = catalogue.GetKeyspace("a")->row_count;
      if (rows % 2 == 0) torn.fetch_add(1);  // 1 + 2n expected
    }
  });
  for (uint64_t i = 0; i < 2000; ++i) {
    CatalogueEdit edit = catalogue.StartEdit();
    edit.leaf_deltas.push_back({ks->id, 3, DigestOf(i), 1});
    edit.leaf_deltas.push_back({ks->id, 9, DigestOf(i + 7), 1});
    catalogue.Install(edit);
  }
  done.store(true);
  reader.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(catalogue.GetKeyspace("a")->row_count, 4001u);
}

}  // namespace
}  // namespace internal
}  // namespace storage
}  // namespace tally
