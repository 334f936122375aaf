#include "node/observe/process_stats.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tally {
namespace node {
namespace {

absl::Status Unreadable(const std::string& path, absl::string_view why) {
  return absl::UnavailableError(absl::StrCat("cannot read ", path, ": ", why));
}

absl::Status ReadWhole(const std::string& path, std::string* text) {
  std::ifstream in(path);
  if (!in) return Unreadable(path, "cannot open");
  std::stringstream buffer;
  buffer << in.rdbuf();
  *text = buffer.str();
  return absl::OkStatus();
}

// "RssAnon:	  123 kB" -> 123 * 1024.
bool KilobytesField(absl::string_view line, absl::string_view name,
                    uint64_t* bytes) {
  if (!absl::ConsumePrefix(&line, name) || !absl::ConsumePrefix(&line, ":")) {
    return false;
  }
  line = absl::StripAsciiWhitespace(line);
  absl::ConsumeSuffix(&line, "kB");
  uint64_t kb = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kb)) return false;
  *bytes = kb * 1024;
  return true;
}

}  // namespace

absl::Status ReadProcessStats(const std::string& proc_dir,
                              v1::ProcessStatus* out) {
  const long ticks = sysconf(_SC_CLK_TCK);
  // stat: the fields after the command (which may hold spaces and parens,
  // so split after its last ')'). utime and stime are fields 14 and 15,
  // num_threads 20, starttime 22 (in ticks since boot), vsize 23.
  std::string stat;
  const std::string stat_path = proc_dir + "/stat";
  if (absl::Status s = ReadWhole(stat_path, &stat); !s.ok()) return s;
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return Unreadable(stat_path, "no ')'");
  std::vector<absl::string_view> fields = absl::StrSplit(
      absl::string_view(stat).substr(paren + 1), ' ', absl::SkipEmpty());
  // fields[0] is field 3 (state).
  auto field = [&](int number, uint64_t* value) {
    const size_t i = static_cast<size_t>(number - 3);
    return i < fields.size() &&
           absl::SimpleAtoi(absl::StripAsciiWhitespace(fields[i]), value);
  };
  uint64_t utime = 0, stime = 0, threads = 0, start_ticks = 0, vsize = 0;
  if (!field(14, &utime) || !field(15, &stime) || !field(20, &threads) ||
      !field(22, &start_ticks) || !field(23, &vsize) || ticks <= 0) {
    return Unreadable(stat_path, "unexpected fields");
  }
  out->set_cpu_seconds(static_cast<double>(utime + stime) / ticks);
  out->set_threads(static_cast<uint32_t>(threads));
  out->set_virtual_bytes(vsize);

  std::string status;
  const std::string status_path = proc_dir + "/status";
  if (absl::Status s = ReadWhole(status_path, &status); !s.ok()) return s;
  uint64_t anon = 0, file = 0, shmem = 0;
  bool have_anon = false, have_file = false;
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    have_anon |= KilobytesField(line, "RssAnon", &anon);
    have_file |= KilobytesField(line, "RssFile", &file);
    KilobytesField(line, "RssShmem", &shmem);
  }
  if (!have_anon || !have_file) {
    return Unreadable(status_path, "no RssAnon or RssFile");
  }
  out->set_resident_anon_bytes(anon);
  out->set_resident_file_bytes(file);
  out->set_resident_shmem_bytes(shmem);

  const std::string fd_path = proc_dir + "/fd";
  DIR* dir = opendir(fd_path.c_str());
  if (dir == nullptr) return Unreadable(fd_path, "cannot list");
  uint64_t fds = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++fds;
  }
  closedir(dir);
  // Listing our own descriptors lists the one the listing holds.
  if (proc_dir == "/proc/self" && fds > 0) --fds;
  out->set_open_fds(fds);
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 &&
      limit.rlim_cur != RLIM_INFINITY) {
    out->set_max_fds(limit.rlim_cur);
  }

  // The start time counts ticks from boot; /proc/stat's btime is the boot.
  std::string system_stat;
  if (absl::Status s = ReadWhole("/proc/stat", &system_stat); !s.ok()) {
    return s;
  }
  for (absl::string_view line : absl::StrSplit(system_stat, '\n')) {
    uint64_t boot = 0;
    if (absl::ConsumePrefix(&line, "btime ") &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &boot)) {
      out->set_start_unix_ms(static_cast<int64_t>(boot) * 1000 +
                             static_cast<int64_t>(start_ticks) * 1000 / ticks);
      return absl::OkStatus();
    }
  }
  return Unreadable("/proc/stat", "no btime");
}

}  // namespace node
}  // namespace tally
