#include "node/observe/log.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"

namespace tally {
namespace node {
namespace {

// The process's logging settings (log.h says why they are process-wide).
// Relaxed: a line racing a SIGHUP may use either setting.
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::atomic<int> g_format{static_cast<int>(LogFormat::kText)};

absl::string_view TextLevel(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kWarning:
      return "WARN";
    case LogLevel::kError:
      return "ERROR";
  }
  return "INFO";
}

// `text` with control characters escaped (\n, \r, \t, \xNN); with
// `quoted`, `\` and `"` too.
// The length of the valid UTF-8 sequence at the start of `text` (which
// starts with a byte >= 0x80), or 0 when it is not one.
size_t Utf8SequenceLength(absl::string_view text) {
  const unsigned char lead = static_cast<unsigned char>(text[0]);
  size_t length;
  unsigned char low = 0x80, high = 0xbf;  // the second byte's range
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    if (lead == 0xe0) low = 0xa0;   // no overlong forms
    if (lead == 0xed) high = 0x9f;  // no surrogates
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    if (lead == 0xf0) low = 0x90;
    if (lead == 0xf4) high = 0x8f;  // nothing above U+10FFFF
  } else {
    return 0;
  }
  if (text.size() < length) return 0;
  for (size_t i = 1; i < length; ++i) {
    const unsigned char u = static_cast<unsigned char>(text[i]);
    if (u < (i == 1 ? low : 0x80) || u > (i == 1 ? high : 0xbf)) return 0;
  }
  return length;
}

void AppendEscaped(absl::string_view text, bool quoted, std::string* out) {
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const unsigned char u = static_cast<unsigned char>(c);
    if (u >= 0x80) {
      // Valid UTF-8 as it is; any other byte escaped, so that no byte
      // from a file or a client reaches a terminal as a control.
      const size_t length = Utf8SequenceLength(text.substr(i));
      if (length == 0) {
        absl::StrAppendFormat(out, "\\x%02x", u);
      } else {
        out->append(text.data() + i, length);
        i += length - 1;
      }
    } else if (c == '\n') {
      out->append("\\n");
    } else if (c == '\r') {
      out->append("\\r");
    } else if (c == '\t') {
      out->append("\\t");
    } else if (u < 0x20 || u == 0x7f) {
      absl::StrAppendFormat(out, "\\x%02x", u);
    } else if (quoted && (c == '\\' || c == '"')) {
      out->push_back('\\');
      out->push_back(c);
    } else {
      out->push_back(c);
    }
  }
}

bool NeedsQuotes(absl::string_view value) {
  if (value.empty()) return true;
  for (size_t i = 0; i < value.size(); ++i) {
    const char c = value[i];
    const unsigned char u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f || c == '"' || c == '=') return true;
    if (u >= 0x80) {
      const size_t length = Utf8SequenceLength(value.substr(i));
      if (length == 0) return true;  // escaped, inside quotes
      i += length - 1;
    }
  }
  return false;
}

// Whether this process's stderr is the journal's stream, read once: the
// stream does not change while the process runs.
bool StderrIsJournal() {
  static const bool journal = [] {
    struct stat st;
    if (fstat(STDERR_FILENO, &st) != 0) return false;
    return IsJournalStream(std::getenv("JOURNAL_STREAM"),
                           static_cast<uint64_t>(st.st_dev),
                           static_cast<uint64_t>(st.st_ino));
  }();
  return journal;
}

void Write(LogLevel level, absl::string_view message, LogFields fields) {
  if (!LogEnabled(level)) return;
  std::string line;
  if (StderrIsJournal()) line = std::string(JournalPriorityPrefix(level));
  line +=
      FormatLogLine(absl::Now(), level, CurrentLogFormat(), message, fields);
  line.push_back('\n');
  // One fwrite per line: stdio locks the stream, so lines stay whole.
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace

absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "debug") return LogLevel::kDebug;
  if (lower == "info") return LogLevel::kInfo;
  if (lower == "warning" || lower == "warn") return LogLevel::kWarning;
  if (lower == "error") return LogLevel::kError;
  return absl::InvalidArgumentError(absl::StrCat(
      "log level '", text, "' is not one of debug, info, warning, error"));
}

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "text") return LogFormat::kText;
  if (lower == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("log format '", text, "' is not one of text, json"));
}

