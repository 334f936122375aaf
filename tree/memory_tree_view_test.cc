#include "tree/memory_tree_view.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tally {
namespace tree {
namespace {

RowEntry MakeRow(const std::string& key, const std::string& value,
                 uint64_t millis, const std::string& origin, bool deleted) {
  RowEntry row;
  row.key = key;
  row.token = TokenOf(key);
  row.version = Version{HlcTimestamp::FromParts(millis, 0), origin};
  row.deleted = deleted;
  row.digest = RowDigest("ks", key, row.version, deleted, value);
  return row;
}

TEST(MemoryTreeView, RejectsMalformedRequests) {
  auto view = MemoryTreeView::Create(8, {});
  ASSERT_TRUE(view.ok());
  ViewRequest bad_level;
  bad_level.descend.push_back({NodeRef{65, 0}, 1});
  EXPECT_EQ((*view)->Exchange(bad_level).status().code(),
            absl::StatusCode::kInvalidArgument);
  ViewRequest bad_index;
  bad_index.list.push_back(NodeRef{3, 8});
  EXPECT_EQ((*view)->Exchange(bad_index).status().code(),
            absl::StatusCode::kInvalidArgument);
  ViewRequest too_far;
  too_far.descend.push_back({NodeRef{60, 0}, 5});
  EXPECT_EQ((*view)->Exchange(too_far).status().code(),
            absl::StatusCode::kInvalidArgument);
  ViewRequest too_many;
  too_many.descend.push_back({NodeRef{0, 0}, 16});
  too_many.descend.push_back({NodeRef{1, 0}, 1});
  EXPECT_EQ((*view)->Exchange(too_many).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(MemoryTreeView, RejectsDuplicateKeys) {
  std::vector<RowEntry> rows{MakeRow("k", "1", 1, "o", false),
                             MakeRow("k", "2", 2, "o", false)};
  EXPECT_EQ(MemoryTreeView::Create(8, rows).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tree
}  // namespace tally
