#include "tools/cli/jsonl.h"

#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tally {
namespace cli {
namespace {

using ::testing::HasSubstr;

TEST(ParseJsonlRow, ReadsKeyAndValue) {
  absl::StatusOr<KeyValue> row =
      ParseJsonlRow(R"({"key": "user:1", "value": "{\"name\": \"Ada\"}"})");
  ASSERT_TRUE(row.ok()) << row.status();
  EXPECT_EQ(row->key, "user:1");
  EXPECT_EQ(row->value, R"({"name": "Ada"})");
}

TEST(ParseJsonlRow, Base64FieldsCarryBinaryBytes) {
  absl::StatusOr<KeyValue> row =
      ParseJsonlRow(R"({"key_base64": "AP8=", "value_base64": ""})");
  ASSERT_TRUE(row.ok()) << row.status();
  EXPECT_EQ(row->key, std::string("\x00\xff", 2));
  EXPECT_EQ(row->value, "");
}

TEST(ParseJsonlRow, EmptyValueIsAllowedEmptyKeyIsNot) {
  EXPECT_TRUE(ParseJsonlRow(R"({"key": "k", "value": ""})").ok());
  absl::StatusOr<KeyValue> row = ParseJsonlRow(R"({"key": "", "value": "v"})");
  EXPECT_EQ(row.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(row.status().message(), HasSubstr("empty"));
}

TEST(ParseJsonlRow, RejectsWhatIsNotTheDocumentedShape) {
  const char* bad[] = {
      R"({"key": "k"})",                                      // no value
      R"({"value": "v"})",                                    // no key
      R"({"key": 7, "value": "v"})",                          // number key
      R"({"key": "k", "value": null})",                       // null value
      R"({"key": "k", "valeu": "v"})",                        // typo
      R"({"key": "k", "key_base64": "aw==", "value": "v"})",  // both
      R"({"key_base64": "!!", "value": "v"})",                // not base64
      R"(["k", "v"])",                                        // array
      R"({"key": "k", "value": "v")",                         // truncated
      R"(not json)",
  };
  for (const char* line : bad) {
    absl::StatusOr<KeyValue> row = ParseJsonlRow(line);
    EXPECT_EQ(row.status().code(), absl::StatusCode::kInvalidArgument) << line;
    EXPECT_FALSE(row.status().message().empty()) << line;
  }
}

TEST(ParseJsonlRow, TypoNamesTheUnexpectedField) {
  absl::StatusOr<KeyValue> row = ParseJsonlRow(R"({"key": "k", "valeu": "v"})");
  EXPECT_THAT(row.status().message(), HasSubstr("\"valeu\""));
}

TEST(JsonlReader, SkipsBlankLinesAndCarriageReturns) {
  std::istringstream in(
      "\xEF\xBB\xBF{\"key\":\"a\",\"value\":\"1\"}\r\n"
      "\n"
      "   \n"
      "{\"key\":\"b\",\"value\":\"2\"}");  // no final newline
  JsonlReader reader(&in);
  KeyValue row;
  ASSERT_TRUE(*reader.Next(&row));
  EXPECT_EQ(row.key, "a");
  ASSERT_TRUE(*reader.Next(&row));
  EXPECT_EQ(row.key, "b");
  EXPECT_EQ(reader.line_number(), 4u);
  absl::StatusOr<bool> more = reader.Next(&row);
  ASSERT_TRUE(more.ok());
  EXPECT_FALSE(*more);
}

TEST(JsonlReader, CountsTheBytesItReadNewlinesIncluded) {
  const std::string first = "{\"key\":\"a\",\"value\":\"1\"}\r\n";
  const std::string blank = "\n";
  const std::string last = "{\"key\":\"b\",\"value\":\"2\"}";  // no \n
  std::istringstream in(first + blank + last);
  JsonlReader reader(&in);
  KeyValue row;
  EXPECT_EQ(reader.bytes_read(), 0u);
  ASSERT_TRUE(*reader.Next(&row));
  EXPECT_EQ(reader.bytes_read(), first.size());
  ASSERT_TRUE(*reader.Next(&row));
  // All of the input, which is how a load knows it is at 100%.
  EXPECT_EQ(reader.bytes_read(), first.size() + blank.size() + last.size());
}

TEST(JsonlReader, ErrorNamesTheLineNumber) {
  std::istringstream in(
      "{\"key\":\"a\",\"value\":\"1\"}\n"
      "\n"
      "{\"key\":\"b\"}\n"
      "{\"key\":\"c\",\"value\":\"3\"}\n");
  JsonlReader reader(&in);
  KeyValue row;
  ASSERT_TRUE(*reader.Next(&row));
  absl::StatusOr<bool> more = reader.Next(&row);
  EXPECT_EQ(more.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(more.status().message(), HasSubstr("line 3:"));
}

}  // namespace
}  // namespace cli
}  // namespace tally
