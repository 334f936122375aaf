#include "tools/cli/heat_strip.h"

#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tally {
namespace cli {
namespace {

using ::testing::HasSubstr;

google::protobuf::RepeatedPtrField<v1::HeatSegment> Segments(
    const std::vector<std::pair<uint32_t, uint64_t>>& counts) {
  google::protobuf::RepeatedPtrField<v1::HeatSegment> out;
  for (const auto& [segment, differences] : counts) {
    v1::HeatSegment* s = out.Add();
    s->set_segment(segment);
    s->set_differences(differences);
  }
  return out;
}

TEST(HeatColumns, SixtyFourSegmentsAreOneColumnEach) {
  absl::StatusOr<std::vector<uint64_t>> columns =
      HeatColumns(64, Segments({{0, 1}, {10, 7}, {63, 2}}));
  ASSERT_TRUE(columns.ok()) << columns.status();
  ASSERT_EQ(columns->size(), 64u);
  EXPECT_EQ((*columns)[0], 1u);
  EXPECT_EQ((*columns)[10], 7u);
  EXPECT_EQ((*columns)[63], 2u);
  EXPECT_EQ((*columns)[11], 0u);
}

TEST(HeatColumns, FinerSegmentsAddUpAndCoarserOnesSpreadOverTheirColumns) {
  // 128 segments: two to a column.
  absl::StatusOr<std::vector<uint64_t>> fine =
      HeatColumns(128, Segments({{20, 3}, {21, 4}, {127, 1}}));
  ASSERT_TRUE(fine.ok()) << fine.status();
  EXPECT_EQ((*fine)[10], 7u);
  EXPECT_EQ((*fine)[63], 1u);
  // 4 segments: the second quarter of the token space is columns 16-31.
  absl::StatusOr<std::vector<uint64_t>> coarse =
      HeatColumns(4, Segments({{1, 5}}));
  ASSERT_TRUE(coarse.ok()) << coarse.status();
  EXPECT_EQ((*coarse)[15], 0u);
  EXPECT_EQ((*coarse)[16], 5u);
  EXPECT_EQ((*coarse)[31], 5u);
  EXPECT_EQ((*coarse)[32], 0u);
}

TEST(HeatColumns, RejectsAHeatItCannotDraw) {
  EXPECT_TRUE(absl::IsInvalidArgument(HeatColumns(0, Segments({})).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      HeatColumns(kMaxHeatSegments + 1, Segments({})).status()));
  const absl::Status outside = HeatColumns(64, Segments({{64, 1}})).status();
  EXPECT_TRUE(absl::IsInvalidArgument(outside));
  EXPECT_THAT(outside.message(), HasSubstr("segment 64 of 64"));
}

TEST(HeatShade, ZeroIsBlankAnyCountShowsAndTheMaxIsDarkest) {
  EXPECT_EQ(HeatShade(0, 1000), ' ');
  EXPECT_EQ(HeatShade(1, 1000), '.');    // one in a thousand still shows
  EXPECT_EQ(HeatShade(500, 1000), '+');  // ceil(4.5): the fifth of nine
  EXPECT_EQ(HeatShade(1000, 1000), '@');
  EXPECT_EQ(HeatShade(1, 1), '@');
  // No overflow near the top of uint64_t.
  const uint64_t huge = std::numeric_limits<uint64_t>::max();
  EXPECT_EQ(HeatShade(huge - 1, huge), '@');
  EXPECT_EQ(HeatShade(huge / 2, huge), '+');
}

TEST(HeatStrip, DrawsOneCharacterPerColumn) {
  std::vector<uint64_t> columns(kHeatStripWidth, 0);
  columns[0] = 1;
  columns[1] = 2;
  columns[2] = 3;
  const std::string strip = HeatStrip(columns, 3);
  EXPECT_EQ(strip, "-*@" + std::string(kHeatStripWidth - 3, ' '));
}

TEST(HeatLegend, SaysWhatEachShadeStandsFor) {
  EXPECT_EQ(HeatLegend(3),
            "shades (differences in a column): ' ' 0  '-' 1  '*' 2  '@' 3\n");
  EXPECT_EQ(HeatLegend(18),
            "shades (differences in a column): ' ' 0  '.' 1-2  ':' 3-4  "
            "'-' 5-6  '=' 7-8  '+' 9-10  '*' 11-12  '#' 13-14  '%' 15-16  "
            "'@' 17-18\n");
  // The legend and the shades agree for every count.
  for (uint64_t max : {1u, 5u, 9u, 10u, 100u, 1001u}) {
    const std::string legend = HeatLegend(max);
    for (uint64_t n = 1; n <= max; ++n) {
      const char shade = HeatShade(n, max);
      const std::string entry = absl::StrCat("'", std::string(1, shade), "' ");
      const size_t at = legend.find(entry);
      ASSERT_NE(at, std::string::npos) << max << " " << n;
      // "'c' first-top" or "'c' top".
      const std::string range = legend.substr(at + entry.size());
      uint64_t first = 0, top = 0;
      if (std::sscanf(range.c_str(), "%lu-%lu", &first, &top) != 2) {
        top = first;
      }
      EXPECT_LE(first, n) << legend;
      EXPECT_GE(top, n) << legend;
    }
  }
}

}  // namespace
}  // namespace cli
}  // namespace tally
