#include "storage/names.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"

namespace tally {
namespace storage {
namespace {

bool IsKeyspaceChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
}

}  // namespace

absl::Status ValidateKeyspaceName(absl::string_view name) {
  if (name.empty() || name.size() > 128 ||
      !std::all_of(name.begin(), name.end(), IsKeyspaceChar)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "keyspace name '%s' is invalid; use 1..128 characters of "
        "[A-Za-z0-9_.-]",
        absl::CHexEscape(name.substr(0, 200))));
  }
  return absl::OkStatus();
}

absl::Status ValidateNodeName(absl::string_view name) {
  if (name.empty() || name.size() > 256 ||
      !std::all_of(name.begin(), name.end(),
                   [](char c) { return c > ' ' && c < 127; })) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "node name '%s' is invalid; use 1..256 printable ASCII characters "
        "without spaces",
        absl::CHexEscape(name.substr(0, 300))));
  }
  return absl::OkStatus();
}

}  // namespace storage
}  // namespace tally
