#include "tests/killed_child.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace tally {
namespace testing {

absl::StatusOr<std::vector<std::string>> AcknowledgedBeforeSigkill(
    absl::FunctionRef<void(FILE* out)> write, absl::Duration run_for) {
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError("pipe failed");
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError("fork failed");
  }
  if (pid == 0) {
    close(fds[0]);
    FILE* out = fdopen(fds[1], "w");
    if (out == nullptr) _exit(6);
    write(out);
    _exit(5);
  }
  close(fds[1]);
  absl::SleepFor(run_for);
  kill(pid, SIGKILL);
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  std::string printed;
  char buf[4096];
  ssize_t got;
  while ((got = read(fds[0], buf, sizeof(buf))) > 0) printed.append(buf, got);
  close(fds[0]);
  if (!WIFSIGNALED(wstatus)) {
    return absl::InternalError(
        absl::StrFormat("the child ended before the kill (exit status %d)",
                        WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1));
  }
  std::vector<std::string> lines = absl::StrSplit(printed, '\n');
  lines.pop_back();  // after the last newline: cut by the kill, or empty
  return lines;
}

}  // namespace testing
}  // namespace tally
