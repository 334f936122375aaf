#include "tools/cli/commands/repair_report.h"

#include <cerrno>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"

namespace tally {
namespace cli {

absl::StatusOr<std::unique_ptr<RepairReportWriter>> RepairReportWriter::Create(
    const std::string& path, const Json& header) {
  std::unique_ptr<RepairReportWriter> writer(new RepairReportWriter(path));
  writer->out_.open(path, std::ios::out | std::ios::trunc);
  if (!writer->out_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--report: cannot write %s: %s", path, std::strerror(errno)));
  }
  absl::Status written = writer->Write(header);
  if (!written.ok()) return written;
  return writer;
}

absl::Status RepairReportWriter::Write(const Json& line) {
  out_ << DumpJson(line) << "\n";
  out_.flush();
  if (!out_) {
    return absl::UnavailableError(absl::StrFormat(
        "--report: writing %s failed: %s", path_, std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<RepairReportKeys> ReadRepairReport(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrFormat("cannot open %s: %s", path, std::strerror(errno)));
  }
  RepairReportKeys report;
  std::set<std::string> seen;
  std::string text;
  for (int number = 1; std::getline(in, text); ++number) {
    if (text.empty()) continue;
    const Json line = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    auto bad = [&](absl::string_view what) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s line %d: %s", path, number, what));
    };
    if (!line.is_object()) return bad("not a JSON object");
    if (number == 1) {
      if (line.value("report", "") != "tally repair" || !line.contains("a") ||
          !line.contains("b") || !line.contains("keyspace") ||
          !line["a"].is_string() || !line["b"].is_string() ||
          !line["keyspace"].is_string()) {
        return bad(
            "not a repair report (tally repair --report writes one; its "
            "first line names the nodes and the keyspace)");
      }
      report.a = line["a"];
      report.b = line["b"];
      report.keyspace = line["keyspace"];
      continue;
    }
    if (line.contains("summary")) continue;
    std::string key;
    if (line.contains("key_base64") && line["key_base64"].is_string()) {
      if (!absl::Base64Unescape(line["key_base64"].get<std::string>(), &key)) {
        return bad("\"key_base64\" is not base64");
      }
    } else if (line.contains("key") && line["key"].is_string()) {
      key = line["key"];
    } else {
      return bad("a key line without \"key\"");
    }
    if (seen.insert(key).second) report.keys.push_back(std::move(key));
  }
  if (report.a.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s is empty: not a repair report", path));
  }
  return report;
}

}  // namespace cli
}  // namespace tally
