// Reading rows for `tally load --file`: JSON Lines, one object per line.
//
//   {"key": "user:1", "value": "{\"name\": \"Ada\"}"}
//   {"key_base64": "AAE=", "value": "binary key, text value"}
//
// "key" and "value" are JSON strings (UTF-8); "key_base64" and
// "value_base64" carry arbitrary bytes instead — what `tally get --json`
// prints for a key that is not UTF-8. Blank lines are skipped; any other
// field is an error, so that a typo ("valeu") is reported rather than
// loading an empty value.
//
//   std::ifstream in(path);
//   JsonlReader reader(&in);
//   KeyValue row;
//   for (;;) {
//     absl::StatusOr<bool> more = reader.Next(&row);
//     if (!more.ok()) ...  // "line 7: ..."
//     if (!*more) break;
//   }
//
// Thread-compatible.
#ifndef TALLY_TOOLS_CLI_JSONL_H_
#define TALLY_TOOLS_CLI_JSONL_H_

#include <cstdint>
#include <istream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tally {
namespace cli {

struct KeyValue {
  std::string key;
  std::string value;
};

// Parses one non-blank line. Returns kInvalidArgument saying what is wrong
// with it (without a line number).
absl::StatusOr<KeyValue> ParseJsonlRow(absl::string_view line);

class JsonlReader {
 public:
  // `in` must outlive the reader.
  explicit JsonlReader(std::istream* in) : in_(in) {}
  JsonlReader(const JsonlReader&) = delete;
  JsonlReader& operator=(const JsonlReader&) = delete;

  // Reads the next row into `row`. Returns false at the end of the input,
  // kInvalidArgument "line N: ..." for a malformed line (reading stops
  // there), kUnavailable when the stream fails.
  absl::StatusOr<bool> Next(KeyValue* row);

  // The number of the line last read, 1-based.
  uint64_t line_number() const { return line_number_; }

  // Bytes of the input read so far, newlines included: with the input's
  // size, how far a load is (`tally load` shows it).
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  std::istream* const in_;
  uint64_t line_number_ = 0;
  uint64_t bytes_read_ = 0;
  std::string line_;
};

}  // namespace cli
}  // namespace tally

#endif  // TALLY_TOOLS_CLI_JSONL_H_
