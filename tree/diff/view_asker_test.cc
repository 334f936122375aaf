#include "tree/diff/view_asker.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tree/diff/diff_batches.h"
#include "tree/diff/diff_compare.h"
#include "tree/diff/diff_planner.h"
#include "tree/memory_tree_view.h"

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

// Two views of 200 rows that differ in three ways: a changed row, a row
// on view a only, a row on view b only.
struct TwoViews {
  TwoViews() {
    std::vector<RowEntry> rows_a;
    std::vector<RowEntry> rows_b;
    for (int i = 0; i < 200; ++i) {
      const std::string key = absl::StrCat("key-", i);
      rows_a.push_back(Row(key, "v"));
      if (i == 7) {
        rows_b.push_back(Row(key, "changed"));
      } else if (i != 11) {
        rows_b.push_back(Row(key, "v"));
      }
    }
    rows_b.push_back(Row("only-b", "v"));
    a = std::move(*MemoryTreeView::Create(4, rows_a));
    b = std::move(*MemoryTreeView::Create(6, rows_b));
  }
  std::unique_ptr<MemoryTreeView> a;
  std::unique_ptr<MemoryTreeView> b;
};

// What a round learns from the answers: the children that differ and the
// rows that differ, as text.
struct Learned {
  std::vector<std::string> children;
  std::vector<std::string> rows;
};

// One batch: the root expanded 3 levels, and the whole keyspace listed.
Learned AskOneBatch(TreeView& a, TreeView& b, const DiffOptions& options,
                    AskMode mode) {
  const std::vector<Planned> plan{
      Planned{Pending{NodeRef{0, 0}, 200, 200, 3}, Step::kDescend, 3},
      Planned{Pending{NodeRef{0, 0}, 200, 200, 3}, Step::kList, 0}};
  const RoundRequests round = PackRound(plan, options.dense_fraction);
  EXPECT_EQ(round.batches.size(), 1u);
  ViewAsker asker(a, b, options);
  Learned learned;
  const absl::Status s = asker.AskBatches(
      mode, SeededFingerprints{42, 16, 32}, round.batches,
      [&](const Batch& batch, ViewResponse answer_a, ViewResponse answer_b) {
        EXPECT_TRUE(CheckAnswerShape(batch.request, answer_a).ok());
        EXPECT_TRUE(CheckAnswerShape(batch.request, answer_b).ok());
        std::vector<Pending> next;
        for (const auto& [planned, slot] : batch.descended) {
          CompareChildren(*planned, answer_a, answer_b, slot, &next);
        }
        for (const Pending& p : next) {
          learned.children.push_back(absl::StrCat(p.node.DebugString(), " ",
                                                  p.count_a, "/", p.count_b));
        }
        return CompareRows(
            answer_a, answer_b,
            [&](const RowEntry* in_a, const RowEntry* in_b) {
              learned.rows.push_back(absl::StrCat(
                  in_a != nullptr ? in_a->key : in_b->key,
                  in_a != nullptr ? "+" : "-", in_b != nullptr ? "+" : "-"));
              return absl::OkStatus();
            });
      });
  EXPECT_TRUE(s.ok()) << s;
  std::sort(learned.rows.begin(), learned.rows.end());
  return learned;
}

TEST(ViewAsker, EveryWayOfAskingLearnsTheSame) {
  TwoViews views;
  const DiffOptions plain;
  const Learned expected =
      AskOneBatch(*views.a, *views.b, plain, AskMode::kPlain);
  EXPECT_FALSE(expected.children.empty());
  EXPECT_LE(expected.children.size(), 3u);
  EXPECT_EQ(expected.rows,
            (std::vector<std::string>{"key-11+-", "key-7++", "only-b-+"}));

  const Learned seeded =
      AskOneBatch(*views.a, *views.b, plain, AskMode::kSeeded);
  EXPECT_EQ(seeded.children, expected.children);
  EXPECT_EQ(seeded.rows, expected.rows);
  for (DiffOptions::OwnView own :
       {DiffOptions::OwnView::kA, DiffOptions::OwnView::kB}) {
    DiffOptions options;
    options.own_view = own;
    const Learned own_first =
        AskOneBatch(*views.a, *views.b, options, AskMode::kOwnFirst);
    EXPECT_EQ(own_first.children, expected.children);
    EXPECT_EQ(own_first.rows, expected.rows);
  }
}

TEST(ViewAsker, AsksBothSummaries) {
  TwoViews views;
  const DiffOptions options;
  ViewAsker asker(*views.a, *views.b, options);
  ViewSummary summary_a;
  ViewSummary summary_b;
  ASSERT_TRUE(asker.AskSummaries(2, &summary_a, &summary_b).ok());
  EXPECT_EQ(summary_a.row_count, 200u);
  EXPECT_EQ(summary_b.row_count, 200u);
  EXPECT_EQ(summary_a.depth, 4);
  EXPECT_EQ(summary_b.depth, 6);
  EXPECT_EQ(summary_a.top.size(), 4u);
  EXPECT_EQ(summary_b.top.size(), 4u);
  EXPECT_GT(asker.Traffic().bytes_received, 0u);
}

TEST(ViewAsker, ScansOneSideAndCountsItsRows) {
  TwoViews views;
  const DiffOptions options;
  ViewAsker asker(*views.a, *views.b, options);
  int rows = 0;
  ASSERT_TRUE(asker
                  .ScanSide(Side::kB, {NodeRef{0, 0}},
                            [&](const RowEntry&) {
                              ++rows;
                              return absl::OkStatus();
                            })
                  .ok());
  EXPECT_EQ(rows, 200);
  const ViewTraffic traffic = asker.Traffic();
  EXPECT_EQ(traffic.bytes_sent, 8u);  // one range named
  EXPECT_GT(traffic.bytes_received, 200u);
}

TEST(ViewAsker, TheOwnViewsBytesAreNotCounted) {
  TwoViews views;
  DiffOptions options;
  options.own_view = DiffOptions::OwnView::kA;
  ViewAsker asker(*views.a, *views.b, options);
  auto count = [](const RowEntry&) { return absl::OkStatus(); };
  ASSERT_TRUE(asker.ScanSide(Side::kA, {NodeRef{0, 0}}, count).ok());
  EXPECT_EQ(asker.Traffic().bytes_sent, 0u);
  EXPECT_EQ(asker.Traffic().bytes_received, 0u);
  ASSERT_TRUE(asker.ScanSide(Side::kB, {NodeRef{0, 0}}, count).ok());
  EXPECT_GT(asker.Traffic().bytes_received, 0u);
}

TEST(ViewAsker, ScanStopsAtTheFirstErrorOfTheSink) {
  TwoViews views;
  const DiffOptions options;
  ViewAsker asker(*views.a, *views.b, options);
  int rows = 0;
  const absl::Status s =
      asker.ScanSide(Side::kA, {NodeRef{0, 0}}, [&](const RowEntry&) {
        ++rows;
        return absl::CancelledError("enough");
      });
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(rows, 1);
}

}  // namespace
}  // namespace internal
}  // namespace tree
}  // namespace tally
