#include "tools/cli/synthetic.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tally {
namespace cli {
namespace {

std::vector<std::pair<std::string, std::string>> All(SyntheticRows rows) {
  std::vector<std::pair<std::string, std::string>> out;
  std::string key, value;
  while (rows.Next(&key, &value)) out.emplace_back(key, value);
  return out;
}

TEST(SyntheticRows, SameSeedGivesSameRows) {
  EXPECT_EQ(All(SyntheticRows(50, 7, 33)), All(SyntheticRows(50, 7, 33)));
}

TEST(SyntheticRows, OtherSeedKeepsKeysAndChangesValues) {
  const auto a = All(SyntheticRows(20, 1, 16));
  const auto b = All(SyntheticRows(20, 2, 16));
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 20u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, "key-" + std::to_string(i));
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_NE(a[i].second, b[i].second);
  }
}

TEST(SyntheticRows, ValuesArePrintableOfTheAskedSize) {
  for (const auto& [key, value] : All(SyntheticRows(10, 3, 101))) {
    ASSERT_EQ(value.size(), 101u);
    for (char c : value)
      EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)));
  }
  EXPECT_EQ(All(SyntheticRows(3, 3, 0))[2].second, "");
}

TEST(SyntheticRows, StopsAfterCount) {
  SyntheticRows rows(2, 1, 1);
  std::string key, value;
  EXPECT_TRUE(rows.Next(&key, &value));
  EXPECT_TRUE(rows.Next(&key, &value));
  EXPECT_FALSE(rows.Next(&key, &value));
  EXPECT_EQ(rows.produced(), 2u);
}

}  // namespace
}  // namespace cli
}  // namespace tally
