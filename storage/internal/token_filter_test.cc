#include "storage/internal/token_filter.h"

#include <random>

#include "gtest/gtest.h"

namespace tally {
namespace storage {
namespace internal {
namespace {

TEST(TokenFilter, AnswersMaybeForEveryTokenAddedAsItGrows) {
  TokenFilter filter;
  std::mt19937_64 rng(1);
  std::vector<tree::Token> added;
  for (int i = 0; i < 1'000'000; ++i) added.push_back(rng());
  for (tree::Token t : added) filter.Add(t);
  // 32k, 64k, ... 512k: five levels.
  EXPECT_EQ(filter.levels(), 5);
  EXPECT_EQ(filter.added(), added.size());
  for (tree::Token t : added) ASSERT_TRUE(filter.MayContain(t)) << t;
}

TEST(TokenFilter, AnswersAbsentForMostTokensNeverAdded) {
  std::mt19937_64 rng(2);
  for (uint64_t rows : {uint64_t{1000}, uint64_t{100'000}, uint64_t{600'000}}) {
    TokenFilter filter(rows);
    for (uint64_t i = 0; i < rows; ++i) filter.Add(rng());
    int maybe = 0;
    constexpr int kProbed = 200'000;
    for (int i = 0; i < kProbed; ++i) maybe += filter.MayContain(rng()) ? 1 : 0;
    // A full level at 12 bits a token answers "maybe" for ~0.5% of others.
    EXPECT_LT(maybe, kProbed / 100) << rows << " rows";
  }
}

TEST(TokenFilter, StaysSelectiveAcrossLevels) {
  // Grown from the smallest level to 3M tokens: every level is probed.
  TokenFilter filter;
  std::mt19937_64 rng(3);
  for (int i = 0; i < 3'000'000; ++i) filter.Add(rng());
  EXPECT_EQ(filter.levels(), 7);
  int maybe = 0;
  constexpr int kProbed = 200'000;
  for (int i = 0; i < kProbed; ++i) maybe += filter.MayContain(rng()) ? 1 : 0;
  EXPECT_LT(maybe, kProbed * 4 / 100);
  // 1.5 bytes a token of capacity, twice the tokens at most.
  EXPECT_LE(filter.memory_bytes(), 3'000'000u * 3);
}

TEST(TokenFilter, EmptyAnswersAbsent) {
  TokenFilter filter;
  EXPECT_FALSE(filter.MayContain(0));
  EXPECT_FALSE(filter.MayContain(~tree::Token{0}));
  filter.Add(0);
  EXPECT_TRUE(filter.MayContain(0));
}

}  // namespace
}  // namespace internal
}  // namespace storage
}  // namespace tally
