#include "node/rpc/listener_watch.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace tally {
namespace node {
namespace {

constexpr absl::string_view kListenState = "0A";

std::optional<uint64_t> QueueOnThisMachine(int port) {
  std::optional<uint64_t> longest;
  for (const char* path : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(path);
    if (!in) continue;
    std::stringstream text;
    text << in.rdbuf();
    const std::optional<uint64_t> queue = AcceptQueueLength(text.str(), port);
    if (queue.has_value()) longest = std::max(longest.value_or(0), *queue);
  }
  return longest;
}

// A connection to the port on loopback, so that a listener that no longer
// accepts has one waiting; -1 when none can be made (no descriptors left).
int Probe(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // Non-blocking: in progress or done, either way it reaches the queue.
  (void)connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  return fd;
}

}  // namespace

std::optional<uint64_t> AcceptQueueLength(absl::string_view proc_net_tcp,
                                          int port) {
  std::optional<uint64_t> longest;
  for (absl::string_view line : absl::StrSplit(proc_net_tcp, '\n')) {
    // sl local_address rem_address st tx_queue:rx_queue ...
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (fields.size() < 5 || fields[3] != kListenState) continue;
    const size_t colon = fields[1].rfind(':');
    uint32_t local_port = 0;
    if (colon == absl::string_view::npos ||
        !absl::SimpleHexAtoi(fields[1].substr(colon + 1), &local_port) ||
        local_port != static_cast<uint32_t>(port)) {
      continue;
    }
    const size_t queues = fields[4].find(':');
    uint64_t waiting = 0;
    if (queues == absl::string_view::npos ||
        !absl::SimpleHexAtoi(fields[4].substr(queues + 1), &waiting)) {
      continue;
    }
    longest = std::max(longest.value_or(0), waiting);
  }
  return longest;
}

std::unique_ptr<ListenerWatch> ListenerWatch::Start(
    int port, absl::Duration interval, int checks,
    std::function<void()> stuck) {
  std::unique_ptr<ListenerWatch> watch(new ListenerWatch());
  watch->thread_ = std::thread(
      [w = watch.get(), port, interval, checks, stuck = std::move(stuck)] {
        w->Run(port, interval, checks, stuck);
      });
  return watch;
}

ListenerWatch::~ListenerWatch() {
  stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void ListenerWatch::Run(int port, absl::Duration interval, int checks,
                        const std::function<void()>& stuck) {
  int in_a_row = 0;
  int probe = -1;
  while (!stop_.WaitForNotificationWithTimeout(interval)) {
    const std::optional<uint64_t> waiting = QueueOnThisMachine(port);
    in_a_row = waiting.value_or(0) > 0 ? in_a_row + 1 : 0;
    if (in_a_row >= checks) {
      if (probe >= 0) close(probe);
      stuck();
      return;
    }
    if (probe >= 0) close(probe);
    probe = Probe(port);
  }
  if (probe >= 0) close(probe);
}

}  // namespace node
}  // namespace tally
