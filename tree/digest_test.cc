#include "tree/digest.h"

#include <xxhash.h>

#include <string>

#include "gtest/gtest.h"
#include "tree/token.h"

namespace tally {
namespace tree {
namespace {

Version V(uint64_t millis, const std::string& origin) {
  return Version{HlcTimestamp::FromParts(millis, 0), origin};
}

TEST(Digest128, XorIsItsOwnInverse) {
  const Digest128 a{0x1234, 0x5678};
  const Digest128 b{0xdead, 0xbeef};
  Digest128 acc;
  acc ^= a;
  acc ^= b;
  acc ^= a;
  EXPECT_EQ(acc, b);
  acc ^= b;
  EXPECT_TRUE(acc.IsZero());
}

TEST(Digest128, HexRoundTrips) {
  const Digest128 d{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  EXPECT_EQ(d.ToHex(), "0123456789abcdeffedcba9876543210");
  Digest128 parsed;
  ASSERT_TRUE(Digest128::FromHex(d.ToHex(), &parsed));
  EXPECT_EQ(parsed, d);
  EXPECT_FALSE(Digest128::FromHex("xyz", &parsed));
  EXPECT_FALSE(Digest128::FromHex(std::string(32, 'g'), &parsed));
}

TEST(Digest128, BinaryEncodingRoundTrips) {
  const Digest128 d{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  std::string bytes;
  d.AppendTo(&bytes);
  ASSERT_EQ(bytes.size(), 16u);
  EXPECT_EQ(Digest128::Load(bytes.data()), d);
}

// The digest's definition, which stored rows depend on: XXH3-128 of the
// fields, each but the flag length-prefixed, big-endian.
Digest128 Reference(const std::string& keyspace, const std::string& key,
                    const Version& v, bool deleted, const std::string& value) {
  std::string encoded;
  auto fixed64 = [&](uint64_t x) {
    for (int i = 0; i < 8; ++i) {
      encoded.push_back(static_cast<char>(x >> (56 - 8 * i)));
    }
  };
  auto field = [&](const std::string& f) {
    fixed64(f.size());
    encoded += f;
  };
  field(keyspace);
  field(key);
  fixed64(v.timestamp.raw());
  field(v.origin);
  encoded.push_back(deleted ? 1 : 0);
  field(value);
  const XXH128_hash_t h = XXH3_128bits(encoded.data(), encoded.size());
  return Digest128{h.high64, h.low64};
}

TEST(RowDigest, IsXxh3OfTheLengthPrefixedFields) {
  for (const std::string& value :
       {std::string(), std::string("v"), std::string(900, 'x'),
        std::string(5000, 'y')}) {
    for (bool deleted : {false, true}) {
      const Version v{HlcTimestamp::FromParts(1764590000123, 9), "node-a"};
      const std::string key("key\x00k", 5);
      EXPECT_EQ(RowDigest("public.t", key, v, deleted, value),
                Reference("public.t", key, v, deleted, value))
          << value.size() << " " << deleted;
    }
  }
}

TEST(RowDigest, EveryFieldMatters) {
  const Digest128 base = RowDigest("ks", "key", V(1, "a"), false, "value");
  EXPECT_EQ(base, RowDigest("ks", "key", V(1, "a"), false, "value"));
  EXPECT_NE(base, RowDigest("ks2", "key", V(1, "a"), false, "value"));
  EXPECT_NE(base, RowDigest("ks", "key2", V(1, "a"), false, "value"));
  EXPECT_NE(base, RowDigest("ks", "key", V(2, "a"), false, "value"));
  EXPECT_NE(base, RowDigest("ks", "key", V(1, "b"), false, "value"));
  EXPECT_NE(base, RowDigest("ks", "key", V(1, "a"), true, "value"));
  EXPECT_NE(base, RowDigest("ks", "key", V(1, "a"), false, "value2"));
}

TEST(RowDigest, FieldBoundariesAreUnambiguous) {
  // Moving bytes from one field to the next must change the digest.
  EXPECT_NE(RowDigest("ab", "c", V(1, "o"), false, "v"),
            RowDigest("a", "bc", V(1, "o"), false, "v"));
  EXPECT_NE(RowDigest("ks", "k", V(1, "o"), false, "xv"),
            RowDigest("ks", "k", V(1, "ox"), false, "v"));
  EXPECT_NE(RowDigest("ks", "", V(1, "o"), false, ""),
            RowDigest("", "ks", V(1, "o"), false, ""));
}

TEST(Token, IsStableAndPlacesKeysInLeaves) {
  // The token is part of the storage format: pin one value.
  EXPECT_EQ(TokenOf("alice"), TokenOf("alice"));
  EXPECT_NE(TokenOf("alice"), TokenOf("bob"));
  const Token t = TokenOf("alice");
  EXPECT_EQ(NodeIndexOf(t, 0), 0u);
  EXPECT_EQ(NodeIndexOf(t, 64), t);
  EXPECT_EQ(NodeIndexOf(t, 16), t >> 48);
  for (int level = 0; level <= 64; ++level) {
    const NodeRef node{level, NodeIndexOf(t, level)};
    EXPECT_TRUE(node.IsValid());
    EXPECT_TRUE(node.Contains(t));
    EXPECT_LE(node.first_token(), t);
    EXPECT_GE(node.last_token(), t);
  }
  EXPECT_FALSE((NodeRef{3, 8}).IsValid());
  EXPECT_FALSE((NodeRef{65, 0}).IsValid());
  EXPECT_EQ((NodeRef{1, 1}).first_token(), uint64_t{1} << 63);
  EXPECT_EQ((NodeRef{1, 0}).last_token(), (uint64_t{1} << 63) - 1);
}

// Found with the bounded bulk streams (a scan resumes inside a range through
// one-token ranges): a level-64 range ended at the last token of all.
TEST(Token, ALevel64RangeHoldsExactlyOneToken) {
  const Token t = TokenOf("alice");
  // A level known only at run time, as in a request: a constant shift by
  // 64 may be folded differently.
  volatile int level = 64;
  const NodeRef one{level, t};
  EXPECT_EQ(one.first_token(), t);
  EXPECT_EQ(one.last_token(), t);
  EXPECT_FALSE(one.Contains(t + 1));
}

}  // namespace
}  // namespace tree
}  // namespace tally
