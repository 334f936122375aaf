#include "node/config/config_file.h"

#include <fcntl.h>
#include <ini.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tally {
namespace node {
namespace {

// The text before a comment: `#` starts one at the start of the text or
// after whitespace, so that `a#b` (a path, a name) stays whole. (libinih
// has already cut a `;` comment.)
absl::string_view StripComment(absl::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '#' && (i == 0 || absl::ascii_isspace(text[i - 1]))) {
      return absl::StripAsciiWhitespace(text.substr(0, i));
    }
  }
  return absl::StripAsciiWhitespace(text);
}

// A setting's value from libinih's (trimmed, up to a ` ;` comment): bare,
// up to a `#` comment, or in double or single quotes, which are removed
// and inside which everything, `#` included, is literal. `cut` is what
// libinih took off the end of the line as a `;` comment: a closing quote in
// it means the ` ;` was inside the quotes.
absl::StatusOr<std::string> SettingValue(absl::string_view value,
                                         absl::string_view cut) {
  if (value.empty() || (value[0] != '"' && value[0] != '\'')) {
    return std::string(StripComment(value));
  }
  const char quote = value[0];
  const size_t close = value.find(quote, 1);
  if (close == absl::string_view::npos) {
    if (absl::StrContains(cut, quote)) {
      return absl::InvalidArgumentError(
          "the quoted value holds a ';' after a space or tab, where libinih "
          "ends the value even inside quotes (it starts a comment): write "
          "the ';' without the space before it, or give this setting as a "
          "flag");
    }
    return absl::InvalidArgumentError(absl::StrFormat(
        "the value opens a %c quote but has no closing one", quote));
  }
  const absl::string_view after = StripComment(value.substr(close + 1));
  if (!after.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "'%s' after the closing quote; only a comment may follow it", after));
  }
  return std::string(value.substr(1, close - 1));
}

// What libinih cut off the end of `line` after `value`: a `;` comment, or
// nothing. The value follows the first `=` or `:` of the line, as libinih
// splits it.
absl::string_view CutAfterValue(absl::string_view line,
                                absl::string_view value) {
  const size_t delimiter = line.find_first_of("=:");
  if (delimiter == absl::string_view::npos) return "";
  absl::string_view rest =
      absl::StripLeadingAsciiWhitespace(line.substr(delimiter + 1));
  if (!absl::ConsumePrefix(&rest, value)) return "";
  rest = absl::StripLeadingAsciiWhitespace(rest);
  return absl::StartsWith(rest, ";") ? rest : "";
}

// One reading of a config text: libinih calls ReadLine for each line and
// OnSetting for each `name = value` it finds in it.
class ConfigReader {
 public:
  ConfigReader(absl::string_view text, absl::string_view source,
               NodeConfig* config)
      : source_(source), config_(config) {
    lines_ = absl::StrSplit(text, '\n');
    // The newline that ends the last line does not start another.
    if (!lines_.empty() && lines_.back().empty()) lines_.pop_back();
  }

  absl::Status Read() {
    const int first_error = ini_parse_stream(&ConfigReader::ReadLine, this,
                                             &ConfigReader::OnSetting, this);
    // libinih's own refusal (a line with no `=` or `:`) comes first if its
    // line does.
    if (first_error > 0 && (error_.ok() || first_error < error_line_)) {
      const absl::string_view line =
          absl::StripAsciiWhitespace(lines_[first_error - 1]);
      return Error(first_error,
                   absl::StrFormat("expected 'name = value', got '%s'",
                                   StripComment(line)));
    }
    if (first_error < 0 && error_.ok()) {
      return absl::InternalError(absl::StrFormat(
          "%s: libinih failed (%d) reading the config", source_, first_error));
    }
    return error_;
  }

 private:
  // ini_reader: the next line into `buffer` (of `size` bytes, libinih's
  // INI_MAX_LINE), or nullptr at the end or after an error. The lines
  // libinih would misread are refused here, before it sees them.
  static char* ReadLine(char* buffer, int size, void* stream) {
    auto* self = static_cast<ConfigReader*>(stream);
    if (!self->error_.ok() || self->lines_read_ == self->lines_.size()) {
      return nullptr;
    }
    const absl::string_view line = self->lines_[self->lines_read_];
    const int number = static_cast<int>(++self->lines_read_);
    // A longer line would reach libinih in two pieces, the second read as
    // a line of its own.
    if (static_cast<int>(line.size()) + 2 > size) {
      self->Fail(number,
                 absl::StrFormat("the line is longer than %d characters, the "
                                 "most libinih reads in a line",
                                 size - 2));
      return nullptr;
    }
    if (line.find('\0') != absl::string_view::npos) {
      self->Fail(number, "the line holds a NUL byte");
      return nullptr;
    }
    const absl::string_view stripped = absl::StripAsciiWhitespace(line);
    if (absl::StartsWith(stripped, "[")) {
      self->Fail(number,
                 absl::StrFormat("'%s' is a section header, and tally's "
                                 "config file has no sections: give every "
                                 "setting at the top level, without it",
                                 StripComment(stripped)));
      return nullptr;
    }
    std::memcpy(buffer, line.data(), line.size());
    buffer[line.size()] = '\n';
    buffer[line.size() + 1] = '\0';
    return buffer;
  }