absl::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}

absl::string_view LogFormatName(LogFormat format) {
  return format == LogFormat::kJson ? "json" : "text";
}

LogField::LogField(absl::string_view name, const absl::Status& status)
    : name_(name), value_(status.ToString()) {}

LogField::LogField(absl::string_view name, absl::Duration duration)
    : name_(name), value_(absl::FormatDuration(duration)) {}

LogField::LogField(absl::string_view name, double value)
    : name_(name), value_(absl::StrFormat("%.6g", value)), raw_(true) {
  // NaN and infinities are not JSON numbers.
  if (value != value || value - value != 0) raw_ = false;
}

std::string EscapeForLog(absl::string_view text) {
  std::string out;
  AppendEscaped(text, /*quoted=*/false, &out);
  return out;
}

std::string QuoteLogValue(absl::string_view value) {
  std::string out;
  if (!NeedsQuotes(value)) {
    out.assign(value.data(), value.size());
    return out;
  }
  out.push_back('"');
  AppendEscaped(value, /*quoted=*/true, &out);
  out.push_back('"');
  return out;
}

std::string FormatLogLine(absl::Time time, LogLevel level, LogFormat format,
                          absl::string_view message, LogFields fields) {
  const std::string timestamp =
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", time, absl::UTCTimeZone());
  if (format == LogFormat::kJson) {
    nlohmann::ordered_json line;
    line["time"] = timestamp;
    line["level"] = std::string(LogLevelName(level));
    line["msg"] = std::string(message);
    for (const LogField& field : fields) {
      if (field.raw()) {
        line[field.name()] = nlohmann::ordered_json::parse(field.value());
      } else {
        line[field.name()] = field.value();
      }
    }
    return line.dump(-1, ' ', false,
                     nlohmann::ordered_json::error_handler_t::replace);
  }
  std::string line = absl::StrCat(timestamp, " ", TextLevel(level), " ");
  AppendEscaped(message, /*quoted=*/false, &line);
  for (const LogField& field : fields) {
    absl::StrAppend(&line, " ", field.name(), "=",
                    QuoteLogValue(field.value()));
  }
  return line;
}

void SetLogLevel(LogLevel level) {
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

void SetLogFormat(LogFormat format) {
  g_format.store(static_cast<int>(format), std::memory_order_relaxed);
}

LogLevel CurrentLogLevel() {
  return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed));
}

LogFormat CurrentLogFormat() {
  return static_cast<LogFormat>(g_format.load(std::memory_order_relaxed));
}

bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) >= g_level.load(std::memory_order_relaxed);
}

void LogDebug(absl::string_view message, LogFields fields) {
  Write(LogLevel::kDebug, message, fields);
}
void LogInfo(absl::string_view message, LogFields fields) {
  Write(LogLevel::kInfo, message, fields);
}
void LogWarning(absl::string_view message, LogFields fields) {
  Write(LogLevel::kWarning, message, fields);
}
void LogError(absl::string_view message, LogFields fields) {
  Write(LogLevel::kError, message, fields);
}
void Log(LogLevel level, absl::string_view message, LogFields fields) {
  Write(level, message, fields);
}

absl::string_view JournalPriorityPrefix(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "<7>";
    case LogLevel::kInfo:
      return "<6>";
    case LogLevel::kWarning:
      return "<4>";
    case LogLevel::kError:
      return "<3>";
  }
  return "<6>";
}

bool IsJournalStream(const char* journal_stream, uint64_t dev, uint64_t ino) {
  if (journal_stream == nullptr) return false;
  const std::vector<absl::string_view> parts =
      absl::StrSplit(journal_stream, ':');
  uint64_t want_dev = 0;
  uint64_t want_ino = 0;
  return parts.size() == 2 && absl::SimpleAtoi(parts[0], &want_dev) &&
         absl::SimpleAtoi(parts[1], &want_ino) && want_dev == dev &&
         want_ino == ino;
}

}  // namespace node
}  // namespace tally
