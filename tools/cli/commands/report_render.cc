#include "tools/cli/commands/report_render.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "tools/cli/format.h"

namespace tally {
namespace cli {
namespace {

// The report's lines: its header, its key lines, its summary (null when it
// was cut short).
struct ReportLines {
  Json header;
  std::vector<Json> keys;
  Json summary;
};

absl::StatusOr<ReportLines> ReadLines(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrFormat("cannot open %s: %s", path, std::strerror(errno)));
  }
  ReportLines report;
  std::string text;
  for (int number = 1; std::getline(in, text); ++number) {
    if (text.empty()) continue;
    Json line = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    auto bad = [&](absl::string_view what) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s line %d: %s", path, number, what));
    };
    if (!line.is_object()) return bad("not a JSON object");
    if (report.header.is_null()) {
      if (line.value("report", "") != "tally repair") {
        return bad(
            "not a repair report (tally repair --report writes one; its "
            "first line names the nodes and the keyspace)");
      }
      report.header = std::move(line);
    } else if (line.contains("summary")) {
      report.summary = std::move(line["summary"]);
    } else if (line.contains("key") && line["key"].is_string()) {
      report.keys.push_back(std::move(line));
    } else {
      return bad("a key line without \"key\"");
    }
  }
  if (report.header.is_null()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s is empty: not a repair report", path));
  }
  return report;
}

// A string member as text ("" when absent or not a string); numbers and
// booleans as JSON writes them.
std::string Text(const Json& object, const char* name) {
  if (!object.is_object() || !object.contains(name)) return "";
  const Json& value = object[name];
  if (value.is_string()) return value.get<std::string>();
  if (value.is_null()) return "";
  return value.dump();
}

// One side's cells: present, deleted, time, hlc, origin.
std::vector<std::string> SideCells(const Json& side) {
  if (!side.is_object()) return {"no", "", "", "", ""};
  return {"yes", side.value("deleted", false) ? "yes" : "no",
          Text(side, "time"), Text(side, "hlc"), Text(side, "origin")};
}

// A value the report holds (repair --values): its text, "(reason)" when
// there was none, "" when the report has no such value.
std::string ValueCell(const Json& line, const char* name) {
  if (!line.contains(name) || !line[name].is_object()) return "";
  const Json& value = line[name];
  if (value.contains("value") && value["value"].is_string()) {
    return value["value"].get<std::string>();
  }
  return absl::StrCat("(", Text(value, "none"), ")");
}

constexpr const char* kValueColumns[] = {"a_before", "b_before", "a_after",
                                         "b_after"};

std::string CsvField(const std::string& text) {
  return absl::StrCat("\"", absl::StrReplaceAll(text, {{"\"", "\"\""}}), "\"");
}

std::string RenderCsv(const ReportLines& report) {
  std::string out =
      "key,action,a_present,a_deleted,a_time,a_hlc,a_origin,b_present,"
      "b_deleted,b_time,b_hlc,b_origin,a_before,b_before,a_after,b_after\r\n";
  for (const Json& line : report.keys) {
    std::vector<std::string> cells = {Text(line, "key"), Text(line, "action")};
    for (const char* side : {"a", "b"}) {
      for (std::string& cell :
           SideCells(line.contains(side) ? line[side] : Json())) {
        cells.push_back(std::move(cell));
      }
    }
    for (const char* name : kValueColumns) {
      cells.push_back(ValueCell(line, name));
    }
    for (size_t i = 0; i < cells.size(); ++i) {
      absl::StrAppend(&out, i == 0 ? "" : ",", CsvField(cells[i]));
    }
    out += "\r\n";
  }
  return out;
}

std::string Html(const std::string& text) {
  return absl::StrReplaceAll(text, {{"&", "&amp;"},
                                    {"<", "&lt;"},
                                    {">", "&gt;"},
                                    {"\"", "&quot;"},
                                    {"'", "&#39;"}});
}

