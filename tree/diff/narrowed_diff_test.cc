// Diffs of views narrowed to a token range (TokenRangeView) or a key list
// (KeyListView) against the slow answer: exactly the differing keys of the
// scope, in every way the diff asks its views.
#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tree/diff/diff.h"
#include "tree/diff/diff_scope.h"
#include "tree/diff/key_list_view.h"
#include "tree/diff/token_range_view.h"
#include "tree/memory_tree_view.h"

namespace tally {
namespace tree {
namespace {

using Rows = std::map<std::string, RowEntry>;

RowEntry MakeRow(const std::string& key, const std::string& value,
                 uint64_t millis, bool deleted = false) {
  RowEntry row;
  row.key = key;
  row.token = TokenOf(key);
  row.version = Version{HlcTimestamp::FromParts(millis, 0), "origin"};
  row.deleted = deleted;
  row.digest = RowDigest("ks", key, row.version, deleted, value);
  return row;
}

std::vector<RowEntry> ToVector(const Rows& rows) {
  std::vector<RowEntry> out;
  for (const auto& [key, row] : rows) out.push_back(row);
  return out;
}

// `n` rows on a, b a copy with `d` differences of every kind.
void MakeReplicas(uint64_t seed, int n, int d, Rows* a, Rows* b) {
  std::mt19937_64 rng(seed);
  for (int i = 0; i < n; ++i) {
    const std::string key = absl::StrCat("key-", i);
    (*a)[key] = MakeRow(key, absl::StrCat("v", rng()), 1000 + rng() % 1000);
  }
  *b = *a;
  std::vector<std::string> keys;
  for (const auto& [key, row] : *a) keys.push_back(key);
  std::shuffle(keys.begin(), keys.end(), rng);
  for (int i = 0; i < d; ++i) {
    const std::string& key = keys[i];
    switch (i % 5) {
      case 0:
        (*a)[key] = MakeRow(key, "new-a", 5000 + i);
        break;
      case 1:
        (*b)[key] = MakeRow(key, "new-b", 5000 + i);
        break;
      case 2:
        (*b)[key] = MakeRow(key, "", 5000 + i, /*deleted=*/true);
        break;
      case 3:
        b->erase(key);
        break;
      case 4:
        a->erase(key);
        break;
    }
  }
}

// The differing keys for which `in_scope` holds, the slow way.
template <typename InScope>
std::set<std::string> Expected(const Rows& a, const Rows& b, InScope in_scope) {
  std::set<std::string> out;
  for (const auto& [key, row] : a) {
    auto it = b.find(key);
    if ((it == b.end() || it->second.digest != row.digest) && in_scope(key)) {
      out.insert(key);
    }
  }
  for (const auto& [key, row] : b) {
    if (a.count(key) == 0 && in_scope(key)) out.insert(key);
  }
  return out;
}

// Forwards to a view and counts the rows it hands out (listed or scanned).
class CountingView : public TreeView {
 public:
  explicit CountingView(TreeView& view) : view_(view) {}
  absl::StatusOr<ViewSummary> Summary(int top_levels) override {
    return view_.Summary(top_levels);
  }
  absl::StatusOr<ViewResponse> Exchange(const ViewRequest& request) override {
    absl::StatusOr<ViewResponse> r = view_.Exchange(request);
    if (r.ok()) rows += r->entries.size();
    return r;
  }
  absl::Status Scan(absl::Span<const NodeRef> ranges,
                    const EntrySink& sink) override {
    return view_.Scan(ranges, [&](const RowEntry& e) {
      ++rows;
      return sink(e);
    });
  }
  uint64_t rows = 0;

