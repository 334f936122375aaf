// Logging for tallyd and tally: one line per event on stderr, with a UTC
// timestamp, a level, a message and named fields. Our Abseil has no
// absl/log; this is the project's one logging header.
//
//   LogInfo("session ended", {{"peer", address}, {"outcome", status},
//                             {"rows_received", rows}});
//
// Two formats (--log-format):
//
//   text  2026-12-03T05:14:10.123Z INFO session ended peer=10.0.0.2:7400
//             outcome="UNAVAILABLE: failed to connect" rows_received=0
//         logfmt-style: a value is quoted when it is empty or holds a
//         space, `=`, `"` or a control character; inside quotes `\` and `"`
//         are escaped and control characters written as \n, \t or \xNN.
//         So every line splits into fields without guessing.
//   json  {"time":"2026-...Z","level":"info","msg":"session ended",
//          "peer":"10.0.0.2:7400","outcome":"UNAVAILABLE: ...",
//          "rows_received":0}
//         one object per line; numbers are JSON numbers; bytes that are not
//         UTF-8 are replaced, so every line parses.
//
// Lines below the level (--log-level: debug, info, warning, error) are
// dropped. The level and format are the process's logging settings — the
// one piece of process-wide state, like stderr itself: tallyd sets them at
// start and again at SIGHUP.
//
// Thread-safe: lines from concurrent threads never interleave.
#ifndef TALLY_NODE_OBSERVE_LOG_H_
#define TALLY_NODE_OBSERVE_LOG_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tally {
namespace node {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };
enum class LogFormat { kText, kJson };

// "debug", "info", "warning" (or "warn"), "error"; kInvalidArgument
// otherwise, listing them.
absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view text);
// "text" or "json".
absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view text);
absl::string_view LogLevelName(LogLevel level);     // "info", ...
absl::string_view LogFormatName(LogFormat format);  // "text", "json"

// A named value on a log line. Strings, statuses and durations are text;
// integers, floating point and bools are numbers (and JSON numbers).
class LogField {
 public:
  LogField(absl::string_view name, absl::string_view value)
      : name_(name), value_(value) {}
  LogField(absl::string_view name, const char* value)
      : LogField(name, absl::string_view(value)) {}
  LogField(absl::string_view name, const std::string& value)
      : LogField(name, absl::string_view(value)) {}
  // "OK" or the status as ToString() prints it ("UNAVAILABLE: ...").
  LogField(absl::string_view name, const absl::Status& status);
  // As absl::FormatDuration: "1.5s", "250ms", "2h3m".
  LogField(absl::string_view name, absl::Duration duration);
  LogField(absl::string_view name, bool value)
      : name_(name), value_(value ? "true" : "false"), raw_(true) {}
  LogField(absl::string_view name, double value);
  template <typename Int,
            typename std::enable_if<std::is_integral<Int>::value &&
                                        !std::is_same<Int, bool>::value,
                                    int>::type = 0>
  LogField(absl::string_view name, Int value)
      : name_(name), value_(std::to_string(value)), raw_(true) {}

  const std::string& name() const { return name_; }
  const std::string& value() const { return value_; }
  // True for numbers and bools: written bare in JSON.
  bool raw() const { return raw_; }

 private:
  std::string name_;
  std::string value_;
  bool raw_ = false;
};

using LogFields = std::initializer_list<LogField>;

void LogDebug(absl::string_view message, LogFields fields = {});
void LogInfo(absl::string_view message, LogFields fields = {});
void LogWarning(absl::string_view message, LogFields fields = {});
void LogError(absl::string_view message, LogFields fields = {});
// At `level`, for callers that choose it (gRPC's lines).
void Log(LogLevel level, absl::string_view message, LogFields fields = {});

// The process's logging settings (default: info, text).
void SetLogLevel(LogLevel level);
void SetLogFormat(LogFormat format);
LogLevel CurrentLogLevel();
LogFormat CurrentLogFormat();
// Whether a line at `level` would be written.
bool LogEnabled(LogLevel level);

// One line as it would be written, without its newline. Pure: for tests.
std::string FormatLogLine(absl::Time time, LogLevel level, LogFormat format,
                          absl::string_view message, LogFields fields);

// Text as the text format writes a message: newlines, tabs and other
// control bytes, and bytes that are not valid UTF-8, C-escaped ("\x1b"),
// so that nothing read from a file or a client reaches a terminal as a
// control sequence.
std::string EscapeForLog(absl::string_view text);

// A value as the text format writes it: bare when it needs no quotes.
std::string QuoteLogValue(absl::string_view value);

// Under systemd, stderr is the journal's stream: each line then starts with
// its syslog priority ("<3>" error, "<4>" warning, "<6>" info, "<7>" debug),
// which journald takes off and keeps as the line's priority, so that
// `journalctl -p warning` finds the warnings and errors.
absl::string_view JournalPriorityPrefix(LogLevel level);
// Whether a stream with device `dev` and inode `ino` is the one
// $JOURNAL_STREAM ("DEV:INO", what systemd sets for a service whose output
// goes to the journal) names; false when it is unset or malformed.
bool IsJournalStream(const char* journal_stream, uint64_t dev, uint64_t ino);

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_OBSERVE_LOG_H_
