#include "pg/schema/row_codec.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tree/token.h"

namespace tally {
namespace pg {
namespace {

std::string Int4(uint32_t v) {
  return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                     static_cast<char>(v >> 8), static_cast<char>(v)};
}

TEST(CanonicalColumnOrder, KeyInKeyOrderThenTheRestByName) {
  // Physical order: c, id2, a, id1, b; primary key (id1, id2).
  const std::vector<std::string> names = {"c", "id2", "a", "id1", "b"};
  auto order = CanonicalColumnOrder(names, {3, 1});
  ASSERT_TRUE(order.ok()) << order.status();
  std::vector<std::string> ordered;
  for (size_t i : *order) ordered.push_back(names[i]);
  EXPECT_EQ(ordered, (std::vector<std::string>{"id1", "id2", "a", "b", "c"}));
}

TEST(CanonicalColumnOrder, PhysicalOrderNeverMatters) {
  const std::vector<std::string> one = {"id", "b", "a", "Z", "é"};
  const std::vector<std::string> other = {"é", "a", "Z", "id", "b"};
  auto a = CanonicalColumnOrder(one, {0});
  auto b = CanonicalColumnOrder(other, {3});
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<std::string> names_a, names_b;
  for (size_t i : *a) names_a.push_back(one[i]);
  for (size_t i : *b) names_b.push_back(other[i]);
  EXPECT_EQ(names_a, names_b);
  // Byte order, not a collation: upper case before lower, UTF-8 last.
  EXPECT_EQ(names_a, (std::vector<std::string>{"id", "Z", "a", "b", "é"}));
}

TEST(CanonicalColumnOrder, RefusesWhatIsNoTable) {
  const std::vector<std::string> names = {"id", "a"};
  EXPECT_EQ(CanonicalColumnOrder(names, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CanonicalColumnOrder(names, {2}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CanonicalColumnOrder(names, {0, 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<std::string> twice = {"id", "a", "a"};
  EXPECT_EQ(CanonicalColumnOrder(twice, {0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RowCodec, FramingIsLengthThenSendBytes) {
  RowCodec codec(1, 2);
  std::string key, value;
  ASSERT_TRUE(codec
                  .Encode({Field::Of(Int4(7)), Field::Of("hi"), Field::Null()},
                          &key, &value)
                  .ok());
  EXPECT_EQ(key, std::string("\0\0\0\4\0\0\0\7", 8));
  EXPECT_EQ(value, std::string("\0\0\0\2hi\xff\xff\xff\xff", 10));
  // The token is tally's usual one over the key bytes.
  EXPECT_EQ(tree::TokenOf(key),
            tree::TokenOf(std::string("\0\0\0\4\0\0\0\7", 8)));
}

TEST(RowCodec, RoundTripsNullsEmptiesAndBinaryBytes) {
  RowCodec codec(2, 3);
  const std::string binary("\0\xff\0\x01", 4);
  const std::string one = Int4(1);
  const std::vector<Field> row = {Field::Of(one), Field::Of(""), Field::Null(),
                                  Field::Of(binary), Field::Of("")};
  std::string key, value;
  ASSERT_TRUE(codec.Encode(row, &key, &value).ok());
  std::vector<Field> back;
  std::string storage;
  ASSERT_TRUE(codec.Decode(key, value, &storage, &back).ok());
  EXPECT_EQ(back, row);
  EXPECT_TRUE(back[2].is_null());
  EXPECT_FALSE(back[1].is_null());
  ASSERT_TRUE(codec.DecodeKey(key, &storage, &back).ok());
  EXPECT_EQ(back, (std::vector<Field>{row[0], row[1]}));
  std::string key_only;
  ASSERT_TRUE(codec.EncodeKey({row[0], row[1]}, &key_only).ok());
  EXPECT_EQ(key_only, key);
}

TEST(RowCodec, NullAndEmptyEncodeDifferently) {
  RowCodec codec(1, 1);
  std::string key, v_null, v_empty;
  ASSERT_TRUE(
      codec.Encode({Field::Of(Int4(1)), Field::Null()}, &key, &v_null).ok());
  ASSERT_TRUE(
      codec.Encode({Field::Of(Int4(1)), Field::Of("")}, &key, &v_empty).ok());
  EXPECT_NE(v_null, v_empty);
}

TEST(RowCodec, ATableOfOnlyKeyColumnsHasAnEmptyValue) {
  RowCodec codec(1, 0);
  std::string key, value = "stale";
  ASSERT_TRUE(codec.Encode({Field::Of(Int4(9))}, &key, &value).ok());
  EXPECT_EQ(value, "");
  std::vector<Field> back;
  std::string storage;
  ASSERT_TRUE(codec.Decode(key, value, &storage, &back).ok());
  EXPECT_EQ(back, (std::vector<Field>{Field::Of(Int4(9))}));
}

TEST(RowCodec, RefusesTheWrongNumberOfFields) {
  RowCodec codec(1, 2);
  std::string key, value;
  EXPECT_EQ(codec.Encode({Field::Of("x")}, &key, &value).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(codec.EncodeKey({Field::Of("x"), Field::Of("y")}, &key).code(),
            absl::StatusCode::kInvalidArgument);
  // A value of another table (one column fewer, one more).
  ASSERT_TRUE(codec
                  .Encode({Field::Of("k"), Field::Of("a"), Field::Of("b")},
                          &key, &value)
                  .ok());
  std::vector<Field> back;
  std::string storage;
  RowCodec narrower(1, 1), wider(1, 3);
  EXPECT_EQ(narrower.Decode(key, value, &storage, &back).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(wider.Decode(key, value, &storage, &back).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(back.empty());
}

TEST(DecodeFields, EveryTruncationAndExtensionIsRefused) {
  std::string bytes;
  AppendFields(
      {Field::Of("abc"), Field::Null(), Field::Of(std::string(20, 'q'))},
      &bytes);
  std::vector<Field> fields = {Field::Of("kept")};
  ASSERT_TRUE(DecodeFields(bytes, 3, &fields).ok());
  ASSERT_EQ(fields.size(), 4u);  // appended
  for (size_t len = 0; len < bytes.size(); ++len) {
    fields = {Field::Of("kept")};
    absl::Status s = DecodeFields(bytes.substr(0, len), 3, &fields);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "length " << len;
    EXPECT_EQ(fields, (std::vector<Field>{Field::Of("kept")}))
        << "length " << len;
  }
  fields.clear();
  EXPECT_EQ(DecodeFields(bytes + "x", 3, &fields).code(),
            absl::StatusCode::kInvalidArgument);
  // A length that runs past the end (0xFFFFFFFE is not NULL).
  EXPECT_EQ(DecodeFields(std::string("\xff\xff\xff\xfe", 4), 1, &fields).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(fields.empty());
}

}  // namespace
}  // namespace pg
}  // namespace tally
