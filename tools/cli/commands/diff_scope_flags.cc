#include "tools/cli/commands/diff_scope_flags.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "node/sync/diff_run.h"

namespace tally {
namespace cli {

absl::StatusOr<tree::KeyList> ReadKeyList(std::istream& in, bool escaped,
                                          const std::string& source) {
  tree::KeyList keys;
  absl::flat_hash_set<std::string> seen;
  std::string line;
  for (uint64_t number = 1; std::getline(in, line); ++number) {
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

absl::StatusOr<tree::DiffScope> ReadDiffScope(const std::string& range,
                                              const std::string& keys_from,
                                              bool escaped) {
  tree::DiffScope scope;
  if (!range.empty() && !keys_from.empty()) {
    return absl::InvalidArgumentError(
        "--range and --keys-from exclude each other; give one");
  }
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
