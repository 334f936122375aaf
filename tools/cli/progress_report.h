// How the CLI shows long work's progress (load, repair, sync): one line for
// a terminal and one JSON object for a script, from a meter's estimate
// (tree/progress_meter.h). Both say "unknown" for what is not known — a
// total, and so a percentage and a time left — rather than guess.
//
//   terminal:  12.3 MB of 48.0 MB (25%), 3.1 MB/s, ETA 12s
//              12000 rows, 3000 rows/s, ETA unknown
//   --json:    {"done": 12345678, "total": 48000000, "unit": "bytes",
//               "fraction": 0.257, "rate": 3100000.0, "eta_seconds": 12.0,
//               "elapsed_seconds": 4.1}
//              ("total", "fraction" and "eta_seconds" null when unknown)
//
// A command prints the JSON under "progress" at most once a second
// (kJsonProgressInterval), as `tally sync --json` does, and its summary
// last.
//
// Thread-safe: pure functions.
#ifndef TALLY_TOOLS_CLI_PROGRESS_REPORT_H_
#define TALLY_TOOLS_CLI_PROGRESS_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "tally/v1/tally.pb.h"
#include "tools/cli/format.h"
#include "tree/progress_meter.h"

namespace tally {
namespace cli {

// How often --json prints a progress line.
inline constexpr absl::Duration kJsonProgressInterval = absl::Seconds(1);

// The units progress counts: bytes are shown as "12.3 MB", anything else
// as "12000 <unit>".
inline constexpr absl::string_view kBytes = "bytes";

// "12.3 MB of 48.0 MB (25%), 3.1 MB/s, ETA 12s"; without a total
// "12000 rows, 3000 rows/s, ETA unknown".
std::string ProgressText(const tree::ProgressEstimate& estimate,
                         absl::string_view unit);

// "ETA 12s", "ETA unknown", as ProgressText ends.
std::string EtaText(const std::optional<absl::Duration>& remaining);

// An estimate a node made and sent (its rate and time left, as numbers in
// a proto), for ProgressText and ProgressJson; the fraction is done/total.
tree::ProgressEstimate EstimateFromNode(uint64_t done,
                                        std::optional<uint64_t> total,
                                        double rate,
                                        std::optional<double> eta_seconds,
                                        absl::Duration elapsed);

// The rows a session moved (received + sent) against the rows it expects
// to move, as its node measured them, with the elapsed time as of `now`.
tree::ProgressEstimate SessionEstimate(const v1::SessionProgress& session,
                                       absl::Time now);

// The object at the top of this file.
Json ProgressJson(const tree::ProgressEstimate& estimate,
                  absl::string_view unit);

}  // namespace cli
}  // namespace tally

#endif  // TALLY_TOOLS_CLI_PROGRESS_REPORT_H_
