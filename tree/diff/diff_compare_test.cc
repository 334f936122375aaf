#include "tree/diff/diff_compare.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tree/diff/diff_planner.h"
#include "tree/digest.h"
#include "tree/token.h"
#include "tree/tree_view.h"

namespace tally {
namespace tree {
namespace internal {
namespace {

RowEntry Row(const std::string& key, const std::string& value) {
  RowEntry row;
  row.key = key;
  row.token = TokenOf(key);
  row.version = Version{HlcTimestamp::FromParts(1000, 0), "origin"};
  row.digest = RowDigest("ks", key, row.version, false, value);
  return row;
}

// One listed range of `rows`, in (token, key) order.
void ListRange(std::vector<RowEntry> rows, ViewResponse* answer) {
  std::sort(rows.begin(), rows.end(), [](const RowEntry& x, const RowEntry& y) {
    return x.token != y.token ? x.token < y.token : x.key < y.key;
  });
  answer->entries_per_range.push_back(static_cast<uint32_t>(rows.size()));
  for (RowEntry& row : rows) answer->entries.push_back(std::move(row));
}

// What CompareRows reports, one line a key: the key, then + or - for a
// row on view a's side and on view b's.
std::vector<std::string> Differences(const ViewResponse& answer_a,
                                     const ViewResponse& answer_b) {
  std::vector<std::string> out;
  const absl::Status s = CompareRows(
      answer_a, answer_b, [&](const RowEntry* in_a, const RowEntry* in_b) {
        const std::string& key = in_a != nullptr ? in_a->key : in_b->key;
        out.push_back(absl::StrCat(key, in_a != nullptr ? "+" : "-",
                                   in_b != nullptr ? "+" : "-"));
        return absl::OkStatus();
      });
  EXPECT_TRUE(s.ok()) << s;
  std::sort(out.begin(), out.end());
  return out;
}

TEST(CompareRows, ReportsRowsOnOneSideAndRowsThatDiffer) {
  ViewResponse a;
  ViewResponse b;
  ListRange({Row("same", "1"), Row("changed", "a"), Row("only-a", "1")}, &a);
  ListRange({Row("same", "1"), Row("changed", "b"), Row("only-b", "1")}, &b);
  EXPECT_EQ(Differences(a, b),
            (std::vector<std::string>{"changed++", "only-a+-", "only-b-+"}));
}

TEST(CompareRows, ComparesRangeByRange) {
  ViewResponse a;
  ViewResponse b;
  ListRange({Row("k1", "1")}, &a);
  ListRange({}, &b);
  ListRange({}, &a);
  ListRange({Row("k1", "1")}, &b);
  // The same row in two different ranges is not a match.
  EXPECT_EQ(Differences(a, b), (std::vector<std::string>{"k1+-", "k1-+"}));
}

TEST(CompareRows, ComparesTheDigestsSixtyFourBitFingerprintsOnly) {
  ViewResponse a;
  ViewResponse b;
  RowEntry local = Row("k", "1");
  // As it travels: the high half of the digest zero.
  RowEntry remote = local;
  remote.digest = Digest128{0, local.digest.Fingerprint()};
  ListRange({local}, &a);
  ListRange({remote}, &b);
  EXPECT_TRUE(Differences(a, b).empty());
}

TEST(CompareRows, StopsAtTheFirstErrorOfTheSink) {
  ViewResponse a;
  ViewResponse b;
  ListRange({Row("k1", "1"), Row("k2", "1"), Row("k3", "1")}, &a);
  ListRange({}, &b);
  int calls = 0;
  const absl::Status s =
      CompareRows(a, b, [&](const RowEntry*, const RowEntry*) {
        ++calls;
        return absl::AbortedError("enough");
      });
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(calls, 1);
}

TEST(CompareChildren, AppendsTheChildrenThatDifferInIndexOrder) {
  const Planned planned{Pending{NodeRef{3, 5}, 100, 96, 4}, Step::kDescend, 2};
  ViewResponse a;
  ViewResponse b;
  // Other answers' children before this node's: slot 3.
  a.descendants.resize(3 + 4, NodeDigest{7, 25});
  b.descendants.resize(3 + 4, NodeDigest{7, 25});
  b.descendants[3 + 1] = NodeDigest{8, 25};  // digest differs
  b.descendants[3 + 3] = NodeDigest{7, 21};  // count differs
  b.descendants[0] = NodeDigest{9, 9};       // not this node's
  std::vector<Pending> next{Pending{NodeRef{1, 1}, 1, 1, 1}};
  CompareChildren(planned, a, b, 3, &next);
  ASSERT_EQ(next.size(), 3u);
  EXPECT_EQ(next[0].node, (NodeRef{1, 1}));  // untouched
  EXPECT_EQ(next[1].node, (NodeRef{5, 5 * 4 + 1}));
  EXPECT_EQ(next[1].count_a, 25u);
  EXPECT_EQ(next[1].count_b, 25u);
  EXPECT_EQ(next[2].node, (NodeRef{5, 5 * 4 + 3}));
  EXPECT_EQ(next[2].count_a, 25u);
  EXPECT_EQ(next[2].count_b, 21u);
  // Half of 4 children differ, one by a count gap of 4: at least 4
  // differences over the 2.
  const double expected = ExpectedPerChild(4, 4, 2, 4);
  EXPECT_DOUBLE_EQ(next[1].expected, expected);
  EXPECT_DOUBLE_EQ(next[2].expected, expected);
  EXPECT_DOUBLE_EQ(expected, 2);
}

TEST(CompareChildren, EqualChildrenAddNothing) {
  const Planned planned{Pending{NodeRef{0, 0}, 10, 10, 1}, Step::kDescend, 3};
  ViewResponse a;
  a.descendants.resize(8, NodeDigest{1, 2});
  const ViewResponse b = a;
  std::vector<Pending> next;
  CompareChildren(planned, a, b, 0, &next);
  EXPECT_TRUE(next.empty());
}

}  // namespace
}  // namespace internal
}  // namespace tree
}  // namespace tally
