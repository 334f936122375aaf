#include "pg/schema/type_shape.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "pg/schema/row_codec.h"

namespace tally {
namespace pg {
namespace {

constexpr Oid kInt4 = 23;
constexpr Oid kText = 25;

using Shape = std::shared_ptr<const TypeShape>;

std::string Int4(uint32_t v) {
  return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                     static_cast<char>(v >> 8), static_cast<char>(v)};
}

uint32_t OidAt(const std::string& bytes, size_t at) {
  const auto* u = reinterpret_cast<const unsigned char*>(bytes.data() + at);
  return (uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) |
         (uint32_t{u[2]} << 8) | u[3];
}

// The send() forms, as PostgreSQL 15's array_send, record_send and
// range_send write them.
std::string Array(Oid element, const std::vector<int32_t>& dims,
                  const std::vector<std::optional<std::string>>& items) {
  bool has_null = false;
  for (const auto& i : items) has_null |= !i.has_value();
  std::string out = Int4(dims.size()) + Int4(has_null ? 1 : 0) + Int4(element);
  for (int32_t d : dims) out += Int4(d) + Int4(1);
  for (const auto& i : items) {
    out += i ? Int4(i->size()) + *i : Int4(0xffffffffu);
  }
  return out;
}

std::string Record(
    const std::vector<std::pair<Oid, std::optional<std::string>>>& fields) {
  std::string out = Int4(fields.size());
  for (const auto& [oid, value] : fields) {
    out += Int4(oid);
    out += value ? Int4(value->size()) + *value : Int4(0xffffffffu);
  }
  return out;
}

std::string Range(uint8_t flags, const std::optional<std::string>& lower,
                  const std::optional<std::string>& upper) {
  std::string out(1, static_cast<char>(flags));
  if (lower) out += Int4(lower->size()) + *lower;
  if (upper) out += Int4(upper->size()) + *upper;
  return out;
}

// Shapes as ReadTypeShapes builds them, for one database's OIDs.
Shape Opaque(std::string type) {
  auto s = std::make_shared<TypeShape>();
  s->type = std::move(type);
  return s;
}

TypeShape::Child ChildOf(Oid oid, Shape shape, std::string name = "") {
  TypeShape::Child c;
  c.oid = oid;
  c.name = std::move(name);
  c.type = shape ? shape->type : (oid == kInt4 ? "integer" : "text");
  c.shape = std::move(shape);
  return c;
}

Shape Finish(std::shared_ptr<TypeShape> s) {
  s->has_composite = s->kind == TypeShape::Kind::kComposite;
  const bool embeds = s->kind == TypeShape::Kind::kArray ||
                      s->kind == TypeShape::Kind::kComposite;
  for (const auto& c : s->children) {
    s->rewrites |= (embeds && c.oid >= kFirstNormalObjectId) ||
                   (c.shape && c.shape->rewrites);
    s->has_composite |= c.shape && c.shape->has_composite;
  }
  return s;
}

Shape ArrayOf(Oid element, Shape shape) {
  auto s = std::make_shared<TypeShape>();
  s->kind = TypeShape::Kind::kArray;
  s->type = (shape ? shape->type : "integer") + "[]";
  s->children.push_back(ChildOf(element, std::move(shape)));
  return Finish(s);
}

Shape CompositeOf(std::string type, std::vector<TypeShape::Child> fields) {
  auto s = std::make_shared<TypeShape>();
  s->kind = TypeShape::Kind::kComposite;
  s->type = std::move(type);
  s->children = std::move(fields);
  return Finish(s);
}

Shape RangeOf(std::string type, Oid subtype, Shape shape) {
  auto s = std::make_shared<TypeShape>();
  s->kind = TypeShape::Kind::kRange;
  s->type = std::move(type);
  s->children.push_back(ChildOf(subtype, std::move(shape)));
  return Finish(s);
}

// One database's user types: the enum mood, the composite pair (x int4,
// y mood), an array of pair. Database A and B got other OIDs.
struct Catalog {
  Oid mood, pair;
  Shape mood_shape = Opaque("public.mood");
  Shape moods, pair_shape, pairs;
  Catalog(Oid m, Oid p) : mood(m), pair(p) {
    moods = ArrayOf(mood, mood_shape);
    pair_shape = CompositeOf("public.pair", {ChildOf(kInt4, nullptr, "x"),
                                             ChildOf(mood, mood_shape, "y")});
    pairs = ArrayOf(pair, pair_shape);
  }
};

const Catalog kA(16390, 16400);
const Catalog kB(17001, 16388);

std::string Canonical(const Shape& shape, std::string bytes) {
  absl::Status s =
      RewriteOids(*shape, OidMode::kCanonical, bytes.data(), bytes.size());
  EXPECT_TRUE(s.ok()) << s;
  return bytes;
}

std::string Local(const Shape& shape, std::string bytes) {
  absl::Status s =
      RewriteOids(*shape, OidMode::kLocal, bytes.data(), bytes.size());
  EXPECT_TRUE(s.ok()) << s;
  return bytes;
}

TEST(TypeShape, ArrayOfAnEnumEncodesAlikeInTwoDatabases) {
  const std::string in_a = Array(kA.mood, {2}, {"happy", "sad"});
  const std::string in_b = Array(kB.mood, {2}, {"happy", "sad"});
  ASSERT_NE(in_a, in_b);
  const std::string canonical = Canonical(kA.moods, in_a);
  EXPECT_EQ(canonical, Canonical(kB.moods, in_b));
  EXPECT_EQ(OidAt(canonical, 8), 0u);
  EXPECT_EQ(canonical.size(), in_a.size());
  // Back to each database's own form.
  EXPECT_EQ(Local(kA.moods, canonical), in_a);
  EXPECT_EQ(Local(kB.moods, canonical), in_b);
}

TEST(TypeShape, BuiltinOidsStay) {
  // A composite of builtin fields and an array of int4: nothing to do,
  // and the walker leaves the bytes alone if asked anyway.
  const Shape both = CompositeOf(
      "public.p", {ChildOf(kInt4, nullptr, "x"), ChildOf(kText, nullptr, "y")});
  EXPECT_FALSE(both->rewrites);
  const std::string value = Record({{kInt4, Int4(1)}, {kText, "t"}});
  EXPECT_EQ(Canonical(both, value), value);
  const Shape ints = ArrayOf(kInt4, nullptr);
  EXPECT_FALSE(ints->rewrites);
  const std::string array = Array(kInt4, {1}, {Int4(5)});
  EXPECT_EQ(Canonical(ints, array), array);
  // ... but an array of that composite carries the composite's OID.
  EXPECT_TRUE(ArrayOf(16500, both)->rewrites);
}

TEST(TypeShape, MultidimensionalArraysWithNulls) {
  const std::vector<std::optional<std::string>> items = {
      "a", std::nullopt, "b", "c", std::nullopt, std::nullopt};
  const std::string in_a = Array(kA.mood, {2, 3}, items);
  const std::string in_b = Array(kB.mood, {2, 3}, items);
  EXPECT_EQ(Canonical(kA.moods, in_a), Canonical(kB.moods, in_b));
  EXPECT_EQ(Local(kB.moods, Canonical(kA.moods, in_a)), in_b);
  // The empty array still names its element type.
  const std::string empty_a = Array(kA.mood, {}, {});
  EXPECT_EQ(Canonical(kA.moods, empty_a),
            Canonical(kB.moods, Array(kB.mood, {}, {})));
  EXPECT_EQ(OidAt(Canonical(kA.moods, empty_a), 8), 0u);
}

TEST(TypeShape, CompositeWithNullFields) {
  for (const auto& y :
       {std::optional<std::string>("ok"), std::optional<std::string>()}) {
    const std::string in_a = Record({{kInt4, std::nullopt}, {kA.mood, y}});
    const std::string in_b = Record({{kInt4, std::nullopt}, {kB.mood, y}});
    const std::string canonical = Canonical(kA.pair_shape, in_a);
    EXPECT_EQ(canonical, Canonical(kB.pair_shape, in_b));
    EXPECT_EQ(OidAt(canonical, 4), kInt4);  // builtin field OID kept
    EXPECT_EQ(OidAt(canonical, 12), 0u);
    EXPECT_EQ(Local(kB.pair_shape, canonical), in_b);
  }
}

TEST(TypeShape, ArrayOfCompositesRewritesEveryLevel) {
  auto pairs = [](const Catalog& c) {
    return Array(c.pair, {3},
                 {Record({{kInt4, Int4(1)}, {c.mood, "happy"}}), std::nullopt,
                  Record({{kInt4, Int4(2)}, {c.mood, std::nullopt}})});
  };
  const std::string canonical = Canonical(kA.pairs, pairs(kA));
  EXPECT_EQ(canonical, Canonical(kB.pairs, pairs(kB)));
  EXPECT_EQ(canonical.find(Int4(kA.mood)), std::string::npos);
  EXPECT_EQ(canonical.find(Int4(kA.pair)), std::string::npos);
  EXPECT_EQ(Local(kB.pairs, canonical), pairs(kB));
  EXPECT_EQ(Local(kA.pairs, canonical), pairs(kA));
}

TEST(TypeShape, DomainsAndNestingThroughThem) {
  // CREATE DOMAIN moods_d AS mood[]: the column's shape is mood[]'s, and
  // an array of a domain over pair carries the domain's OID as element.
  const Oid domain_a = 16410, domain_b = 17010;
  const std::string in_a =
      Array(domain_a, {1}, {Record({{kInt4, Int4(9)}, {kA.mood, "sad"}})});
  const std::string in_b =
      Array(domain_b, {1}, {Record({{kInt4, Int4(9)}, {kB.mood, "sad"}})});
  const Shape of_a = ArrayOf(domain_a, kA.pair_shape);
  const Shape of_b = ArrayOf(domain_b, kB.pair_shape);
  EXPECT_EQ(Canonical(of_a, in_a), Canonical(of_b, in_b));
  EXPECT_EQ(Local(of_b, Canonical(of_a, in_a)), in_b);
  // A composite whose field is an array of an enum, in an array.
  const Shape deep_a = ArrayOf(
      16420, CompositeOf("public.deep", {ChildOf(16430, kA.moods, "m")}));
  const Shape deep_b = ArrayOf(
      17020, CompositeOf("public.deep", {ChildOf(17030, kB.moods, "m")}));
  const std::string deep_in_a =
      Array(16420, {1}, {Record({{16430, Array(kA.mood, {1}, {"x"})}})});
  const std::string deep_in_b =
      Array(17020, {1}, {Record({{17030, Array(kB.mood, {1}, {"x"})}})});
  EXPECT_EQ(Canonical(deep_a, deep_in_a), Canonical(deep_b, deep_in_b));
  EXPECT_EQ(Local(deep_b, Canonical(deep_a, deep_in_a)), deep_in_b);
  EXPECT_EQ(DescribeShape(*deep_a), "public.deep(m public.mood[])[]");
}

TEST(TypeShape, RangeOfComposites) {
  const Shape ra = RangeOf("public.pairrange", kA.pair, kA.pair_shape);
  const Shape rb = RangeOf("public.pairrange", kB.pair, kB.pair_shape);
  auto value = [](const Catalog& c, uint8_t flags, bool lower, bool upper) {
    return Range(
        flags,
        lower ? std::optional(Record({{kInt4, Int4(1)}, {c.mood, "a"}}))
              : std::nullopt,
        upper ? std::optional(Record({{kInt4, Int4(2)}, {c.mood, "b"}}))
              : std::nullopt);
  };
  // [a,b), (-inf,b], empty.
  EXPECT_EQ(Canonical(ra, value(kA, 0x02, true, true)),
            Canonical(rb, value(kB, 0x02, true, true)));
  EXPECT_EQ(Canonical(ra, value(kA, 0x08 | 0x04, false, true)),
            Canonical(rb, value(kB, 0x08 | 0x04, false, true)));
  EXPECT_EQ(Canonical(ra, value(kA, 0x01, false, false)),
            value(kA, 0x01, false, false));
}

// Every way a value can be cut or corrupted ends in an error of the
// mode's code, never in a read out of bounds (run under ASan to be sure).
TEST(TypeShape, MalformedValuesAreErrorsNeverCrashes) {
  const std::string value =
      Array(kA.pair, {2, 2},
            {Record({{kInt4, Int4(1)}, {kA.mood, "happy"}}), std::nullopt,
             Record({{kInt4, std::nullopt}, {kA.mood, std::nullopt}}),
             Record({{kInt4, Int4(3)}, {kA.mood, "sad"}})});
  for (size_t cut = 0; cut < value.size(); ++cut) {
    for (OidMode mode : {OidMode::kCanonical, OidMode::kLocal}) {
      // A copy of exactly `cut` bytes, so that a read past it is a heap
      // overflow a sanitizer sees.
      std::unique_ptr<char[]> bytes(new char[cut + 1]);
      std::memcpy(bytes.get(), value.data(), cut);
      absl::Status s = RewriteOids(*kA.pairs, mode, bytes.get(), cut);
      ASSERT_FALSE(s.ok()) << "cut at " << cut;
      EXPECT_EQ(s.code(), mode == OidMode::kCanonical
                              ? absl::StatusCode::kDataLoss
                              : absl::StatusCode::kInvalidArgument)
          << s;
    }
  }
  std::string longer = value + "x";
  absl::Status s =
      RewriteOids(*kA.pairs, OidMode::kCanonical, longer.data(), longer.size());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("after the value's end"), std::string::npos) << s;

