// RenderRepairReport: a repair report (tools/cli/commands/repair_report.h,
// JSON Lines) as a document for people who review it outside a terminal:
// CSV for a spreadsheet, one row per key; or one self-contained HTML page
// with the nodes, keyspace and mode, the summary, and a table of the keys
// and what was done with each (`tally report FILE --format=html`).
//
//   absl::StatusOr<std::string> html =
//       RenderRepairReport(path, ReportFormat::kHtml);
//
// CSV columns: key, action, then for A and for B whether the row is there
// (present: yes/no), deleted (yes/no), its version's wall time (UTC,
// milliseconds), HLC and origin; then the values of a report written with
// `repair --values` (a_before, b_before, a_after, b_after: the value, or
// "(reason)" when there was none; empty without them). Fields are quoted as RFC
// 4180 says (every field, doubled quotes inside); keys that are not UTF-8 are
// written C-escaped, as the report's "key" holds them.
//
// Thread-safe: a pure function of the file.
#ifndef TALLY_TOOLS_CLI_COMMANDS_REPORT_RENDER_H_
#define TALLY_TOOLS_CLI_COMMANDS_REPORT_RENDER_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tally {
namespace cli {

enum class ReportFormat { kCsv, kHtml };

// "csv" or "html"; kInvalidArgument otherwise.
absl::StatusOr<ReportFormat> ParseReportFormat(absl::string_view name);

// The report at `path` rendered; the errors of reading it as
// ReadRepairReport's (kNotFound, kInvalidArgument naming the line).
absl::StatusOr<std::string> RenderRepairReport(const std::string& path,
                                               ReportFormat format);

}  // namespace cli
}  // namespace tally

#endif  // TALLY_TOOLS_CLI_COMMANDS_REPORT_RENDER_H_
