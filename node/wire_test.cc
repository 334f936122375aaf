#include "node/wire.h"

#include "gtest/gtest.h"

namespace tally {
namespace node {
namespace {

TEST(Wire, ExchangeRequestRoundTripsThroughNodeGroupsInOrder) {
  tree::ViewRequest request;
  // Runs of one level, then a step back, another level, another expansion:
  // each breaks a group, and the order must survive.
  for (uint64_t i : {3, 7, 8, 100, 2}) {
    request.descend.push_back({tree::NodeRef{10, i}, 4});
  }
  request.descend.push_back({tree::NodeRef{12, 4000}, 4});
  request.descend.push_back({tree::NodeRef{12, 4001}, 2});
  request.descend.push_back({tree::NodeRef{0, 0}, 5});
  for (uint64_t i : {9, 11, 1}) request.list.push_back(tree::NodeRef{20, i});
  request.list.push_back(tree::NodeRef{64, ~uint64_t{0}});

  v1::ExchangeRequest proto;
  ToProto(request, &proto);
  EXPECT_EQ(proto.descend_size(), 0);
  EXPECT_EQ(proto.descend_groups_size(), 5);
  EXPECT_EQ(proto.list_groups_size(), 3);
  auto back = FromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->descend.size(), request.descend.size());
  for (size_t i = 0; i < request.descend.size(); ++i) {
    EXPECT_EQ(back->descend[i].node, request.descend[i].node) << i;
    EXPECT_EQ(back->descend[i].levels_ahead, request.descend[i].levels_ahead);
  }
  EXPECT_EQ(back->list, request.list);
  // The wire-size model counts what is really sent.
  EXPECT_EQ(tree::WireSize(request), proto.ByteSizeLong());
}

TEST(Wire, BadNodeGroupsAreRefused) {
  v1::ExchangeRequest both;
  both.add_list()->set_level(1);
  v1::NodeGroup* g = both.add_list_groups();
  g->set_level(1);
  g->add_index_deltas(0);
  EXPECT_EQ(FromProto(both).status().code(),
            absl::StatusCode::kInvalidArgument);

  v1::ExchangeRequest past_level;
  g = past_level.add_list_groups();
  g->set_level(3);
  g->add_index_deltas(5);
  g->add_index_deltas(3);  // index 8 is not below 2^3
  EXPECT_EQ(FromProto(past_level).status().code(),
            absl::StatusCode::kInvalidArgument);

  v1::ExchangeRequest overflow;
  g = overflow.add_list_groups();
  g->set_level(64);
  g->add_index_deltas(~uint64_t{0});
  g->add_index_deltas(2);
  EXPECT_EQ(FromProto(overflow).status().code(),
            absl::StatusCode::kInvalidArgument);

  v1::ExchangeRequest too_many;
  g = too_many.add_descend_groups();
  g->set_level(20);
  g->set_levels_ahead(1);
  for (int i = 0; i <= static_cast<int>(tree::kMaxDescendantsPerExchange);
       ++i) {
    g->add_index_deltas(1);
  }
  EXPECT_EQ(FromProto(too_many).status().code(),
            absl::StatusCode::kResourceExhausted);

  v1::ExchangeRequest bad_ahead;
  g = bad_ahead.add_descend_groups();
  g->set_level(2);
  g->set_levels_ahead(0);
  g->add_index_deltas(1);
  EXPECT_EQ(FromProto(bad_ahead).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace node
}  // namespace tally
