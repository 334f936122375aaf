#include "support/process.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace tally {
namespace testing {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string TempPath(const std::string& label) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string tmpl =
      ((base != nullptr ? std::filesystem::path(base)
                        : std::filesystem::temp_directory_path()) /
       ("tally-" + label + "-XXXXXX"))
          .string();
  const int fd = mkstemp(tmpl.data());
  if (fd >= 0) close(fd);
  return tmpl;
}

// Starts `argv` with stdout and stderr redirected to files, in a process
// group of its own (so a kill never reaches the caller). posix_spawn, not
// fork: the caller runs gRPC's threads, and a fork of a threaded process
// runs gRPC's fork handlers (which quiesce its threads) and copies its page
// tables — tens of ms that a benchmark of the CLI would time as the CLI's.
// Returns -1 when the program cannot be started (not found, not
// executable).
pid_t Spawn(const std::vector<std::string>& argv, const std::string& out_path,
            const std::string& err_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attributes, 0);
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int error =
      posix_spawn(&pid, args[0], &actions, &attributes, args.data(), environ);
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) {
    std::fprintf(stderr, "cannot start %s: %s\n", args[0],
                 std::strerror(error));
    return -1;
  }
  return pid;
}

int WaitFor(pid_t pid, absl::Duration timeout) {
  if (pid < 0) return 127;  // not started (Spawn), as a shell reports it
  const absl::Time deadline = absl::Now() + timeout;
  int status = 0;
  while (true) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0) return -1;
    if (absl::Now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

#ifndef TALLY_TALLYD_PATH
#define TALLY_TALLYD_PATH "tallyd"
#define TALLY_TALLY_PATH "tally"
#endif

std::string TallydPath() { return TALLY_TALLYD_PATH; }
std::string TallyPath() { return TALLY_TALLY_PATH; }

absl::StatusOr<std::unique_ptr<NodeProcess>> NodeProcess::Start(
    const std::string& name, const std::string& data_dir,
    const std::vector<std::string>& extra, const std::string& listen,
    const std::string& tallyd_path) {
  std::unique_ptr<NodeProcess> node(new NodeProcess());
  node->data_dir_ = data_dir;
  node->log_path_ = TempPath("tallyd-" + name);
  std::vector<std::string> argv{tallyd_path, "--name",   name,  "--data-dir",
                                data_dir,    "--listen", listen};
  argv.insert(argv.end(), extra.begin(), extra.end());
  node->pid_ = Spawn(argv, "/dev/null", node->log_path_);
  if (node->pid_ < 0) {
    return absl::InternalError(
        absl::StrCat("tallyd ", name, ": cannot start ", tallyd_path));
  }
  // Wait for "listening on HOST:PORT" (in a text or a JSON line).
  static const std::regex kListening("listening on ([^ \"]+)");
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline) {
    std::smatch m;
    const std::string log = ReadFile(node->log_path_);
    if (std::regex_search(log, m, kListening)) {
      node->address_ = m[1];
      return node;
    }
    int status;
    if (waitpid(node->pid_, &status, WNOHANG) == node->pid_) {
      node->pid_ = -1;
      return absl::InternalError(
          absl::StrCat("tallyd ", name, " exited at start: ", log));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("tallyd ", name, " did not start: ", node->Log()));
}

NodeProcess::~NodeProcess() {
  Kill();
  std::error_code ec;
  std::filesystem::remove(log_path_, ec);
}

int NodeProcess::Wait(absl::Duration timeout) {
  if (pid_ < 0) return -1;
  const int code = WaitFor(pid_, timeout);
  pid_ = -1;
  return code;
}

int NodeProcess::Stop(absl::Duration timeout) {
  if (pid_ < 0) return -1;
  kill(pid_, SIGTERM);
  return Wait(timeout);
}

void NodeProcess::Kill() {
  if (pid_ < 0) return;
  kill(pid_, SIGKILL);
  Wait(absl::Seconds(10));
}

std::string NodeProcess::Log() const { return ReadFile(log_path_); }

CommandResult RunCommand(const std::vector<std::string>& argv,
                         absl::Duration timeout) {
  const std::string out_path = TempPath("out");
  const std::string err_path = TempPath("err");
  const pid_t pid = Spawn(argv, out_path, err_path);
  CommandResult result;
  result.exit_code = WaitFor(pid, timeout);
  result.out = ReadFile(out_path);
  result.err = ReadFile(err_path);
  std::error_code ec;
  std::filesystem::remove(out_path, ec);
  std::filesystem::remove(err_path, ec);
  return result;
}

CommandResult RunTally(const std::vector<std::string>& args,
                       absl::Duration timeout) {
  std::vector<std::string> argv{TallyPath()};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, timeout);
}

pid_t SpawnCommand(const std::vector<std::string>& argv,
                   const std::string& out_path) {
  return Spawn(argv, out_path, out_path + ".err");
}

std::string FreeLoopbackAddress() {
  // The ports this process handed out. The kernel may give a port that was
  // bound and closed again to the next bind(port 0): two calls in a row
  // could name one port for two nodes, before either has started (a test
  // saw "peer ... is this node's own listen address"). Process-wide state,
  // in a test fixture only: every caller in the process must see it.
  struct HandedOut {
    absl::Mutex mu;
    absl::flat_hash_set<int> ports ABSL_GUARDED_BY(mu);
  };
  static HandedOut* const handed_out = new HandedOut;
  absl::MutexLock lock(&handed_out->mu);
  for (int attempt = 0;; ++attempt) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    close(fd);
    const int port = ntohs(addr.sin_port);
    if (handed_out->ports.insert(port).second || attempt >= 100) {
      return absl::StrCat("127.0.0.1:", port);
    }
  }
}

}  // namespace testing
}  // namespace tally
