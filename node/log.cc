#include "node/log.h"

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tally {
namespace node {
namespace {

void Write(absl::string_view level, absl::string_view message) {
  // One fwrite per line: stdio locks the stream, so lines stay whole.
  const std::string line =
      absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(),
                                    absl::UTCTimeZone()),
                   " ", level, " ", message, "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace

void LogInfo(absl::string_view message) { Write("INFO", message); }
void LogWarning(absl::string_view message) { Write("WARN", message); }
void LogError(absl::string_view message) { Write("ERROR", message); }

}  // namespace node
}  // namespace tally