  const uint32_t seed = std::random_device{}();
  std::mt19937 random(seed);
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  for (int round = 0; round < 20000; ++round) {
    std::string bad = value;
    const int flips = 1 + static_cast<int>(random() % 4);
    for (int f = 0; f < flips; ++f) {
      bad[random() % bad.size()] = static_cast<char>(random());
    }
    bad.resize(random() % (bad.size() + 1));
    std::unique_ptr<char[]> bytes(new char[bad.size() + 1]);
    std::memcpy(bytes.get(), bad.data(), bad.size());
    absl::Status r =
        RewriteOids(*kA.pairs, OidMode::kLocal, bytes.get(), bad.size());
    if (!r.ok()) {
      EXPECT_EQ(r.code(), absl::StatusCode::kInvalidArgument);
    }
  }
}

TEST(TypeShape, NamedMalformations) {
  auto code = [](const Shape& shape, std::string bytes) {
    return RewriteOids(*shape, OidMode::kCanonical, bytes.data(), bytes.size());
  };
  // Seven dimensions; a negative one; more elements than bytes; flags.
  EXPECT_FALSE(code(kA.moods, Int4(7) + Int4(0) + Int4(kA.mood)).ok());
  EXPECT_FALSE(
      code(kA.moods, Int4(1) + Int4(0) + Int4(kA.mood) + Int4(-1) + Int4(1))
          .ok());
  absl::Status huge =
      code(kA.moods, Int4(2) + Int4(0) + Int4(kA.mood) + Int4(0x10000) +
                         Int4(1) + Int4(0x10000) + Int4(1));
  EXPECT_EQ(huge.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(huge.message().find("elements in"), std::string::npos) << huge;
  EXPECT_FALSE(code(kA.moods, Int4(0) + Int4(2) + Int4(kA.mood)).ok());
  // A composite with one field more than its type.
  absl::Status fields =
      code(kA.pair_shape,
           Record({{kInt4, Int4(1)}, {kA.mood, "a"}, {kInt4, std::nullopt}}));
  EXPECT_NE(fields.message().find("3 fields; the type has 2"),
            std::string::npos)
      << fields;
  // A range bound may not be NULL.
  EXPECT_FALSE(code(RangeOf("r", kA.pair, kA.pair_shape),
                    std::string(1, '\0') + Int4(0xffffffffu) + Int4(0))
                   .ok());
}

// The codec of a table (id int4 key, p pair, m mood[]) encodes the same
// rows of two databases alike, and decodes them into each one's form.
TEST(TypeShape, RowCodecIsTheOneCanonicalisingPath) {
  auto codec = [](const Catalog& c) {
    auto shapes = std::make_shared<RowCodec::ColumnShapes>();
    *shapes = {nullptr, c.moods, c.pair_shape};
    return RowCodec(1, 2, shapes);
  };
  // A Field views its bytes: `keep` holds them, every one (a view of a
  // temporary would dangle once the row is returned).
  auto row = [](const Catalog& c, std::vector<std::string>* keep) {
    keep->push_back(Int4(1));
    keep->push_back(Array(c.mood, {1}, {"ok"}));
    keep->push_back(Record({{kInt4, Int4(4)}, {c.mood, "sad"}}));
    return std::vector<Field>{Field::Of((*keep)[0]), Field::Of((*keep)[1]),
                              Field::Of((*keep)[2])};
  };
  std::vector<std::string> keep_a, keep_b;
  const std::vector<Field> row_a = row(kA, &keep_a);
  const std::vector<Field> row_b = row(kB, &keep_b);
  std::string key_a, value_a, key_b, value_b;
  ASSERT_TRUE(codec(kA).Encode(row_a, &key_a, &value_a).ok());
  ASSERT_TRUE(codec(kB).Encode(row_b, &key_b, &value_b).ok());
  EXPECT_EQ(key_a, key_b);
  EXPECT_EQ(value_a, value_b);
  std::string storage;
  std::vector<Field> back;
  ASSERT_TRUE(codec(kB).Decode(key_a, value_a, &storage, &back).ok());
  EXPECT_EQ(back, row_b);
  // The canonical bytes were not touched by the decode.
  EXPECT_EQ(value_a, value_b);
  // A malformed column is a named error, and the output is left empty.
  std::string cut = keep_a[2].substr(0, 7);
  const std::vector<Field> bad = {Field::Of(keep_a[0]), Field::Of(keep_a[1]),
                                  Field::Of(cut)};
  absl::Status s = codec(kA).Encode(bad, &key_a, &value_a);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("column 2"), std::string::npos) << s;
  EXPECT_TRUE(value_a.empty());
}

}  // namespace
}  // namespace pg
}  // namespace tally
