#include "tools/cli/format.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tally {
namespace cli {
namespace {

using ::testing::HasSubstr;

tree::RowEntry Entry(std::string key, uint64_t millis, std::string origin,
                     bool deleted = false) {
  tree::RowEntry e;
  e.key = std::move(key);
  e.version.timestamp = tree::HlcTimestamp::FromParts(millis, 3);
  e.version.origin = std::move(origin);
  e.deleted = deleted;
  return e;
}

TEST(IsValidUtf8, AcceptsTextRejectsWhatJsonCannotCarry) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain"));
  EXPECT_TRUE(
      IsValidUtf8("gr\xC3\xBC\xC3\x9F"
                  "e \xE2\x82\xAC \xF0\x9F\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xff"));
  EXPECT_FALSE(IsValidUtf8("\xC3"));              // truncated
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\x80"));              // lone continuation
}

TEST(SetBytesField, BinaryKeepsExactBytesInBase64) {
  Json obj = Json::object();
  SetBytesField(obj, "key", std::string("a\x00\xff", 3));
  EXPECT_EQ(obj["key"], "a\\x00\\xff");
  EXPECT_EQ(obj["key_base64"], "YQD/");
  // And the result always serializes.
  EXPECT_EQ(DumpJson(obj), R"({"key":"a\\x00\\xff","key_base64":"YQD/"})");
}

TEST(SetBytesField, TextStaysText) {
  Json obj = Json::object();
  SetBytesField(obj, "key", "tab\there \"q\"");
  EXPECT_FALSE(obj.contains("key_base64"));
  EXPECT_EQ(DumpJson(obj), R"({"key":"tab\there \"q\""})");
}

TEST(DumpJson, NeverThrowsOnInvalidUtf8) {
  Json obj = {{"x", std::string("\xff")}};
  EXPECT_EQ(DumpJson(obj), "{\"x\":\"\xEF\xBF\xBD\"}");
}

TEST(DifferenceText, ShowsBothSidesOnOneLine) {
  const tree::RowEntry a = Entry("k\n1", 1714557600123, "eu/db-1");
  const tree::RowEntry b = Entry("k\n1", 1714557600000, "us/db-2", true);
  EXPECT_EQ(DifferenceText(&a, &b),
            "k\\n1  a: 2024-05-01T10:00:00.123Z+3 eu/db-1  "
            "b: deleted 2024-05-01T10:00:00.000Z+3 us/db-2");
  EXPECT_EQ(DifferenceText(nullptr, &a, "A", "B"),
            "k\\n1  A: missing  B: 2024-05-01T10:00:00.123Z+3 eu/db-1");
}

TEST(DifferenceText, FlagsSameVersionDifferentContent) {
  const tree::RowEntry a = Entry("k", 1714557600123, "eu/db-1");
  EXPECT_THAT(DifferenceText(&a, &a), HasSubstr("same version"));
}

TEST(DifferenceJson, AbsentSideIsNull) {
  const tree::RowEntry a = Entry("k", 1714557600123, "eu/db-1", true);
  const Json j = DifferenceJson(&a, nullptr);
  EXPECT_EQ(j["key"], "k");
  EXPECT_TRUE(j["b"].is_null());
  EXPECT_EQ(j["a"]["deleted"], true);
  EXPECT_EQ(j["a"]["origin"], "eu/db-1");
  EXPECT_EQ(
      j["a"]["hlc"],
      absl::StrCat(tree::HlcTimestamp::FromParts(1714557600123, 3).raw()));
  EXPECT_EQ(j["a"]["millis"], 1714557600123);
  EXPECT_EQ(j["a"]["counter"], 3);
  EXPECT_EQ(j["a"]["time"], "2024-05-01T10:00:00.123Z");
}

// jq and JavaScript read every JSON number as a double,
// so an HLC (always above 2^53) lost its low bits: ...473 became ...470,
// and the logical counter with them.
TEST(VersionJson, HlcAbove2To53SurvivesJqAndJavaScript) {
  const tree::HlcTimestamp t =
      tree::HlcTimestamp::FromParts(1764582000473, 473);
  ASSERT_GT(t.raw(), uint64_t{1} << 53);
  const tree::Version version{t, "eu/db-1"};
  const tree::RowEntry entry = Entry("k", 1764582000473, "eu/db-1");
  for (const Json& j : {VersionJson(version), SideJson(&entry)}) {
    ASSERT_TRUE(j["hlc"].is_string()) << j;
    // What a JavaScript program reads back is the exact value.
    EXPECT_EQ(std::stoull(j["hlc"].get<std::string>()),
              tree::HlcTimestamp::FromParts(1764582000473,
                                            j.contains("deleted") ? 3 : 473)
                  .raw());
    // No number in it is above 2^53, where doubles start to round.
    for (const auto& item : j.items()) {
      if (item.value().is_number()) {
        EXPECT_LE(item.value().get<uint64_t>(), uint64_t{1} << 53)
            << item.key();
      }
    }
  }
  const Json j = VersionJson(version);
  EXPECT_EQ(j["millis"], 1764582000473);
  EXPECT_EQ(j["counter"], 473);
  EXPECT_EQ(j["time"], "2025-12-01T09:40:00.473Z");
  EXPECT_EQ(
      DumpJson(j),
      absl::StrCat(R"({"hlc":")", t.raw(),
                   R"(","millis":1764582000473,"counter":473,)"
                   R"("origin":"eu/db-1","time":"2025-12-01T09:40:00.473Z"})"));
}

TEST(HumanBytes, PicksAUnit) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(1536), "1.5 KB");
  EXPECT_EQ(HumanBytes(3 * 1024 * 1024), "3.0 MB");
}

}  // namespace
}  // namespace cli
}  // namespace tally
