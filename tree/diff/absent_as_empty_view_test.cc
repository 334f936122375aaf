#include "tree/diff/absent_as_empty_view.h"

#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tree/diff/diff.h"
#include "tree/memory_tree_view.h"

namespace tally {
namespace tree {
namespace {

using ::testing::HasSubstr;

RowEntry MakeRow(const std::string& key) {
  RowEntry row;
  row.key = key;
  row.token = TokenOf(key);
  row.version = Version{HlcTimestamp::FromParts(1000, 0), "n1"};
  row.digest = RowDigest("ks", key, row.version, false, "v-" + key);
  return row;
}

std::unique_ptr<MemoryTreeView> ViewOf(const std::vector<std::string>& keys) {
  std::vector<RowEntry> rows;
  for (const std::string& key : keys) rows.push_back(MakeRow(key));
  absl::StatusOr<std::unique_ptr<MemoryTreeView>> view =
      MemoryTreeView::Create(kDefaultDepth, std::move(rows));
  EXPECT_TRUE(view.ok()) << view.status();
  return std::move(*view);
}

// A replica's view that answers every summary with one fixed error (the
// remote view of a node that lacks the keyspace says kNotFound), and counts
// the calls that reach it.
class FailingView : public TreeView {
 public:
  explicit FailingView(absl::Status error, int* calls)
      : error_(std::move(error)), calls_(*calls) {}

  absl::StatusOr<ViewSummary> Summary(int) override {
    ++calls_;
    return error_;
  }
  absl::StatusOr<ViewResponse> Exchange(const ViewRequest&) override {
    ++calls_;
    return error_;
  }
  absl::Status Scan(absl::Span<const NodeRef>, const EntrySink&) override {
    ++calls_;
    return error_;
  }
  std::optional<ViewTraffic> MeasuredTraffic() const override {
    return ViewTraffic{10, 20};
  }

 private:
  absl::Status error_;
  int& calls_;
};

// The keys DiffViews reports between `a` and an empty `b`.
std::set<std::string> Differences(TreeView& a, TreeView& b,
                                  absl::Status* status) {
  std::set<std::string> keys;
  *status = DiffViews(
      a, b, DiffOptions{},
      [&](const RowEntry* in_a, const RowEntry* in_b) {
        EXPECT_TRUE(in_b == nullptr) << "b is empty";
        keys.insert(in_a->key);
        return absl::OkStatus();
      },
      nullptr);
  return keys;
}

TEST(AbsentAsEmptyView, NotFoundComparesAsAnEmptyKeyspace) {
  int calls = 0;
  AbsentAsEmptyView a(ViewOf({"k1", "k2", "k3"}));
  AbsentAsEmptyView b(std::make_unique<FailingView>(
      absl::NotFoundError("no keyspace 'ks'"), &calls));
  absl::Status status;
  EXPECT_EQ(Differences(a, b, &status),
            (std::set<std::string>{"k1", "k2", "k3"}));
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_FALSE(a.absent());
  EXPECT_TRUE(b.absent());
  // Only the summary asked the replica; the rest was answered as empty.
  EXPECT_EQ(calls, 1);
  // The kNotFound answer travelled: its bytes are still the replica's.
  ASSERT_TRUE(b.MeasuredTraffic().has_value());
  EXPECT_EQ(b.MeasuredTraffic()->bytes_sent, 10u);
  EXPECT_EQ(b.MeasuredTraffic()->bytes_received, 20u);
}

TEST(AbsentAsEmptyView, NullViewIsAbsentAndMovedNothing) {
  AbsentAsEmptyView a(ViewOf({"k1"}));
  AbsentAsEmptyView b(nullptr);
  absl::Status status;
  EXPECT_EQ(Differences(a, b, &status), (std::set<std::string>{"k1"}));
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_TRUE(b.absent());
  ASSERT_TRUE(b.MeasuredTraffic().has_value());
  EXPECT_EQ(b.MeasuredTraffic()->bytes_sent, 0u);
  EXPECT_EQ(b.MeasuredTraffic()->bytes_received, 0u);
}

TEST(AbsentAsEmptyView, PresentKeyspacePassesThrough) {
  std::unique_ptr<MemoryTreeView> inner = ViewOf({"k1", "k2"});
  absl::StatusOr<ViewSummary> expected = inner->Summary(2);
  ASSERT_TRUE(expected.ok());
  AbsentAsEmptyView view(std::move(inner));
  absl::StatusOr<ViewSummary> summary = view.Summary(2);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_FALSE(view.absent());
  EXPECT_EQ(summary->row_count, 2u);
  EXPECT_EQ(summary->root, expected->root);
  EXPECT_EQ(summary->top.size(), expected->top.size());

  ViewRequest request;
  request.list.push_back(NodeRef{0, 0});
  absl::StatusOr<ViewResponse> response = view.Exchange(request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->entries.size(), 2u);
}

TEST(AbsentAsEmptyView, OtherErrorsAreNotAbsence) {
  int calls = 0;
  AbsentAsEmptyView view(std::make_unique<FailingView>(
      absl::UnavailableError("node b is unavailable"), &calls));
  absl::StatusOr<ViewSummary> summary = view.Summary(0);
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(view.absent());
}

TEST(AbsentAsEmptyView, EmptySummaryHasNoRows) {
  AbsentAsEmptyView view(nullptr);
  absl::StatusOr<ViewSummary> summary = view.Summary(3);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->row_count, 0u);
  EXPECT_EQ(summary->depth, kDefaultDepth);
  EXPECT_EQ(summary->top.size(), 8u);
}

TEST(KeyspaceAbsentOnBoth, IsNotFoundNamingTheKeyspaceAndBothSides) {
  absl::Status s = KeyspaceAbsentOnBoth("users", "node-a", "node-b");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("'users'"));
  EXPECT_THAT(s.message(), HasSubstr("node-a"));
  EXPECT_THAT(s.message(), HasSubstr("node-b"));
}

}  // namespace
}  // namespace tree
}  // namespace tally
