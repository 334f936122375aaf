#include "pg/wire/lsn.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tally {
namespace pg {
namespace {

bool ParseHalf(absl::string_view hex, uint32_t* out) {
  if (hex.empty() || hex.size() > 8) return false;
  for (char c : hex) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return absl::SimpleHexAtoi(hex, out);
}

}  // namespace

absl::StatusOr<Lsn> ParseLsn(absl::string_view text) {
  const size_t slash = text.find('/');
  uint32_t high = 0;
  uint32_t low = 0;
  if (slash == absl::string_view::npos ||
      !ParseHalf(text.substr(0, slash), &high) ||
      !ParseHalf(text.substr(slash + 1), &low)) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a WAL position (want X/Y in hex): \"", text, "\""));
  }
  return (static_cast<Lsn>(high) << 32) | low;
}

std::string FormatLsn(Lsn lsn) {
  return absl::StrFormat("%X/%X", static_cast<uint32_t>(lsn >> 32),
                         static_cast<uint32_t>(lsn));
}

}  // namespace pg
}  // namespace tally
