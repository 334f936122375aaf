#include "storage/internal/records.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tree/digest.h"

namespace tally {
namespace storage {
namespace internal {
namespace {

tree::Digest128 SomeDigest() {
  tree::Digest128 d;
  EXPECT_TRUE(tree::Digest128::FromHex("00112233445566778899aabbccddeeff", &d));
  return d;
}

// Every proper prefix of `record`, which no parser of a fixed-size field
// may accept.
std::vector<std::string> Truncations(const std::string& record) {
  std::vector<std::string> out;
  for (size_t n = 0; n < record.size(); ++n) out.push_back(record.substr(0, n));
  return out;
}

TEST(Records, TaggedKeysRoundTripAndRefuseAnotherTag) {
  // Parsed views point into the key: the keys must outlive them.
  const std::string meta = MetaKey(kMetaEpoch);
  const std::string keyspace = KeyspaceKey("users");
  const std::string empty = MetaKey("");
  absl::string_view name;
  ASSERT_TRUE(ParseMetaKey(meta, &name));
  EXPECT_EQ(name, kMetaEpoch);
  ASSERT_TRUE(ParseKeyspaceKey(keyspace, &name));
  EXPECT_EQ(name, "users");
  ASSERT_TRUE(ParseMetaKey(empty, &name));
  EXPECT_EQ(name, "");
  EXPECT_FALSE(ParseMetaKey(KeyspaceKey("users"), &name));
  EXPECT_FALSE(ParseKeyspaceKey(MetaKey("users"), &name));
  EXPECT_FALSE(ParseMetaKey("", &name));
}

TEST(Records, FixedValuesMustHaveTheirExactSize) {
  uint32_t v32 = 0;
  ASSERT_TRUE(ParseFixed32Value(Fixed32String(0xdeadbeef), &v32));
  EXPECT_EQ(v32, 0xdeadbeefu);
  uint64_t v64 = 0;
  ASSERT_TRUE(ParseFixed64Value(Fixed64String(0x0102030405060708), &v64));
  EXPECT_EQ(v64, 0x0102030405060708u);
  EXPECT_FALSE(ParseFixed32Value("abc", &v32));
  EXPECT_FALSE(ParseFixed32Value("abcde", &v32));
  EXPECT_FALSE(ParseFixed64Value(Fixed32String(1), &v64));
  EXPECT_FALSE(ParseFixed64Value(Fixed64String(1) + "x", &v64));
}

TEST(Records, KeyspaceRecordRoundTrips) {
  const std::string v = EncodeKeyspaceRecord(KeyspaceRecord{77, 16});
  EXPECT_EQ(v.size(), kKeyspaceValueSize);
  KeyspaceRecord r;
  ASSERT_TRUE(ParseKeyspaceRecord(v, &r));
  EXPECT_EQ(r.id, 77u);
  EXPECT_EQ(r.depth, 16);
  for (const std::string& bad : Truncations(v)) {
    EXPECT_FALSE(ParseKeyspaceRecord(bad, &r)) << bad.size();
  }
  EXPECT_FALSE(ParseKeyspaceRecord(v + "x", &r));
}

TEST(Records, RowKeyRoundTripsAndSortsByKeyspaceThenToken) {
  const std::string k = RowKey(3, 0x1122334455667788, "user:1");
  ParsedRowKey row;
  ASSERT_TRUE(ParseRowKey(k, &row));
  EXPECT_EQ(row.keyspace_id, 3u);
  EXPECT_EQ(row.token, 0x1122334455667788u);
  EXPECT_EQ(row.key, "user:1");
  EXPECT_TRUE(absl::string_view(k).substr(0, 5) == RowKeyPrefix(3));
  EXPECT_LT(RowKey(3, 5, "z"), RowKey(3, 6, "a"));
  EXPECT_LT(RowKey(3, ~uint64_t{0}, "z"), RowKey(4, 0, "a"));
  // The bare header parses, with an empty key: the key rules are not the
  // format's.
  const std::string bare = RowKey(3, 9, "");
  ASSERT_TRUE(ParseRowKey(bare, &row));
  EXPECT_EQ(row.token, 9u);
  EXPECT_TRUE(row.key.empty());
  for (const std::string& bad : Truncations(RowKey(3, 9, ""))) {
    EXPECT_FALSE(ParseRowKey(bad, &row)) << bad.size();
  }
  std::string wrong_tag = k;
  wrong_tag[0] = kLeafTag;
  EXPECT_FALSE(ParseRowKey(wrong_tag, &row));
}

TEST(Records, RowRecordRoundTripsWithItsPayload) {
  RowHeader h;
  h.timestamp = tree::HlcTimestamp::FromParts(1234, 5);
  h.origin_id = 42;
  h.deleted = true;
  h.digest = SomeDigest();
  const std::string record = EncodeRowRecord(h, "payload");
  EXPECT_EQ(record.size(), kRowHeaderSize + 7);
  RowHeader out;
  absl::string_view payload;
  ASSERT_TRUE(DecodeRowRecord(record, &out, &payload));
  EXPECT_EQ(out.timestamp, h.timestamp);
  EXPECT_EQ(out.origin_id, 42u);
  EXPECT_TRUE(out.deleted);
  EXPECT_EQ(out.digest, h.digest);
  EXPECT_EQ(payload, "payload");
  h.deleted = false;
  ASSERT_TRUE(DecodeRowRecord(EncodeRowRecord(h, ""), &out, &payload));
  EXPECT_FALSE(out.deleted);
  EXPECT_TRUE(payload.empty());
  for (const std::string& bad : Truncations(EncodeRowRecord(h, ""))) {
    EXPECT_FALSE(DecodeRowRecord(bad, &out, &payload)) << bad.size();
  }
  // Unknown flags are damage, not a newer format.
  std::string flagged = record;
  flagged[kHlcSize + kOriginIdSize] = static_cast<char>(0x80);
  EXPECT_FALSE(DecodeRowRecord(flagged, &out, &payload));
}

TEST(Records, LeafKeyAndValueRoundTrip) {
  ParsedLeafKey leaf;
  ASSERT_TRUE(ParseLeafKey(LeafKey(7, 0xabcdef), &leaf));
  EXPECT_EQ(leaf.keyspace_id, 7u);
  EXPECT_EQ(leaf.leaf, 0xabcdefu);
  EXPECT_TRUE(absl::StartsWith(LeafKey(7, 1), LeafKeyPrefix(7)));
  for (const std::string& bad : Truncations(LeafKey(7, 1))) {
    EXPECT_FALSE(ParseLeafKey(bad, &leaf)) << bad.size();
  }
  EXPECT_FALSE(ParseLeafKey(LeafKey(7, 1) + "x", &leaf));
  EXPECT_FALSE(ParseLeafKey(OriginRowsKey(7) + "abcd", &leaf));

  tree::NodeState state;
  const std::string v = EncodeLeaf(SomeDigest(), 99);
  ASSERT_TRUE(DecodeLeaf(v, &state));
  EXPECT_EQ(state.digest, SomeDigest());
  EXPECT_EQ(state.count, 99u);
  for (const std::string& bad : Truncations(v)) {
    EXPECT_FALSE(DecodeLeaf(bad, &state)) << bad.size();
  }
  EXPECT_FALSE(DecodeLeaf(v + "x", &state));
}

TEST(Records, ChangeKeyRoundTripsAndSortsBySequence) {
  uint64_t sequence = 0;
  ASSERT_TRUE(ParseChangeKey(ChangeKey(0x0a0b0c0d0e0f), &sequence));
  EXPECT_EQ(sequence, 0x0a0b0c0d0e0fu);
  EXPECT_LT(ChangeKey(255), ChangeKey(256));
  for (const std::string& bad : Truncations(ChangeKey(1))) {
    EXPECT_FALSE(ParseChangeKey(bad, &sequence)) << bad.size();
  }
  EXPECT_FALSE(ParseChangeKey(ChangeKey(1) + "x", &sequence));
  EXPECT_FALSE(
      ParseChangeKey(TombstoneKey(tree::HlcTimestamp(), ""), &sequence));
}

TEST(Records, ChangeRecordRoundTrips) {
  ChangeRecord c;
  c.keyspace_id = 5;
  c.timestamp = tree::HlcTimestamp::FromParts(99, 1);
  c.origin_id = 8;
  c.deleted = true;
  c.erased = true;
  c.digest_delta = SomeDigest();
  c.count_delta = -1;
  c.key = "k";
  std::string record;
  EncodeChangeRecord(c, &record);
  EXPECT_EQ(record.size(), kChangeHeaderSize + 1);
  ChangeRecord out;
  ASSERT_TRUE(DecodeChangeRecord(record, &out));
  EXPECT_EQ(out.keyspace_id, 5u);
  EXPECT_EQ(out.timestamp, c.timestamp);
  EXPECT_EQ(out.origin_id, 8u);
  EXPECT_TRUE(out.deleted);
  EXPECT_TRUE(out.erased);
  EXPECT_EQ(out.digest_delta, c.digest_delta);
  EXPECT_EQ(out.count_delta, -1);
  EXPECT_EQ(out.key, "k");
  // A change always names a key: the bare header is malformed.
  for (const std::string& bad : Truncations(record)) {
    EXPECT_FALSE(DecodeChangeRecord(bad, &out)) << bad.size();
  }
  std::string flagged = record;
  flagged[kKeyspaceIdSize + kHlcSize + kOriginIdSize] = 4;
  EXPECT_FALSE(DecodeChangeRecord(flagged, &out));
}

TEST(Records, OriginKeysRoundTrip) {
  uint32_t id = 0;
  ASSERT_TRUE(ParseOriginByIdKey(OriginByIdKey(12345), &id));
  EXPECT_EQ(id, 12345u);
  for (const std::string& bad : Truncations(OriginByIdKey(1))) {
    EXPECT_FALSE(ParseOriginByIdKey(bad, &id)) << bad.size();
  }
  EXPECT_FALSE(ParseOriginByIdKey(OriginByIdKey(1) + "x", &id));
  EXPECT_FALSE(ParseOriginByIdKey(OriginRowsKey(1), &id));
  EXPECT_EQ(OriginByNameKey("node-a"), std::string("Nnode-a"));

  ASSERT_TRUE(ParseOriginRowsKey(OriginRowsKey(678), &id));
  EXPECT_EQ(id, 678u);
  for (const std::string& bad : Truncations(OriginRowsKey(1))) {
    EXPECT_FALSE(ParseOriginRowsKey(bad, &id)) << bad.size();
  }
  EXPECT_FALSE(ParseOriginRowsKey(OriginRowsKey(1) + "x", &id));
  EXPECT_FALSE(ParseOriginRowsKey(OriginByIdKey(1), &id));
}

TEST(Records, ProgressRoundTrips) {
  EXPECT_EQ(ProgressKey("up"), std::string("Pup"));
  ProgressRecord p;
  const std::string v = EncodeProgress(ProgressRecord{11, 22});
  ASSERT_TRUE(DecodeProgress(v, &p));
  EXPECT_EQ(p.epoch, 11u);
  EXPECT_EQ(p.sequence, 22u);
  for (const std::string& bad : Truncations(v)) {
    EXPECT_FALSE(DecodeProgress(bad, &p)) << bad.size();
  }
  EXPECT_FALSE(DecodeProgress(v + "x", &p));
}

TEST(Records, TombstoneIndexRoundTripsAndSortsByArrival) {
  const tree::HlcTimestamp arrival = tree::HlcTimestamp::FromParts(500, 0);
  const std::string row_key = RowKey(1, 2, "k");
  const std::string index_key = TombstoneKey(arrival, row_key);
  ParsedTombstoneKey t;
  ASSERT_TRUE(ParseTombstoneKey(index_key, &t));
  EXPECT_EQ(t.arrival, arrival);
  EXPECT_EQ(t.row_key, row_key);
  EXPECT_LT(TombstoneKey(tree::HlcTimestamp::FromParts(499, 0), "zzz"),
            TombstoneKey(arrival, ""));
  // A record always names a row.
  for (const std::string& bad : Truncations(TombstoneKey(arrival, "x"))) {
    EXPECT_FALSE(ParseTombstoneKey(bad, &t)) << bad.size();
  }
  EXPECT_FALSE(ParseTombstoneKey(ChangeKey(1) + "x", &t));

  tree::HlcTimestamp tombstone;
  ASSERT_TRUE(DecodeTombstoneValue(EncodeTombstoneValue(arrival), &tombstone));
  EXPECT_EQ(tombstone, arrival);
  // An index keyed by timestamp has empty values: not this format.
  EXPECT_FALSE(DecodeTombstoneValue("", &tombstone));
  EXPECT_FALSE(DecodeTombstoneValue("1234567", &tombstone));
}

TEST(Records, DamageMarkRoundTrips) {
  const std::string row_key = RowKey(1, 2, "k");
  const std::string mark = DamagedKey(row_key);
  absl::string_view parsed;
  ASSERT_TRUE(ParseDamagedKey(mark, &parsed));
  EXPECT_EQ(parsed, row_key);
  EXPECT_FALSE(ParseDamagedKey(row_key, &parsed));
  EXPECT_FALSE(ParseDamagedKey("", &parsed));
}

}  // namespace
}  // namespace internal
}  // namespace storage
}  // namespace tally
