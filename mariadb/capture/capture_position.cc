#include "mariadb/capture/capture_position.h"

#include <cstdint>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tally {
namespace mariadb {
namespace {

constexpr absl::string_view kFormat = "mariadb/1";

absl::Status Malformed(absl::string_view why) {
  return absl::DataLossError(
      absl::StrCat("the stored MariaDB capture position is malformed: ", why,
                   " (was the store built by another kind of sidecar?)"));
}

}  // namespace

std::string CapturePosition::Encode() const {
  std::string out =
      absl::StrCat(kFormat, "\ngtid\t", gtid, "\nstamp\t", last_stamp.raw());
  for (const auto& [table, fingerprint] : fingerprints) {
    absl::StrAppend(&out, "\ntable\t", table, "\t", fingerprint);
  }
  return out;
}

absl::StatusOr<CapturePosition> CapturePosition::Decode(
    absl::string_view bytes) {
  const std::vector<absl::string_view> lines = absl::StrSplit(bytes, '\n');
  if (lines.empty() || lines[0] != kFormat) {
    return Malformed("it does not begin with \"mariadb/1\"");
  }
  CapturePosition p;
  bool have_gtid = false;
  bool have_stamp = false;
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::vector<absl::string_view> f = absl::StrSplit(lines[i], '\t');
    if (f.size() == 2 && f[0] == "gtid" && !have_gtid) {
      p.gtid = std::string(f[1]);
      have_gtid = true;
    } else if (f.size() == 2 && f[0] == "stamp" && !have_stamp) {
      uint64_t raw = 0;
      if (!absl::SimpleAtoi(f[1], &raw)) return Malformed("a bad stamp");
      p.last_stamp = tree::HlcTimestamp::FromRaw(raw);
      have_stamp = true;
    } else if (f.size() == 3 && f[0] == "table" && !f[1].empty() &&
               !f[2].empty()) {
      if (!p.fingerprints.emplace(std::string(f[1]), std::string(f[2]))
               .second) {
        return Malformed(absl::StrCat("table ", f[1], " is listed twice"));
      }
    } else {
      return Malformed(absl::StrCat("line ", i + 1, " is not understood"));
    }
  }
  if (!have_gtid || !have_stamp) return Malformed("no gtid or no stamp");
  return p;
}

}  // namespace mariadb
}  // namespace tally
