// RepairHeat: the segment of a token, one session's counts (repairs count
// once written), and a peer's last sessions as PeerStatus.heat.
#include "node/sync/repair_heat.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tally {
namespace node {
namespace {

// (segment, differences, rows_repaired) of a HeatSegment list.
using Segments = std::vector<std::tuple<uint32_t, uint64_t, uint64_t>>;

Segments Listed(
    const google::protobuf::RepeatedPtrField<v1::HeatSegment>& segments) {
  Segments out;
  for (const v1::HeatSegment& s : segments) {
    out.emplace_back(s.segment(), s.differences(), s.rows_repaired());
  }
  return out;
}

// The first token of segment i.
tree::Token SegmentStart(int i) {
  return static_cast<tree::Token>(i) << (64 - kHeatLevel);
}

TEST(HeatSegmentOf, SegmentsAreTheTopBitsOfTheToken) {
  EXPECT_EQ(kHeatSegments, 64);
  EXPECT_EQ(HeatSegmentOf(0), 0);
  EXPECT_EQ(HeatSegmentOf(SegmentStart(1) - 1), 0);
  EXPECT_EQ(HeatSegmentOf(SegmentStart(1)), 1);
  EXPECT_EQ(HeatSegmentOf(SegmentStart(37) + 12345), 37);
  EXPECT_EQ(HeatSegmentOf(~tree::Token{0}), 63);
  // The same ranges as the token tree's nodes at that level.
  const tree::NodeRef node{kHeatLevel, 37};
  EXPECT_EQ(HeatSegmentOf(node.first_token()), 37);
  EXPECT_EQ(HeatSegmentOf(node.last_token()), 37);
}

TEST(SessionHeat, RepairsCountOnlyOnceTheirBatchIsCommitted) {
  SessionHeat heat;
  heat.AddDifference("users", SegmentStart(3), /*moves_row=*/true);
  heat.AddDifference("users", SegmentStart(3) + 1, /*moves_row=*/true);
  heat.AddDifference("users", SegmentStart(9), /*moves_row=*/false);
  ASSERT_EQ(heat.keyspaces().count("users"), 1u);
  const SegmentCounts& users = heat.keyspaces().at("users");
  EXPECT_EQ(users.differences[3], 2u);
  EXPECT_EQ(users.differences[9], 1u);
  EXPECT_EQ(users.rows_repaired[3], 0u) << "not written yet";

  heat.CommitRepairs();
  EXPECT_EQ(users.rows_repaired[3], 2u);
  EXPECT_EQ(users.rows_repaired[9], 0u) << "a conflict moves no row";
  heat.CommitRepairs();  // nothing new
  EXPECT_EQ(users.rows_repaired[3], 2u);
}

TEST(SessionHeat, AnUnwrittenBatchOfAnEarlierKeyspaceIsDropped) {
  SessionHeat heat;
  heat.AddDifference("a", SegmentStart(1), true);
  // The sync of "a" failed before its batch was written; "b" goes on.
  heat.AddDifference("b", SegmentStart(2), true);
  heat.CommitRepairs();
  EXPECT_EQ(heat.keyspaces().at("a").differences[1], 1u);
  EXPECT_EQ(heat.keyspaces().at("a").rows_repaired[1], 0u);
  EXPECT_EQ(heat.keyspaces().at("b").rows_repaired[2], 1u);
  EXPECT_EQ(heat.keyspaces().at("b").rows_repaired[1], 0u);
}

SessionHeat OneSession(const std::string& keyspace, int segment, int keys) {
  SessionHeat heat;
  for (int i = 0; i < keys; ++i) {
    heat.AddDifference(keyspace, SegmentStart(segment) + i, true);
  }
  heat.CommitRepairs();
  return heat;
}

TEST(RepairHeatHistory, LastSessionAndTheSumOfTheWindow) {
  RepairHeatHistory history(3);
  v1::PeerStatus peer;
  history.ToProto(&peer);
  EXPECT_EQ(peer.heat_sessions(), 0u);
  EXPECT_EQ(peer.heat_size(), 0);

  history.AddSession(OneSession("users", 5, 3));
  history.AddSession(OneSession("orders", 60, 1));
  history.AddSession(OneSession("users", 5, 2));
  history.ToProto(&peer);
  EXPECT_EQ(peer.heat_sessions(), 3u);
  ASSERT_EQ(peer.heat_size(), 2);
  // By keyspace name.
  EXPECT_EQ(peer.heat(0).keyspace(), "orders");
  EXPECT_EQ(peer.heat(0).segments(), 64u);
  EXPECT_THAT(Listed(peer.heat(0).last()), ::testing::IsEmpty())
      << "the last session found nothing in orders";
  EXPECT_EQ(Listed(peer.heat(0).recent()), (Segments{{60, 1, 1}}));
  EXPECT_EQ(peer.heat(1).keyspace(), "users");
  EXPECT_EQ(Listed(peer.heat(1).last()), (Segments{{5, 2, 2}}));
  EXPECT_EQ(Listed(peer.heat(1).recent()), (Segments{{5, 5, 5}}));

  // A fourth session pushes the first out of the window; a session with
  // nothing found counts as one.
  history.AddSession(SessionHeat{});
  history.ToProto(&peer);
  EXPECT_EQ(peer.heat_sessions(), 3u);
  ASSERT_EQ(peer.heat_size(), 2);
  EXPECT_EQ(Listed(peer.heat(1).recent()), (Segments{{5, 2, 2}}));
  EXPECT_THAT(Listed(peer.heat(1).last()), ::testing::IsEmpty());
  history.AddSession(SessionHeat{});
  history.AddSession(SessionHeat{});
  history.ToProto(&peer);
  EXPECT_EQ(peer.heat_size(), 0) << "keyspaces without a count are not sent";
}

TEST(RepairHeatHistory, OnlySegmentsWithACountAreSentInOrder) {
  SessionHeat heat;
  heat.AddDifference("ks", SegmentStart(63), true);
  heat.AddDifference("ks", SegmentStart(0), false);
  heat.AddDifference("ks", SegmentStart(17), true);
  heat.CommitRepairs();
  RepairHeatHistory history;
  history.AddSession(heat);
  v1::PeerStatus peer;
  history.ToProto(&peer);
  ASSERT_EQ(peer.heat_size(), 1);
  EXPECT_EQ(Listed(peer.heat(0).last()),
            (Segments{{0, 1, 0}, {17, 1, 1}, {63, 1, 1}}));
  EXPECT_LT(peer.ByteSizeLong(), 64u);
}

TEST(RepairHeatHistory, AtMostTheHottestKeyspacesAreSent) {
  RepairHeatHistory history;
  history.AddSession(OneSession("a", 1, 1));
  history.AddSession(OneSession("b", 2, 5));
  history.AddSession(OneSession("c", 3, 2));
  history.AddSession(OneSession("d", 4, 5));
  v1::PeerStatus peer;
  history.ToProto(&peer, /*max_keyspaces=*/2);
  ASSERT_EQ(peer.heat_size(), 2);
  EXPECT_EQ(peer.heat(0).keyspace(), "b");
  EXPECT_EQ(peer.heat(1).keyspace(), "d");
  EXPECT_EQ(peer.heat_keyspaces_left_out(), 2u);
  history.ToProto(&peer);
  EXPECT_EQ(peer.heat_size(), 4);
  EXPECT_EQ(peer.heat_keyspaces_left_out(), 0u);
}

}  // namespace
}  // namespace node
}  // namespace tally
