#include "storage/bulk/gathered_rows.h"

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tree/hlc.h"

namespace tally {
namespace storage {
namespace {

struct Seen {
  std::string key, value, payload;
  tree::Version version;
};

std::vector<Seen> All(const GatheredRows& rows) {
  std::vector<Seen> seen;
  const absl::Status s = rows.ForEach("public.t", [&](storage::Mutation m) {
    EXPECT_EQ(m.keyspace, "public.t");
    EXPECT_FALSE(m.deleted);
    seen.push_back(
        Seen{m.key, m.value, m.captured_payload.value_or("?"), *m.version});
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  return seen;
}

TEST(GatheredRows, GivesBackEveryRowInTokenThenKeyOrderAfterSort) {
  GatheredRows rows;
  const tree::Version boot{tree::HlcTimestamp::FromRaw(1), "tally.bootstrap"};
  const tree::Version mine{tree::HlcTimestamp::FromParts(1764590000000, 7),
                           "node-a"};
  constexpr int kRows = 5000;
  for (int i = 0; i < kRows; ++i) {
    rows.Add(absl::StrCat("key-", i), std::string(i % 300, 'v'),
             absl::StrCat("p", i), i % 3 == 0 ? mine : boot);
  }
  // A row larger than a chunk of the arena, and an empty value.
  const std::string big(5 << 20, 'b');
  rows.Add("big", big, "", mine);
  rows.Add("empty", "", "tok", boot);
  ASSERT_EQ(rows.size(), kRows + 2u);

  // Before Sort: the order they came in.
  std::vector<Seen> seen = All(rows);
  ASSERT_EQ(seen.size(), kRows + 2u);
  EXPECT_EQ(seen[1].key, "key-1");
  EXPECT_EQ(seen[kRows].value.size(), big.size());

  rows.Sort();
  seen = All(rows);
  ASSERT_EQ(seen.size(), kRows + 2u);
  for (size_t i = 1; i < seen.size(); ++i) {
    const auto before =
        std::make_pair(tree::TokenOf(seen[i - 1].key), seen[i - 1].key);
    const auto at = std::make_pair(tree::TokenOf(seen[i].key), seen[i].key);
    EXPECT_LT(before, at) << i;
  }
  int found = 0;
  for (const Seen& s : seen) {
    if (s.key == "big") {
      EXPECT_EQ(s.value, big);
      EXPECT_EQ(s.payload, "");
      EXPECT_EQ(s.version, mine);
      ++found;
    } else if (s.key == "empty") {
      EXPECT_EQ(s.value, "");
      EXPECT_EQ(s.payload, "tok");
      EXPECT_EQ(s.version, boot);
      ++found;
    } else {
      int i = -1;
      ASSERT_TRUE(absl::SimpleAtoi(s.key.substr(4), &i)) << s.key;
      EXPECT_EQ(s.value, std::string(i % 300, 'v'));
      EXPECT_EQ(s.payload, absl::StrCat("p", i));
      EXPECT_EQ(s.version, i % 3 == 0 ? mine : boot);
      ++found;
    }
  }
  EXPECT_EQ(found, kRows + 2);
}

TEST(GatheredRows, StopsAtTheFirstError) {
  GatheredRows rows;
  for (int i = 0; i < 10; ++i) {
    rows.Add(absl::StrCat(i), "v", "", {tree::HlcTimestamp::FromRaw(1), "o"});
  }
  int visited = 0;
  const absl::Status s = rows.ForEach("ks", [&](storage::Mutation) {
    return ++visited == 3 ? absl::UnavailableError("full") : absl::OkStatus();
  });
  EXPECT_TRUE(absl::IsUnavailable(s));
  EXPECT_EQ(visited, 3);
}

}  // namespace
}  // namespace storage
}  // namespace tally
