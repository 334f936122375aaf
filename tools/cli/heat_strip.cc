#include "tools/cli/heat_strip.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tally {
namespace cli {
namespace {

constexpr uint64_t kLevels = kHeatShades.size() - 1;  // 9 above zero

// The largest count shade `level` (1..kLevels) stands for on the scale up
// to `max`: floor(max * level / kLevels), without overflow.
uint64_t LevelTop(uint64_t max, uint64_t level) {
  return static_cast<uint64_t>(static_cast<unsigned __int128>(max) * level /
                               kLevels);
}

}  // namespace

absl::StatusOr<std::vector<uint64_t>> HeatColumns(
    uint32_t segments,
    const google::protobuf::RepeatedPtrField<v1::HeatSegment>& counts) {
  if (segments == 0 || segments > kMaxHeatSegments) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the heat has %d segments; expected 1..%d", segments,
                        kMaxHeatSegments));
  }
  std::vector<uint64_t> by_segment(segments, 0);
  for (const v1::HeatSegment& s : counts) {
    if (s.segment() >= segments) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the heat has segment %d of %d segments", s.segment(), segments));
    }
    by_segment[s.segment()] += s.differences();
  }
  std::vector<uint64_t> columns(kHeatStripWidth, 0);
  if (segments >= static_cast<uint32_t>(kHeatStripWidth)) {
    // Segment i starts at i / segments of the token space: in column
    // floor(i * width / segments).
    for (uint32_t i = 0; i < segments; ++i) {
      columns[uint64_t{i} * kHeatStripWidth / segments] += by_segment[i];
    }
  } else {
    for (int c = 0; c < kHeatStripWidth; ++c) {
      columns[c] = by_segment[uint64_t(c) * segments / kHeatStripWidth];
    }
  }
  return columns;
}

char HeatShade(uint64_t count, uint64_t max) {
  if (count == 0 || max == 0) return kHeatShades[0];
  if (count >= max) return kHeatShades[kLevels];
  // The first level whose top holds the count: ceil(kLevels * count / max).
  const unsigned __int128 scaled =
      static_cast<unsigned __int128>(count) * kLevels;
  const uint64_t level = static_cast<uint64_t>((scaled + max - 1) / max);
  return kHeatShades[level];
}

std::string HeatStrip(const std::vector<uint64_t>& columns, uint64_t max) {
  std::string strip;
  strip.reserve(columns.size());
  for (uint64_t c : columns) strip.push_back(HeatShade(c, max));
  return strip;
}

std::string HeatLegend(uint64_t max) {
  std::string legend = "shades (differences in a column): ' ' 0";
  uint64_t below = 0;  // the top of the last shade listed
  for (uint64_t level = 1; level <= kLevels; ++level) {
    const uint64_t top = LevelTop(max, level);
    if (top <= below) continue;  // no whole count maps here
    const uint64_t first = below + 1;
    absl::StrAppend(
        &legend, "  '", std::string(1, kHeatShades[level]), "' ",
        first == top ? absl::StrCat(top) : absl::StrCat(first, "-", top));
    below = top;
  }
  absl::StrAppend(&legend, "\n");
  return legend;
}

}  // namespace cli
}  // namespace tally
