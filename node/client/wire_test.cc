#include "node/client/wire.h"

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

TEST(Wire, SeededExchangeRoundTripsAndItsSizeModelHolds) {
  tree::SeededRequest request;
  request.plain.descend.push_back({tree::NodeRef{10, 3}, 3});
  request.plain.list.push_back(tree::NodeRef{20, 9});
  request.plain.list.push_back(tree::NodeRef{20, 11});
  request.seed = 0x0123456789abcdefull;
  request.node_bits = 19;
  request.row_bits = 21;
  for (uint64_t i = 0; i < 8; ++i) {
    request.known_nodes.push_back((i * 77777) & ((1u << 19) - 1));
  }
  request.rows_known = true;
  request.known_rows_per_range = {2, 1};
  request.known_rows = {5, (1u << 21) - 1, 0};

  v1::ExchangeRequest proto;
  ToProto(request, &proto);
  absl::StatusOr<tree::SeededRequest> back = SeededFromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->seed, request.seed);
  EXPECT_EQ(back->node_bits, 19);
  EXPECT_EQ(back->row_bits, 21);
  EXPECT_EQ(back->known_nodes, request.known_nodes);
  EXPECT_EQ(back->known_rows_per_range, request.known_rows_per_range);
  EXPECT_EQ(back->known_rows, request.known_rows);
  EXPECT_EQ(tree::WireSize(request), proto.ByteSizeLong());

  tree::SeededResponse response;
  response.differs = {false, true, false, false, true, false, false, false};
  response.descendants = {tree::NodeDigest{0, 300}, tree::NodeDigest{0, 2}};
  response.entries_per_range = {1, 0};
  tree::RowEntry row;
  row.key = "k";
  row.token = tree::TokenOf(row.key);
  row.version.timestamp = tree::HlcTimestamp::FromParts(1000, 0);
  row.version.origin = "n1";
  row.digest = tree::Digest128{0, 42};
  response.entries = {row};
  response.unmatched = {true, false, true};
  v1::ExchangeResponse answer;
  ToProto(response, request, &answer);
  absl::StatusOr<tree::SeededResponse> decoded =
      SeededFromProto(answer, request);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->differs, response.differs);
  ASSERT_EQ(decoded->descendants.size(), 2u);
  EXPECT_EQ(decoded->descendants[0].count, 300u);
  EXPECT_EQ(decoded->unmatched, response.unmatched);
  ASSERT_EQ(decoded->entries.size(), 1u);
  EXPECT_EQ(decoded->entries[0].digest.Fingerprint(), 42u);
  // Within the origin names, which WireSize leaves to the message.
  EXPECT_LE(tree::WireSize(response, request), answer.ByteSizeLong());
  EXPECT_GE(tree::WireSize(response, request) + 8, answer.ByteSizeLong());

  // An answer that does not fit its request is refused.
  answer.set_unmatched("");
  EXPECT_FALSE(SeededFromProto(answer, request).ok());
  // So is a request whose known fingerprints do not fit what it asks.
  proto.set_known_nodes(proto.known_nodes() + "x");
  EXPECT_FALSE(SeededFromProto(proto).ok());
}

TEST(Wire, AnUnseededRequestIsAnsweredThePlainWay) {
  // What a node from before seeds sends: no `seeded`, so the plain decoder
  // applies and the seeded one refuses it.
  tree::ViewRequest plain;
  plain.descend.push_back({tree::NodeRef{0, 0}, 4});
  v1::ExchangeRequest proto;
  ToProto(plain, &proto);
  EXPECT_FALSE(proto.seeded());
  EXPECT_TRUE(FromProto(proto).ok());
  EXPECT_FALSE(SeededFromProto(proto).ok());
}

// A scanned entry's value travels as an optional field: present (even
// empty, a tombstone's) or absent, and WireSize counts what is sent. A
// tombstone that carries a value is refused.
TEST(Wire, RowEntryValuesRoundTripAndTheSizeModelCountsThem) {
  tree::RowEntry entry;
  entry.key = "user:42";
  entry.token = tree::TokenOf(entry.key);
  entry.version.timestamp = tree::HlcTimestamp::FromRaw(12345);
  entry.version.origin = "node-a";
  entry.digest = tree::Digest128{7, 9};
  for (std::optional<std::string> value :
       {std::optional<std::string>(), std::optional<std::string>(""),
        std::optional<std::string>(std::string(300, 'v'))}) {
    entry.value = value;
    OriginDictionary origins;
    origins.Index("another origin");  // node-a's index is not the default 0
    v1::ScanResponse response;
    v1::RowEntry& proto = *response.add_entries();
    ToProto(entry, &origins, &proto);
    // The model counts an entry as a field of its message.
    EXPECT_EQ(tree::WireSize(entry), response.ByteSizeLong());
    google::protobuf::RepeatedPtrField<std::string> names;
    origins.MoveTo(&names);
    absl::StatusOr<tree::RowEntry> back = FromProto(proto, names);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->value, value);
    EXPECT_EQ(back->key, entry.key);
  }
  v1::RowEntry tombstone;
  tombstone.set_key("gone");
  tombstone.set_deleted(true);
  tombstone.set_value("not empty");
  google::protobuf::RepeatedPtrField<std::string> names;
  names.Add("node-a");
  EXPECT_TRUE(absl::IsInvalidArgument(FromProto(tombstone, names).status()));
}

}  // namespace
}  // namespace node
}  // namespace tally
