#include "tools/bench/delay_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tally {
namespace bench {
namespace {

using Clock = std::chrono::steady_clock;

// How long a blocked thread waits before it looks at the stop flag.
constexpr auto kStopCheck = std::chrono::milliseconds(20);

// Writes all of `data`; false when the peer is gone.
bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DelayProxy>> DelayProxy::Start(
    const std::string& target, absl::Duration one_way) {
  const size_t colon = target.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(target.substr(colon + 1), &port) || port <= 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("proxy target '", target, "' is not HOST:PORT"));
  }
  auto proxy = std::unique_ptr<DelayProxy>(new DelayProxy());
  proxy->target_host_ = target.substr(0, colon);
  proxy->target_port_ = port;
  proxy->one_way_ = one_way;
  in_addr probe{};
  if (inet_pton(AF_INET, proxy->target_host_.c_str(), &probe) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "proxy target host '", proxy->target_host_, "' is not IPv4"));
  }
  proxy->listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
  if (proxy->listen_fd_ < 0) {
    return absl::UnavailableError(absl::StrCat("socket: ", strerror(errno)));
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(proxy->listen_fd_, reinterpret_cast<sockaddr*>(&addr),
           sizeof(addr)) != 0 ||
      listen(proxy->listen_fd_, 64) != 0 ||
      getsockname(proxy->listen_fd_, reinterpret_cast<sockaddr*>(&addr),
                  &len) != 0) {
    return absl::UnavailableError(
        absl::StrCat("proxy cannot listen: ", strerror(errno)));
  }
  proxy->address_ = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));
  proxy->acceptor_ = std::thread([p = proxy.get()] { p->AcceptLoop(); });
  return proxy;
}

DelayProxy::~DelayProxy() {
  stopping_ = true;
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::unique_ptr<Connection>> connections;
  {
    absl::MutexLock lock(&mu_);
    connections.swap(connections_);
  }
  for (auto& c : connections) {
    shutdown(c->client_fd, SHUT_RDWR);
    shutdown(c->target_fd, SHUT_RDWR);
    if (c->up.joinable()) c->up.join();
    if (c->down.joinable()) c->down.join();
    close(c->client_fd);
    close(c->target_fd);
  }
  if (listen_fd_ >= 0) close(listen_fd_);
}

void DelayProxy::AcceptLoop() {
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(kStopCheck.count()));
    if (ready <= 0) continue;
    const int client = accept(listen_fd_, nullptr, nullptr);
    if (client < 0) continue;
    const int upstream = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(target_port_));
    inet_pton(AF_INET, target_host_.c_str(), &addr.sin_addr);
    if (upstream < 0 || connect(upstream, reinterpret_cast<sockaddr*>(&addr),
                                sizeof(addr)) != 0) {
      if (upstream >= 0) close(upstream);
      close(client);
      continue;
    }
    // The delay is the proxy's; Nagle's would come on top of it.
    const int one = 1;
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(upstream, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto c = std::make_unique<Connection>();
    c->client_fd = client;
    c->target_fd = upstream;
    c->up = std::thread([this, client, upstream] { Pump(client, upstream); });
    c->down = std::thread([this, client, upstream] { Pump(upstream, client); });
    absl::MutexLock lock(&mu_);
    connections_.push_back(std::move(c));
  }
}

// Reads from `from` as bytes arrive and writes each chunk to `to` once it
// has been held for one_way_.
void DelayProxy::Pump(int from, int to) {
  const auto delay = absl::ToChronoNanoseconds(one_way_);
  std::deque<std::pair<Clock::time_point, std::string>> held;
  bool reading = true;
  char buffer[64 * 1024];
  while (!stopping_ && (reading || !held.empty())) {
    auto wait =
        std::chrono::duration_cast<std::chrono::nanoseconds>(kStopCheck);
    if (!held.empty()) {
      wait = std::min(wait, std::max(std::chrono::nanoseconds(0),
                                     held.front().first - Clock::now()));
    }
    if (reading) {
      pollfd p{from, POLLIN, 0};
      const timespec timeout{static_cast<time_t>(wait.count() / 1'000'000'000),
                             static_cast<long>(wait.count() % 1'000'000'000)};
      if (ppoll(&p, 1, &timeout, nullptr) > 0) {
        const ssize_t n = recv(from, buffer, sizeof(buffer), 0);
        if (n > 0) {
          held.emplace_back(Clock::now() + delay,
                            std::string(buffer, static_cast<size_t>(n)));
        } else if (n == 0 || errno != EINTR) {
          reading = false;
        }
      }
    } else {
      std::this_thread::sleep_for(wait);
    }
    while (!held.empty() && held.front().first <= Clock::now()) {
      if (!WriteAll(to, held.front().second.data(),
                    held.front().second.size())) {
        held.clear();
        reading = false;
        break;
      }
      held.pop_front();
    }
  }
  shutdown(to, SHUT_WR);
}

}  // namespace bench
}  // namespace tally
