// RepairReport: the file `tally repair --report FILE` writes, for review and
// for `tally recheck FILE`. JSON Lines:
//
//   {"report":"tally repair","a":"10.0.0.1:7400","b":"10.0.0.2:7400",
//    "keyspace":"users","mode":"two-way","dry_run":false,"started":"...",
//    "command":["tally","repair",...]}
//   {"key":"user:1","a":{...version...},"b":null,"action":"copy_to_b"}
//   ...one line per differing key...
//   {"summary":{...as repair --json prints it...}}
//
// Keys are as --json prints them everywhere: "key", or "key_base64" beside
// a C-escaped "key" when they are not UTF-8. A report cut short (a failed
// or interrupted repair) has no summary line; recheck reads it all the same.
//
// Thread-compatible.
#ifndef TALLY_TOOLS_CLI_COMMANDS_REPAIR_REPORT_H_
#define TALLY_TOOLS_CLI_COMMANDS_REPAIR_REPORT_H_

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/cli/format.h"

namespace tally {
namespace cli {

class RepairReportWriter {
 public:
  // Creates (or replaces) `path` and writes `header` as its first line.
  static absl::StatusOr<std::unique_ptr<RepairReportWriter>> Create(
      const std::string& path, const Json& header);

  // One line; the file is flushed at every line, so that what a repair did
  // before it failed is on disk.
  absl::Status Write(const Json& line);

 private:
  RepairReportWriter(std::string path) : path_(std::move(path)) {}

  const std::string path_;
  std::ofstream out_;
};

// What recheck needs of a report: its nodes, keyspace and keys.
struct RepairReportKeys {
  std::string a;
  std::string b;
  std::string keyspace;
  std::vector<std::string> keys;  // in the report's order, each once
};

// Reads a report; kInvalidArgument naming the line for a line that is not
// JSON or a first line that is not a report's, kNotFound when the file
// cannot be opened.
absl::StatusOr<RepairReportKeys> ReadRepairReport(const std::string& path);

}  // namespace cli
}  // namespace tally

#endif  // TALLY_TOOLS_CLI_COMMANDS_REPAIR_REPORT_H_
