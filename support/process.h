// Helpers that start real processes, tallyd nodes and tally commands, for the
// multi-process tests and tally-bench's cluster scenarios.
//
//   auto node = NodeProcess::Start("a", dir.path(), {"--sync-interval", "1s"});
//   NodeClient::Connect((*node)->address(), {});
//   CommandResult r = RunTally({"diff", a, b, "--json"});
//
// Every process a test (or benchmark) starts is stopped by its owner's
// destructor (SIGKILL if it is still running), so a failing test leaves
// nothing behind.
#ifndef TALLY_SUPPORT_PROCESS_H_
#define TALLY_SUPPORT_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tally {
namespace testing {

// Paths of the tallyd and tally this build made (support/CMakeLists.txt), or
// "tallyd" and "tally" when compiled without them.
std::string TallydPath();
std::string TallyPath();

class NodeProcess {
 public:
  // Starts `tallyd --name NAME --data-dir DIR --listen LISTEN` plus `extra`,
  // and waits until it logs the address it listens on. LISTEN defaults to
  // 127.0.0.1:0 (a free port).
  static absl::StatusOr<std::unique_ptr<NodeProcess>> Start(
      const std::string& name, const std::string& data_dir,
      const std::vector<std::string>& extra = {},
      const std::string& listen = "127.0.0.1:0",
      const std::string& tallyd_path = TallydPath());
  ~NodeProcess();
  NodeProcess(const NodeProcess&) = delete;
  NodeProcess& operator=(const NodeProcess&) = delete;

  const std::string& address() const { return address_; }
  const std::string& data_dir() const { return data_dir_; }
  pid_t pid() const { return pid_; }

  // SIGTERM, then waits; returns the exit code (or 128+signal).
  int Stop(absl::Duration timeout = absl::Seconds(20));
  // SIGKILL, then waits.
  void Kill();
  // Everything the node wrote to stderr so far.
  std::string Log() const;

 private:
  NodeProcess() = default;
  int Wait(absl::Duration timeout);

  pid_t pid_ = -1;
  std::string address_;
  std::string data_dir_;
  std::string log_path_;
};

struct CommandResult {
  int exit_code = -1;  // 128+signal when killed
  std::string out;
  std::string err;
};

// A free loopback address, "127.0.0.1:PORT" (free when asked; a test that
// starts a process on it right away rarely loses it). For nodes that must
// know each other's addresses before they start, or restart on the same one.
std::string FreeLoopbackAddress();

// Runs a command to completion (killed after `timeout`).
CommandResult RunCommand(const std::vector<std::string>& argv,
                         absl::Duration timeout = absl::Seconds(120));
// Runs the tally CLI.
CommandResult RunTally(const std::vector<std::string>& args,
                       absl::Duration timeout = absl::Seconds(120));

// Starts a command without waiting; returns its pid (-1 when it cannot be
// started, with a line on stderr). Its output goes to
// `out_path`.
pid_t SpawnCommand(const std::vector<std::string>& argv,
                   const std::string& out_path);

}  // namespace testing
}  // namespace tally

#endif  // TALLY_SUPPORT_PROCESS_H_
