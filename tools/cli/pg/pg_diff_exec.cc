// RunPgDiff in the `tally` binary (pg_diff.h): the URL commands run in
// `tally-pg`, which links libpq; this process becomes it.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "tools/cli/pg/pg_diff.h"

namespace tally {
namespace cli {

absl::StatusOr<int> RunPgDiff(const PgDiffOptions& options) {
  std::error_code error;
  const std::filesystem::path self =
      std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "cannot find this program's directory, where tally-pg (the "
        "PostgreSQL URL commands) lives: /proc/self/exe: %s",
        error.message()));
  }
  std::string helper = (self.parent_path() / "tally-pg").string();
  std::vector<char*> argv;
  argv.push_back(helper.data());
  std::vector<std::string> rest(options.command_line.size() > 1
                                    ? options.command_line.begin() + 1
                                    : options.command_line.end(),
                                options.command_line.end());
  for (std::string& arg : rest) argv.push_back(arg.data());
  argv.push_back(nullptr);
  std::cout.flush();
  std::cerr.flush();
  execv(helper.c_str(), argv.data());
  const int exec_errno = errno;
  return absl::FailedPreconditionError(absl::StrFormat(
      "cannot run %s, which compares PostgreSQL databases for tally "
      "(installed beside tally): %s",
      helper, std::strerror(exec_errno)));
}

}  // namespace cli
}  // namespace tally