 private:
  TreeView& view_;
};

struct Mode {
  DiffOptions::OwnView own_view;
  bool seeded;
  int depth_a;
  int depth_b;
};

std::vector<Mode> AllModes() {
  return {{DiffOptions::OwnView::kNeither, true, 10, 10},
          {DiffOptions::OwnView::kA, true, 10, 10},
          {DiffOptions::OwnView::kB, true, 8, 12},
          {DiffOptions::OwnView::kNeither, false, 12, 8},
          {DiffOptions::OwnView::kA, false, 10, 6}};
}

std::set<std::string> DiffScoped(const Rows& a, const Rows& b,
                                 const DiffScope& scope, const Mode& mode,
                                 DiffStats* stats = nullptr) {
  auto whole_a = MemoryTreeView::Create(mode.depth_a, ToVector(a));
  auto whole_b = MemoryTreeView::Create(mode.depth_b, ToVector(b));
  EXPECT_TRUE(whole_a.ok() && whole_b.ok());
  std::unique_ptr<TreeView> part_a = NarrowView(**whole_a, scope);
  std::unique_ptr<TreeView> part_b = NarrowView(**whole_b, scope);
  EXPECT_TRUE(part_a != nullptr && part_b != nullptr);
  DiffOptions options;
  options.own_view = mode.own_view;
  options.seeded = mode.seeded;
  std::set<std::string> found;
  DiffStats own_stats;
  absl::Status s = DiffViews(
      *part_a, *part_b, options,
      [&](const RowEntry* in_a, const RowEntry* in_b) {
        const std::string& key = in_a != nullptr ? in_a->key : in_b->key;
        EXPECT_EQ(in_a == nullptr, a.count(key) == 0) << key;
        EXPECT_EQ(in_b == nullptr, b.count(key) == 0) << key;
        EXPECT_TRUE(found.insert(key).second) << "reported twice: " << key;
        return absl::OkStatus();
      },
      stats != nullptr ? stats : &own_stats);
  EXPECT_TRUE(s.ok()) << s;
  return found;
}

TEST(TokenRangeView, FindsExactlyTheRangesDifferences) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 12; ++round) {
    Rows a, b;
    MakeReplicas(round, 3000, 300, &a, &b);
    Token first = rng(), last = rng();
    if (round % 3 == 0) last = first + (~Token{0} >> 4);  // a sixteenth
    if (last < first) std::swap(first, last);
    DiffScope scope;
    scope.range = TokenRange{first, last};
    const std::set<std::string> want = Expected(
        a, b,
        [&](const std::string& k) { return scope.range.Contains(TokenOf(k)); });
    for (const Mode& mode : AllModes()) {
      EXPECT_EQ(DiffScoped(a, b, scope, mode), want)
          << "range " << scope.range.ToString() << " own_view "
          << static_cast<int>(mode.own_view) << " seeded " << mode.seeded;
    }
  }
}

TEST(TokenRangeView, SummaryCountsAndDigestsOnlyTheRange) {
  Rows a, b;
  MakeReplicas(3, 2000, 0, &a, &b);
  const TokenRange range{0x3000000000000000u, 0x9fffffffffffffffu};
  auto whole = MemoryTreeView::Create(9, ToVector(a));
  ASSERT_TRUE(whole.ok());
  TokenRangeView part(**whole, range);
  uint64_t count = 0, fingerprint = 0;
  for (const auto& [key, row] : a) {
    if (!range.Contains(row.token)) continue;
    ++count;
    fingerprint ^= row.digest.Fingerprint();
  }
  for (int top : {0, 3, 5}) {
    absl::StatusOr<ViewSummary> s = part.Summary(top);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->depth, 9);
    EXPECT_EQ(s->row_count, count);
    EXPECT_EQ(s->root.Fingerprint(), fingerprint);
    ASSERT_EQ(s->top.size(), top == 0 ? 0u : (1u << top));
  }
  // Equal replicas outside the range differing are not seen.
  Rows c = a;
  for (auto& [key, row] : c) {
    if (!range.Contains(row.token)) row = MakeRow(key, "changed", 9999);
  }
  for (const Mode& mode : AllModes()) {
    DiffScope scope;
    scope.range = range;
    EXPECT_TRUE(DiffScoped(a, c, scope, mode).empty());
  }
}

