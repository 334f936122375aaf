#include "tree/token_range.h"

#include <random>

#include "gtest/gtest.h"

namespace tally {
namespace tree {
namespace {

TEST(TokenRange, ParsesHexEndsBothIncluded) {
  absl::StatusOr<TokenRange> r =
      ParseTokenRange("0400000000000000:07ffffffffffffff");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->first, 0x0400000000000000u);
  EXPECT_EQ(r->last, 0x07ffffffffffffffu);
  EXPECT_EQ(r->ToString(), "0400000000000000:07ffffffffffffff");
  EXPECT_EQ(*ParseTokenRange(r->ToString()), *r);

  // 0x, upper case, short forms, the status page's dash, open ends.
  EXPECT_EQ(*ParseTokenRange("0x10:0XFF"), (TokenRange{0x10, 0xff}));
  EXPECT_EQ(*ParseTokenRange("10-ff"), (TokenRange{0x10, 0xff}));
  EXPECT_EQ(*ParseTokenRange(":8000000000000000"),
            (TokenRange{0, 0x8000000000000000u}));
  EXPECT_EQ(*ParseTokenRange("c000000000000000:"),
            (TokenRange{0xc000000000000000u, ~Token{0}}));
  EXPECT_TRUE(ParseTokenRange(":")->IsAll());
  EXPECT_EQ(*ParseTokenRange("5:5"), (TokenRange{5, 5}));
}

TEST(TokenRange, RefusesWhatIsNotARange) {
  for (const char* bad : {"", "1234", "zz:ff", "1:2:3", "0x:1",
                          "10000000000000000:1", "ff:10", "1.5:2"}) {
    absl::StatusOr<TokenRange> r = ParseTokenRange(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_NE(ParseTokenRange("ff:10").status().message().find("after"),
            absl::string_view::npos);
}

TEST(TokenRange, CoversOverlapsAndContains) {
  const TokenRange r{0x4000000000000000u, 0x7fffffffffffffffu};
  EXPECT_TRUE(r.Covers(NodeRef{2, 1}));
  EXPECT_FALSE(r.Covers(NodeRef{1, 0}));
  EXPECT_TRUE(r.Overlaps(NodeRef{1, 0}));
  EXPECT_FALSE(r.Overlaps(NodeRef{1, 1}));
  EXPECT_TRUE(r.Contains(0x4000000000000000u));
  EXPECT_TRUE(r.Contains(0x7fffffffffffffffu));
  EXPECT_FALSE(r.Contains(0x8000000000000000u));
  EXPECT_TRUE(TokenRange{}.Covers(NodeRef{0, 0}));
}

// The cover of a range is exact (every token of the range in one piece, no
// token outside), in token order, and small.
TEST(TokenRange, CoverIsExactOrderedAndSmall) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    Token a = rng(), b = rng();
    if (i % 3 == 0) b = a + rng() % 5000;  // narrow ranges too
    if (a > b) std::swap(a, b);
    const TokenRange range{a, b};
    const NodeRef within = i % 2 == 0 ? NodeRef{0, 0} : NodeRef{1, (a >> 63)};
    std::vector<NodeRef> cover = CoverOf(range, within);
    ASSERT_LE(cover.size(), 128u);
    Token next = std::max(a, within.first_token());
    for (const NodeRef& piece : cover) {
      ASSERT_TRUE(range.Covers(piece));
      ASSERT_EQ(piece.first_token(), next) << "a gap or overlap";
      next = piece.last_token() + 1;
    }
    if (!cover.empty()) {
      EXPECT_EQ(cover.back().last_token(), std::min(b, within.last_token()));
    }
  }
  EXPECT_EQ(CoverOf(TokenRange{}, NodeRef{3, 5}),
            (std::vector<NodeRef>{NodeRef{3, 5}}));
  EXPECT_TRUE(CoverOf(TokenRange{0, 5}, NodeRef{1, 1}).empty());
  EXPECT_EQ(CoverOf(TokenRange{5, 5}, NodeRef{0, 0}),
            (std::vector<NodeRef>{NodeRef{64, 5}}));
}

}  // namespace
}  // namespace tree
}  // namespace tally
