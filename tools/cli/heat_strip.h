// HeatStrip: a keyspace's heat map (PeerStatus.heat, node/sync/repair_heat.h)
// drawn on a terminal — the token space as one line of kHeatStripWidth
// characters, first token at the left, each character shaded by the
// differences the sessions found in its part of the token space, from ' '
// (none) through kHeatShades to '@' (the most on the scale).
//
//   std::vector<uint64_t> last = HeatColumns(heat.segments(), heat.last());
//   const uint64_t max = *std::max_element(last.begin(), last.end());
//   std::cout << "|" << HeatStrip(last, max) << "|\n" << HeatLegend(max);
//
//   |        -*@@-                                                   |
//   shades (differences in a column): ' ' 0  '-' 1  '*' 2  '@' 3
//
// Several strips share one scale when drawn with the same `max` (the
// largest column of all of them), so that they can be compared.
//
// Thread-safe: pure functions.
#ifndef TALLY_TOOLS_CLI_HEAT_STRIP_H_
#define TALLY_TOOLS_CLI_HEAT_STRIP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tally/v1/tally.pb.h"

namespace tally {
namespace cli {

// Columns of a strip: 64, a fine enough cut to tell a hot range from a cold
// one, narrow enough for a terminal beside the peer and keyspace.
inline constexpr int kHeatStripWidth = 64;
// Lightest to darkest; ' ' is zero, the others split (0, max] evenly.
inline constexpr absl::string_view kHeatShades = " .:-=+*#%@";
// The most segments a heat may have (a node sends 64).
inline constexpr uint32_t kMaxHeatSegments = 1024;

// The differences in each of kHeatStripWidth equal columns of the token
// space, from a heat cut into `segments` (HeatSegment.segment indexes
// them): with more segments than columns a column adds up its segments;
// with fewer, each column shows the segment it lies in. Returns
// kInvalidArgument when `segments` is 0 or above kMaxHeatSegments, or a
// segment index is not below `segments`.
absl::StatusOr<std::vector<uint64_t>> HeatColumns(
    uint32_t segments,
    const google::protobuf::RepeatedPtrField<::tally::v1::HeatSegment>& counts);

// The shade of `count` on a scale whose darkest is `max`: ' ' for 0, else
// kHeatShades[ceil(9 * count / max)] — any count above zero shows.
// REQUIRES: count <= max.
char HeatShade(uint64_t count, uint64_t max);

// One character per column, HeatShade(column, max).
// REQUIRES: every column <= max.
std::string HeatStrip(const std::vector<uint64_t>& columns, uint64_t max);

// What each shade stands for on the scale up to `max`, one line ending in
// a newline: "shades (differences in a column): ' ' 0  '.' 1-2 ... '@' 17-18".
// Shades that no count maps to (a max below 9) are left out.
std::string HeatLegend(uint64_t max);

}  // namespace cli
}  // namespace tally

#endif  // TALLY_TOOLS_CLI_HEAT_STRIP_H_