// A range one side lacks is scanned on the other, and only the range's
// rows are read: not the rest of the keyspace.
TEST(TokenRangeView, ScansReadOnlyTheRangesRows) {
  Rows a, b;
  MakeReplicas(5, 20000, 0, &a, &b);
  const TokenRange range{0x1234000000000000u, 0x1334ffffffffffffu};
  uint64_t in_range = 0;
  for (const auto& [key, row] : a) in_range += range.Contains(row.token);
  ASSERT_GT(in_range, 50u);
  Rows empty;
  auto whole_a = MemoryTreeView::Create(10, ToVector(a));
  auto whole_b = MemoryTreeView::Create(10, ToVector(empty));
  ASSERT_TRUE(whole_a.ok() && whole_b.ok());
  CountingView counted_a(**whole_a);
  TokenRangeView part_a(counted_a, range);
  TokenRangeView part_b(**whole_b, range);
  uint64_t found = 0;
  DiffStats stats;
  ASSERT_TRUE(DiffViews(
                  part_a, part_b, DiffOptions{},
                  [&](const RowEntry*, const RowEntry*) {
                    ++found;
                    return absl::OkStatus();
                  },
                  &stats)
                  .ok());
  EXPECT_EQ(found, in_range);
  EXPECT_EQ(counted_a.rows, in_range);
}

TEST(KeyListView, FindsExactlyTheListedKeysDifferences) {
  std::mt19937_64 rng(5);
  for (int round = 0; round < 6; ++round) {
    Rows a, b;
    MakeReplicas(100 + round, 3000, 400, &a, &b);
    auto keys = std::make_shared<KeyList>();
    for (int i = 0; i < 500; ++i) {
      keys->push_back(absl::StrCat("key-", rng() % 3000));
    }
    keys->push_back("absent-on-both");
    keys->push_back(keys->front());  // a duplicate
    const std::set<std::string> listed(keys->begin(), keys->end());
    DiffScope scope;
    scope.keys = keys;
    const std::set<std::string> want =
        Expected(a, b, [&](const std::string& k) { return listed.count(k); });
    ASSERT_FALSE(want.empty());
    for (const Mode& mode : AllModes()) {
      EXPECT_EQ(DiffScoped(a, b, scope, mode), want)
          << "own_view " << static_cast<int>(mode.own_view);
    }
  }
}

TEST(KeyListView, ReadsOnlyTheListedKeysRows) {
  Rows a, b;
  MakeReplicas(9, 20000, 2000, &a, &b);
  auto keys = std::make_shared<KeyList>(KeyList{"key-1", "key-2", "key-3"});
  auto whole_a = MemoryTreeView::Create(10, ToVector(a));
  ASSERT_TRUE(whole_a.ok());
  CountingView counted(**whole_a);
  KeyListView part(counted, keys);
  absl::StatusOr<ViewSummary> s = part.Summary(5);
  ASSERT_TRUE(s.ok()) << s.status();
  uint64_t present = 0;
  for (const std::string& k : *keys) present += a.count(k);
  EXPECT_EQ(s->row_count, present);
  EXPECT_EQ(counted.rows, present);
}

TEST(DiffScope, DescribesItselfAndNarrowsOnlyWhenAsked) {
  DiffScope whole;
  EXPECT_TRUE(whole.IsWhole());
  EXPECT_EQ(whole.Describe(), "");
  auto view = MemoryTreeView::Create(4, {});
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(NarrowView(**view, whole), nullptr);
  DiffScope range;
  range.range = TokenRange{0, 0xff};
  EXPECT_EQ(range.Describe(), "tokens 0000000000000000:00000000000000ff");
  EXPECT_NE(NarrowView(**view, range), nullptr);
  DiffScope keys;
  keys.keys = std::make_shared<KeyList>(KeyList{"a", "b"});
  EXPECT_EQ(keys.Describe(), "2 keys");
}

}  // namespace
}  // namespace tree
}  // namespace tally
