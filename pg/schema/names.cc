#include "pg/schema/names.h"

#include <xxhash.h>

#include <cstdint>
#include <string>

#include "absl/strings/str_format.h"
#include "tree/hlc.h"

namespace tally {
namespace pg {
namespace {

// "tally_" and the cleaned name together, before the hash suffix.
constexpr size_t kMaxPrefixChars = 40;

}  // namespace

std::string ReplicationBaseName(absl::string_view node_name) {
  std::string base = "tally_";
  for (char c : node_name) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    const bool keep = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    base.push_back(keep ? c : '_');
    if (base.size() == kMaxPrefixChars) break;
  }
  const uint64_t hash = XXH3_64bits(node_name.data(), node_name.size());
  absl::StrAppendFormat(&base, "_%08x", static_cast<uint32_t>(hash >> 32));
  return base;
}

ReplicationNames NamesForNode(absl::string_view node_name) {
  const std::string base = ReplicationBaseName(node_name);
  return ReplicationNames{base, base, base};
}

tree::Version BootstrapVersion() {
  return tree::Version{tree::HlcTimestamp::FromRaw(1),
                       std::string(kBootstrapOrigin)};
}

}  // namespace pg
}  // namespace tally