  // ini_handler: returns 0 (libinih records the line) on an error.
  static int OnSetting(void* user, const char* section, const char* name,
                       const char* value) {
    auto* self = static_cast<ConfigReader*>(user);
    if (!self->error_.ok()) return 1;
    // The reader refuses section headers, so this is the one section.
    (void)section;
    const int number = static_cast<int>(self->lines_read_);
    absl::Status s = self->Apply(self->lines_[number - 1], name,
                                 value == nullptr ? "" : value);
    if (s.ok()) return 1;
    self->Fail(number, std::string(s.message()));
    return 0;
  }

  absl::Status Apply(absl::string_view line, absl::string_view name_as_given,
                     absl::string_view inih_value) {
    // libinih reads an indented line as more of the value above.
    if (!line.empty() && absl::ascii_isspace(line[0])) {
      return absl::InvalidArgumentError(
          "the setting is indented: start it at the beginning of the line "
          "(libinih reads an indented line as the continuation of the value "
          "above)");
    }
    // `listen 127.0.0.1:7400` splits at its `:`; `= x` has no name.
    if (name_as_given.empty() ||
        absl::c_any_of(name_as_given, absl::ascii_isspace)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("expected 'name = value', got '%s'",
                          StripComment(absl::StripAsciiWhitespace(line))));
    }
    std::string name(name_as_given);
    std::replace(name.begin(), name.end(), '_', '-');
    if (!IsSettingName(name)) {
      // ApplySetting refuses it, with the nearest known name.
      return ApplySetting(name, "", config_);
    }
    absl::StatusOr<std::string> value =
        SettingValue(inih_value, CutAfterValue(line, inih_value));
    if (!value.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: %s", name, value.status().message()));
    }
    if (value->empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s has an empty value; leave the line out (or comment it out) for "
          "the default",
          name));
    }
    const int number = static_cast<int>(lines_read_);
    if (!SettingRepeats(name)) {
      const auto [first, inserted] = line_of_setting_.try_emplace(name, number);
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s is given twice (first on line %d); only peer and table may "
            "repeat",
            name, first->second));
      }
    } else if (name == "peer") {
      absl::StatusOr<PeerConfig> peer = ParsePeer(*value);
      if (peer.ok()) {
        for (const auto& [address, first] : peer_lines_) {
          if (SamePeerAddress(address, peer->address)) {
            return absl::InvalidArgumentError(absl::StrFormat(
                "peer %s is given twice (first on line %d as %s); give each "
                "peer once",
                peer->address, first, address));
          }
        }
        peer_lines_.emplace_back(peer->address, number);
      }
    } else {
      const auto [first, inserted] = table_lines_.try_emplace(*value, number);
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "table %s is given twice (first on line %d); give each table once",
            *value, first->second));
      }
    }
    absl::Status applied = ApplySetting(name, *value, config_);
    if (!applied.ok() && !absl::StartsWith(applied.message(), name)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: %s", name, applied.message()));
    }
    return applied;
  }

  void Fail(int line, const std::string& message) {
    if (!error_.ok()) return;
    error_ = Error(line, message);
    error_line_ = line;
  }

  absl::Status Error(int line, absl::string_view message) const {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s:%d: %s", source_, line, message));
  }

  const absl::string_view source_;
  NodeConfig* const config_;
  std::vector<absl::string_view> lines_;
  // Lines handed to libinih; the number of the one it is parsing.
  size_t lines_read_ = 0;
  // The first line of each setting that may not repeat, and of each peer
  // (by address as written) and table.
  absl::flat_hash_map<std::string, int> line_of_setting_;
  std::vector<std::pair<std::string, int>> peer_lines_;
  absl::flat_hash_map<std::string, int> table_lines_;
  // The first error, and its line.
  absl::Status error_;
  int error_line_ = 0;
};

}  // namespace

absl::Status ApplyConfigText(absl::string_view text, NodeConfig* config,
                             absl::string_view source) {
  return ConfigReader(text, source, config).Read();
}

absl::Status ApplyConfigFile(const std::string& path, NodeConfig* config) {
  // Opened without blocking (a FIFO would wait for a writer, and a SIGHUP
  // reload with it), then refused unless it is a regular file of at most
  // kMaxConfigFileBytes: /dev/zero or a FIFO read to their end would never
  // end or never fit in memory.
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrFormat("cannot read config file %s: %s",
                                               path, std::strerror(errno)));
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { close(fd); }
  } closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return absl::UnavailableError(absl::StrFormat(
        "cannot read config file %s: %s", path, std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "config file %s is a directory; --config takes a file of "
        "'name = value' lines",
        path));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "config file %s is not a regular file (a device, FIFO or socket); "
        "--config takes a file of 'name = value' lines",
        path));
  }
  std::string text;
  char buffer[8192];
  for (;;) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::UnavailableError(absl::StrFormat(
          "cannot read config file %s: %s", path, std::strerror(errno)));
    }
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
    if (text.size() > kMaxConfigFileBytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "config file %s is larger than %d bytes; a config is a few lines "
          "of 'name = value'",
          path, kMaxConfigFileBytes));
    }
  }
  return ApplyConfigText(text, config, path);
}

}  // namespace node
}  // namespace tally
