#include "node/observe/metrics.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "node/observe/status_fields.h"

namespace tally {
namespace node {
namespace {

// HELP text escapes only backslash and newline.
std::string EscapeHelp(absl::string_view help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// Appends one family of the exposition: its # HELP and # TYPE lines with
// its first sample, so a family without samples leaves no trace.
void AppendFamily(const StatusField& field, const v1::StatusResponse& status,
                  std::string* out) {
  std::string header = absl::StrCat(
      "# HELP ", field.metric, " ", EscapeHelp(field.help), "\n# TYPE ",
      field.metric, " ", MetricTypeName(field.type), "\n");
  StatusFieldSamples(field, status,
                     [&](absl::string_view suffix, MetricLabels labels,
                         const StatusValue& value) {
                       *out += header;
                       header.clear();
                       absl::StrAppend(out, field.metric, suffix);
                       if (!labels.empty()) {
                         *out += '{';
                         bool first = true;
                         for (const auto& [label, label_value] : labels) {
                           if (!first) *out += ',';
                           first = false;
                           absl::StrAppend(
                               out, label, "=\"",
                               EscapePrometheusLabelValue(label_value), "\"");
                         }
                         *out += '}';
                       }
                       absl::StrAppend(out, " ", value.Format(), "\n");
                     });
}

}  // namespace

std::string EscapePrometheusLabelValue(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string RenderPrometheus(const v1::StatusResponse& status) {
  // Every family of node/observe/status_fields.h, in its order.
  std::string out;
  for (const StatusField& field : StatusFields()) {
    if (HasFamily(field)) AppendFamily(field, status, &out);
  }
  return out;
}

}  // namespace node
}  // namespace tally