std::string SideHtml(const Json& side) {
  if (!side.is_object()) return "<td class=\"dim\">missing</td>";
  return absl::StrCat("<td>",
                      side.value("deleted", false) ? "<b>deleted</b> " : "",
                      Html(Text(side, "time")), "<br><span class=\"dim\">",
                      Html(Text(side, "origin")), " &middot; hlc ",
                      Html(Text(side, "hlc")), "</span></td>");
}

std::string RenderHtml(const ReportLines& report) {
  const Json& h = report.header;
  const std::string title =
      absl::StrCat("tally repair report: ", Text(h, "keyspace"), " on ",
                   Text(h, "a"), " and ", Text(h, "b"));
  std::string out = absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta "
      "charset=\"utf-8\"><title>",
      Html(title),
      "</title><style>body{font:14px/1.4 "
      "system-ui,sans-serif;margin:1.5em;color:#1f2933}"
      "table{border-collapse:collapse}th,td{text-align:left;padding:.25em "
      ".7em;border-bottom:1px solid #e4e7eb;vertical-align:top}"
      "th{background:#f5f7fa}.dim{color:#7b8794}.warn{color:#c81e1e}"
      "code{word-break:break-all}</style></head><body>\n<h1>",
      Html(title), "</h1>\n<p>keyspace <b>", Html(Text(h, "keyspace")),
      "</b> &middot; A <b>", Html(Text(h, "a")), "</b> &middot; B <b>",
      Html(Text(h, "b")), "</b> &middot; mode ", Html(Text(h, "mode")),
      h.value("dry_run", false) ? " &middot; <b>dry run</b> (nothing changed)"
                                : "",
      " &middot; started ", Html(Text(h, "started")), "</p>\n");
  if (report.summary.is_object()) {
    absl::StrAppend(&out, "<p>summary:");
    for (const auto& [name, value] : report.summary.items()) {
      absl::StrAppend(&out, " ", Html(name), " <b>", Html(value.dump()),
                      "</b>");
    }
    absl::StrAppend(&out, "</p>\n");
  } else {
    absl::StrAppend(&out,
                    "<p class=\"warn\">No summary: the repair did not finish "
                    "(it failed or was interrupted); the keys below are what "
                    "it had done.</p>\n");
  }
  bool values = false;
  for (const Json& line : report.keys) {
    values = values || line.contains("a_before");
  }
  absl::StrAppend(&out, "<table id=\"keys\"><tr><th>Key</th><th>Action</th>",
                  "<th>A</th><th>B</th>",
                  values ? "<th>A before</th><th>B before</th><th>A "
                           "after</th><th>B after</th>"
                         : "",
                  "</tr>\n");
  for (const Json& line : report.keys) {
    absl::StrAppend(&out, "<tr><td><code>", Html(Text(line, "key")),
                    "</code></td><td>", Html(Text(line, "action")), "</td>",
                    SideHtml(line.contains("a") ? line["a"] : Json()),
                    SideHtml(line.contains("b") ? line["b"] : Json()));
    if (values) {
      for (const char* name : kValueColumns) {
        absl::StrAppend(&out, "<td><code>", Html(ValueCell(line, name)),
                        "</code></td>");
      }
    }
    absl::StrAppend(&out, "</tr>\n");
  }
  absl::StrAppend(&out, "</table>\n<p class=\"dim\">", report.keys.size(),
                  " key", report.keys.size() == 1 ? "" : "s",
                  "</p>\n</body></html>\n");
  return out;
}

}  // namespace

absl::StatusOr<ReportFormat> ParseReportFormat(absl::string_view name) {
  if (name == "csv") return ReportFormat::kCsv;
  if (name == "html") return ReportFormat::kHtml;
  return absl::InvalidArgumentError(absl::StrCat(
      "--format is csv or html, not '", absl::CHexEscape(name), "'"));
}

absl::StatusOr<std::string> RenderRepairReport(const std::string& path,
                                               ReportFormat format) {
  absl::StatusOr<ReportLines> report = ReadLines(path);
  if (!report.ok()) return report.status();
  return format == ReportFormat::kCsv ? RenderCsv(*report)
                                      : RenderHtml(*report);
}

}  // namespace cli
}  // namespace tally
