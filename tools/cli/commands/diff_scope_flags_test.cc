#include "tools/cli/commands/diff_scope_flags.h"

#include <optional>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/sync/diff_run.h"

namespace tally {
namespace cli {
namespace {

using ::testing::HasSubstr;

TEST(ReadKeyList, OneKeyALineDuplicatesAndEmptyLinesDropped) {
  std::istringstream in("user:1\nuser:2\n\nuser:1\nwith space \n");
  absl::StatusOr<tree::KeyList> keys = ReadKeyList(in, false, "f");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(*keys, (tree::KeyList{"user:1", "user:2", "with space "}));
}

TEST(ReadKeyList, EscapedLinesMayHoldAnyByte) {
  std::istringstream in("k\\x00\\xff\nline\\nbreak\n");
  absl::StatusOr<tree::KeyList> keys = ReadKeyList(in, true, "f");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(*keys, (tree::KeyList{std::string("k\0\xff", 3), "line\nbreak"}));

  std::istringstream bad("ok\nbad\\x\n");
  absl::StatusOr<tree::KeyList> r = ReadKeyList(bad, true, "keys.txt");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("keys.txt:2"));
}

TEST(ReadKeyList, RefusesAnEmptyListAndOverlongKeys) {
  std::istringstream empty("\n\n");
  EXPECT_THAT(ReadKeyList(empty, false, "f").status().message(),
              HasSubstr("no keys"));
  std::istringstream big(std::string(node::kMaxRunDiffKeyBytes + 1, 'k'));
  EXPECT_EQ(ReadKeyList(big, false, "f").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ReadDiffScope, RangeOrKeysNotBoth) {
  absl::StatusOr<tree::DiffScope> whole =
      ReadDiffScope(std::nullopt, std::nullopt, false);
  ASSERT_TRUE(whole.ok());
  EXPECT_TRUE(whole->IsWhole());
  absl::StatusOr<tree::DiffScope> range =
      ReadDiffScope("10:ff", std::nullopt, false);
  ASSERT_TRUE(range.ok());
  EXPECT_EQ(range->range, (tree::TokenRange{0x10, 0xff}));
  EXPECT_THAT(ReadDiffScope("ff:10", std::nullopt, false).status().message(),
              HasSubstr("--range"));
  EXPECT_THAT(ReadDiffScope("1:2", "keys.txt", false).status().message(),
              HasSubstr("exclude each other"));
  EXPECT_EQ(
      ReadDiffScope(std::nullopt, "/nonexistent/keys", false).status().code(),
      absl::StatusCode::kNotFound);
}

// `--range "$UNSET"`: an empty value is refused, not read as the whole
// keyspace (a repair would act on every row).
TEST(ReadDiffScope, AnEmptyValueGivenIsRefusedNotTheWholeKeyspace) {
  for (const char* empty : {"", " ", "\t"}) {
    absl::StatusOr<tree::DiffScope> range =
        ReadDiffScope(std::string(empty), std::nullopt, false);
    EXPECT_EQ(range.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(range.status().message(), HasSubstr("--range is empty"));
    absl::StatusOr<tree::DiffScope> keys =
        ReadDiffScope(std::nullopt, std::string(empty), false);
    EXPECT_EQ(keys.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(keys.status().message(), HasSubstr("--keys-from is empty"));
  }
}

// A file saved with Windows line ends or a byte order mark would make every
// key absent on both nodes: the diff would say equal for keys that differ.
TEST(ReadKeyList, RefusesCarriageReturnsAndAByteOrderMark) {
  std::istringstream crlf("user:1\r\nuser:2\r\n");
  absl::StatusOr<tree::KeyList> r = ReadKeyList(crlf, false, "keys.txt");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("keys.txt:1"));
  EXPECT_THAT(r.status().message(), HasSubstr("carriage return"));
  std::istringstream last("user:1\nuser:2\r");
  EXPECT_THAT(ReadKeyList(last, false, "f").status().message(),
              HasSubstr("f:2"));
  std::istringstream bom("\xEF\xBB\xBFuser:1\nuser:2\n");
  EXPECT_THAT(ReadKeyList(bom, false, "keys.txt").status().message(),
              HasSubstr("byte order mark"));
  // --escaped says such bytes on purpose.
  std::istringstream escaped("\\xef\\xbb\\xbfk\nk\\r\n");
  absl::StatusOr<tree::KeyList> keys = ReadKeyList(escaped, true, "f");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(*keys, (tree::KeyList{"\xEF\xBB\xBFk", "k\r"}));
}

// A file with no line end (a dump, a binary file) is not read whole.
TEST(ReadKeyList, ALineIsNotReadPastAFewTimesTheLongestKey) {
  std::istringstream huge(std::string(8 * node::kMaxRunDiffKeyBytes, 'k'));
  absl::StatusOr<tree::KeyList> r = ReadKeyList(huge, true, "dump");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("dump:1: the line is longer"));
  // The remaining bytes were not consumed.
  EXPECT_FALSE(huge.eof());
}

// A long list goes in requests within the node's limits, every key once.
TEST(RequestScopes, SplitsLongListsWithinTheRequestLimits) {
  auto keys = std::make_shared<tree::KeyList>();
  for (size_t i = 0; i < 2 * node::kMaxRunDiffKeys + 5; ++i) {
    keys->push_back(absl::StrCat("key-", i));
  }
  for (int i = 0; i < 40; ++i) {
    keys->push_back(
        absl::StrCat(std::string(node::kMaxRunDiffKeyBytes - 2, 'a'), i + 10));
  }
  tree::DiffScope scope;
  scope.keys = keys;
  std::vector<tree::DiffScope> parts = RequestScopes(scope);
  ASSERT_GE(parts.size(), 3u);
  size_t total = 0;
  for (const tree::DiffScope& part : parts) {
    ASSERT_NE(part.keys, nullptr);
    v1::RunDiffRequest request;
    request.set_peer("127.0.0.1:1");
    request.set_keyspace("default");
    SetScope(part, &request);
    // Every part passes the node's own checks.
    size_t bytes = 0;
    for (const std::string& k : request.keys()) bytes += k.size();
    EXPECT_LE(request.keys_size(), static_cast<int>(node::kMaxRunDiffKeys));
    EXPECT_LE(bytes, node::kMaxRunDiffKeyListBytes);
    EXPECT_TRUE(node::ValidateRunDiffRequest(request, "127.0.0.1:2").ok());
    total += part.keys->size();
  }
  EXPECT_EQ(total, keys->size());

  tree::DiffScope range;
  range.range = tree::TokenRange{1, 2};
  ASSERT_EQ(RequestScopes(range).size(), 1u);
  v1::RunDiffRequest request;
  SetScope(range, &request);
  EXPECT_TRUE(request.has_range());
  EXPECT_EQ(request.range().first(), 1u);
  EXPECT_EQ(request.keys_size(), 0);
}

}  // namespace
}  // namespace cli
}  // namespace tally
