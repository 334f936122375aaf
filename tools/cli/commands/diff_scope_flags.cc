#include "tools/cli/commands/diff_scope_flags.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "node/sync/diff_run.h"

namespace tally {
namespace cli {

namespace {

// The longest line ReadKeyList reads: an escaped key may take 4 bytes a byte.
constexpr size_t kMaxKeyLineBytes = 4 * node::kMaxRunDiffKeyBytes + 1;

enum class LineRead { kLine, kEnd, kTooLong };

// Reads one line of `in` into `*line` (without its '\n'), at most `max`
// bytes of it: a file with no line ends (a binary file, a dump) must not
// be read into memory whole.
LineRead ReadLine(std::istream& in, size_t max, std::string* line) {
  line->clear();
  int c;
  while ((c = in.get()) != std::char_traits<char>::eof()) {
    if (c == '\n') return LineRead::kLine;
    if (line->size() == max) return LineRead::kTooLong;
    line->push_back(static_cast<char>(c));
  }
  return line->empty() ? LineRead::kEnd : LineRead::kLine;
}

}  // namespace

absl::StatusOr<tree::KeyList> ReadKeyList(std::istream& in, bool escaped,
                                          const std::string& source) {
  tree::KeyList keys;
  absl::flat_hash_set<std::string> seen;
  std::string line;
  for (uint64_t number = 1;; ++number) {
    const LineRead read = ReadLine(in, kMaxKeyLineBytes, &line);
    if (read == LineRead::kEnd) break;
    if (read == LineRead::kTooLong) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s:%d: the line is longer than %d bytes; keys are 1..%d bytes, one "
          "a line",
          source, number, kMaxKeyLineBytes, node::kMaxRunDiffKeyBytes));
    }
    if (number == 1 && absl::StartsWith(line, "\xEF\xBB\xBF")) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s:1: the file starts with a UTF-8 byte order mark; remove it "
          "(for a key that starts with those bytes, use --escaped and "
          "\\xef\\xbb\\xbf)",
          source));
    }
    if (absl::EndsWith(line, "\r")) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s:%d: the line ends in a carriage return (Windows line ends?); "
          "convert the file (dos2unix) or, for a key that ends in one, use "
          "--escaped and \\r",
          source, number));
    }
    if (line.empty()) continue;
    std::string key = line;
    if (escaped) {
      std::string error;
      if (!absl::CUnescape(line, &key, &error)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s:%d: --escaped: '%s' is not a valid C-escaped key: %s", source,
            number, absl::CHexEscape(line), error));
      }
    }
    if (key.empty() || key.size() > node::kMaxRunDiffKeyBytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s:%d: key is %d bytes; keys are 1..%d bytes", source, number,
          key.size(), node::kMaxRunDiffKeyBytes));
    }
    if (seen.insert(key).second) keys.push_back(std::move(key));
  }
  if (in.bad()) {
    return absl::UnavailableError(
        absl::StrFormat("%s: read error after %d keys", source, keys.size()));
  }
  if (keys.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s holds no keys (one key a line; empty lines are skipped)", source));
  }
  return keys;
}

absl::StatusOr<tree::DiffScope> ReadDiffScope(
    const std::optional<std::string>& range_flag,
    const std::optional<std::string>& keys_from_flag, bool escaped) {
  tree::DiffScope scope;
  if (range_flag.has_value() && keys_from_flag.has_value()) {
    return absl::InvalidArgumentError(
        "--range and --keys-from exclude each other; give one");
  }
  // An empty value is most often an unset shell variable: taken as "no
  // flag", it would widen a repair to the whole keyspace.
  if (range_flag.has_value() &&
      absl::StripAsciiWhitespace(*range_flag).empty()) {
    return absl::InvalidArgumentError(
        "--range is empty; give FROM:TO (hex tokens), or leave --range out "
        "to cover the whole keyspace");
  }
  if (keys_from_flag.has_value() &&
      absl::StripAsciiWhitespace(*keys_from_flag).empty()) {
    return absl::InvalidArgumentError(
        "--keys-from is empty; give a file of keys (- for standard input), "
        "or leave --keys-from out to cover the whole keyspace");
  }
  const std::string range = range_flag.value_or("");
  const std::string keys_from = keys_from_flag.value_or("");
  if (!range.empty()) {
    absl::StatusOr<tree::TokenRange> parsed = tree::ParseTokenRange(range);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--range: ", parsed.status().message()));
    }
    scope.range = *parsed;
    return scope;
  }
  if (keys_from.empty()) return scope;
  absl::StatusOr<tree::KeyList> keys;
  if (keys_from == "-") {
    keys = ReadKeyList(std::cin, escaped, "standard input");
  } else {
    std::ifstream file(keys_from);
    if (!file) {
      return absl::NotFoundError(absl::StrFormat(
          "--keys-from: cannot open %s: %s", keys_from, std::strerror(errno)));
    }
    keys = ReadKeyList(file, escaped, keys_from);
  }
  if (!keys.ok()) return keys.status();
  scope.keys = std::make_shared<const tree::KeyList>(*std::move(keys));
  return scope;
}

std::vector<tree::DiffScope> RequestScopes(const tree::DiffScope& scope) {
  if (scope.keys == nullptr) return {scope};
  std::vector<tree::DiffScope> parts;
  auto part = std::make_shared<tree::KeyList>();
  size_t bytes = 0;
  for (const std::string& key : *scope.keys) {
    if (!part->empty() &&
        (part->size() == node::kMaxRunDiffKeys ||
         bytes + key.size() > node::kMaxRunDiffKeyListBytes)) {
      parts.push_back(tree::DiffScope{{}, std::move(part)});
      part = std::make_shared<tree::KeyList>();
      bytes = 0;
    }
    bytes += key.size();
    part->push_back(key);
  }
  if (!part->empty()) parts.push_back(tree::DiffScope{{}, std::move(part)});
  return parts;
}

void SetScope(const tree::DiffScope& scope, v1::RunDiffRequest* request) {
  request->clear_range();
  request->clear_keys();
  if (scope.keys != nullptr) {
    for (const std::string& key : *scope.keys) request->add_keys(key);
    return;
  }
  if (scope.range.IsAll()) return;
  request->mutable_range()->set_first(scope.range.first);
  request->mutable_range()->set_last(scope.range.last);
}

}  // namespace cli
}  // namespace tally
