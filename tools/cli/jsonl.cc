#include "tools/cli/jsonl.h"

#include <exception>
#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace tally {
namespace cli {
namespace {

constexpr absl::string_view kShape =
    R"(each line must be {"key": "...", "value": "..."})";

// Reads one of `name` (a JSON string) or `name`_base64 into `out`.
absl::Status ReadBytesField(const nlohmann::json& obj, const std::string& name,
                            std::string* out) {
  const std::string base64_name = name + "_base64";
  const auto plain = obj.find(name);
  const auto base64 = obj.find(base64_name);
  if (plain != obj.end() && base64 != obj.end()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "both \"%s\" and \"%s\" are given; use one", name, base64_name));
  }
  if (plain == obj.end() && base64 == obj.end()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("no \"%s\" field; %s", name, kShape));
  }
  if (plain != obj.end()) {
    if (!plain->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("\"%s\" is a JSON %s; it must be a string", name,
                          plain->type_name()));
    }
    *out = plain->get<std::string>();
    return absl::OkStatus();
  }
  if (!base64->is_string() ||
      !absl::Base64Unescape(base64->get<std::string>(), out)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("\"%s\" is not a base64 string", base64_name));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<KeyValue> ParseJsonlRow(absl::string_view line) {
  nlohmann::json obj;
  // nlohmann reports where parsing failed only through an exception; it is
  // caught right here and never leaves this function.
  try {
    obj = nlohmann::json::parse(line.begin(), line.end());
  } catch (const std::exception& e) {
    absl::string_view what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 7: ..."
    // — the bracketed id and "line 1" mean nothing to the user.
    const size_t column = what.find("column ");
    if (column != absl::string_view::npos) what.remove_prefix(column);
    return absl::InvalidArgumentError(
        absl::StrCat("not valid JSON (", what, ")"));
  }
  if (!obj.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a JSON %s; %s", obj.type_name(), kShape));
  }
  for (const auto& item : obj.items()) {
    const std::string& name = item.key();
    if (name != "key" && name != "value" && name != "key_base64" &&
        name != "value_base64") {
      return absl::InvalidArgumentError(absl::StrFormat(
          "unexpected field \"%s\"; %s", absl::CHexEscape(name), kShape));
    }
  }
  KeyValue row;
  absl::Status s = ReadBytesField(obj, "key", &row.key);
  if (!s.ok()) return s;
  if (row.key.empty()) {
    return absl::InvalidArgumentError(
        "the key is empty; keys are 1 byte or more");
  }
  s = ReadBytesField(obj, "value", &row.value);
  if (!s.ok()) return s;
  return row;
}

absl::StatusOr<bool> JsonlReader::Next(KeyValue* row) {
  while (std::getline(*in_, line_)) {
    ++line_number_;
    // getline consumed the line and its newline, unless the input ended
    // first (a last line without one).
    bytes_read_ += line_.size() + (in_->eof() ? 0 : 1);
    absl::string_view text = line_;
    if (line_number_ == 1) absl::ConsumePrefix(&text, "\xEF\xBB\xBF");  // BOM
    text = absl::StripAsciiWhitespace(text);  // also a CRLF file's '\r'
    if (text.empty()) continue;
    absl::StatusOr<KeyValue> parsed = ParseJsonlRow(text);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_number_, ": ", parsed.status().message()));
    }
    *row = *std::move(parsed);
    return true;
  }
  if (in_->bad()) {
    return absl::UnavailableError(
        absl::StrCat("read error after line ", line_number_));
  }
  return false;
}

}  // namespace cli
}  // namespace tally
