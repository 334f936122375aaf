#include "support/tcp_proxy.h"

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
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tally {
namespace testing {
namespace {

// How often blocked threads look at the stop and cut flags.
constexpr int kPollMs = 20;

// Writes all of `data`; false when the peer is gone.
bool SendAll(int fd, const char* data, size_t size) {
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

absl::StatusOr<std::unique_ptr<TcpProxy>> TcpProxy::Start(
    const std::string& target, absl::Duration one_way_delay,
    double bytes_per_second) {
  if (!(bytes_per_second >= 0)) {
    return absl::InvalidArgumentError("proxy bandwidth is negative");
  }
  if (one_way_delay < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "proxy delay ", absl::FormatDuration(one_way_delay), " is negative"));
  }
  const size_t colon = target.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(target.substr(colon + 1), &port) || port <= 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("proxy target '", target, "' is not HOST:PORT"));
  }
  auto proxy = std::unique_ptr<TcpProxy>(new TcpProxy());
  proxy->target_host_ = target.substr(0, colon);
  proxy->target_port_ = port;
  proxy->one_way_delay_ = one_way_delay;
  proxy->bytes_per_second_ = bytes_per_second;
  in_addr probe{};
  if (inet_pton(AF_INET, proxy->target_host_.c_str(), &probe) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("proxy target host '",
                                                   proxy->target_host_,
                                                   "' is not an IPv4 address"));
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
  TcpProxy* p = proxy.get();
  proxy->acceptor_ = std::thread([p] { p->AcceptLoop(); });
  return proxy;
}

TcpProxy::~TcpProxy() {
  stopping_ = true;
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::unique_ptr<Connection>> connections;
  std::vector<int> held;
  {
    absl::MutexLock lock(&mu_);
    connections.swap(connections_);
    held.swap(held_fds_);
  }
  for (auto& c : connections) Shutdown(c.get());
  for (auto& c : connections) {
    if (c->up.joinable()) c->up.join();
    if (c->down.joinable()) c->down.join();
    close(c->client_fd);
    close(c->target_fd);
  }
  for (int fd : held) close(fd);
  if (listen_fd_ >= 0) close(listen_fd_);
}

void TcpProxy::Cut(CutMode mode) {
  absl::MutexLock lock(&mu_);
  cut_ = true;
  mode_ = mode;
  for (auto& c : connections_) {
    c->silenced = true;
    if (mode == CutMode::kReset) Shutdown(c.get());
  }
}

void TcpProxy::Heal() {
  absl::MutexLock lock(&mu_);
  cut_ = false;
}

void TcpProxy::Shutdown(Connection* c) {
  shutdown(c->client_fd, SHUT_RDWR);
  shutdown(c->target_fd, SHUT_RDWR);
}

void TcpProxy::AcceptLoop() {
  while (!stopping_.load()) {
    pollfd pfd{listen_fd_, POLLIN, 0};
    if (poll(&pfd, 1, kPollMs) <= 0) continue;
    const int client = accept(listen_fd_, nullptr, nullptr);
    if (client < 0) continue;
    ++accepted_;
    {
      absl::MutexLock lock(&mu_);
      if (cut_ && mode_ == CutMode::kReset) {
        close(client);
        continue;
      }
      if (cut_) {
        held_fds_.push_back(client);
        continue;
      }
    }
    const int target = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(target_port_));
    inet_pton(AF_INET, target_host_.c_str(), &addr.sin_addr);
    if (target < 0 || connect(target, reinterpret_cast<sockaddr*>(&addr),
                              sizeof(addr)) != 0) {
      if (target >= 0) close(target);
      close(client);
      continue;
    }
    const int one = 1;
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(target, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto c = std::make_unique<Connection>();
    c->client_fd = client;
    c->target_fd = target;
    Connection* raw = c.get();
    absl::MutexLock lock(&mu_);
    c->up =
        std::thread([this, raw] { Pump(raw, raw->client_fd, raw->target_fd); });
    c->down =
        std::thread([this, raw] { Pump(raw, raw->target_fd, raw->client_fd); });
    connections_.push_back(std::move(c));
  }
}

void TcpProxy::Pump(Connection* c, int from, int to) {
  if (one_way_delay_ > absl::ZeroDuration() || bytes_per_second_ > 0) {
    DelayedPump(c, from, to);
    return;
  }
  const int way = from == c->client_fd ? 0 : 1;
  char buffer[64 * 1024];
  while (!stopping_.load() && !c->silenced.load()) {
    pollfd pfd{from, POLLIN, 0};
    const int ready = poll(&pfd, 1, kPollMs);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    if (c->silenced.load()) return;  // black-holed: read nothing more
    const ssize_t n = read(from, buffer, sizeof(buffer));
    if (n <= 0) break;
    bytes_[way].fetch_add(static_cast<uint64_t>(n));
    if (!SendAll(to, buffer, static_cast<size_t>(n))) {
      Shutdown(c);
      return;
    }
  }
  // One direction ended (or was reset): end the other too, unless the link
  // is black-holed, which keeps both sockets open and silent.
  if (!c->silenced.load() || stopping_.load()) Shutdown(c);
}

void TcpProxy::DelayedPump(Connection* c, int from, int to) {
  using Clock = std::chrono::steady_clock;
  const auto delay = absl::ToChronoNanoseconds(one_way_delay_);
  const int way = from == c->client_fd ? 0 : 1;
  // When a chunk of `size` bytes read now arrives at the far end: after
  // the chunks before it passed the link (if it is narrow), its own time
  // on the link, and the delay.
  auto arrival = [&](size_t size) {
    const Clock::time_point now = Clock::now();
    if (bytes_per_second_ <= 0) return now + delay;
    absl::MutexLock lock(&link_mu_);
    Clock::time_point& free = link_free_[way];
    free = std::max(free, now) +
           std::chrono::duration_cast<Clock::duration>(
               std::chrono::duration<double>(size / bytes_per_second_));
    return free + delay;
  };
  const auto poll_period =
      std::chrono::nanoseconds(std::chrono::milliseconds(kPollMs));
  // The chunks read and not yet written, each with when it may go.
  std::deque<std::pair<Clock::time_point, std::string>> held;
  bool reading = true;
  char buffer[64 * 1024];
  while (!stopping_.load() && !c->silenced.load() &&
         (reading || !held.empty())) {
    auto wait = poll_period;
    if (!held.empty()) {
      wait = std::min(wait, std::max(std::chrono::nanoseconds(0),
                                     held.front().first - Clock::now()));
    }
    if (reading) {
      pollfd pfd{from, POLLIN, 0};
      const timespec timeout{static_cast<time_t>(wait.count() / 1'000'000'000),
                             static_cast<long>(wait.count() % 1'000'000'000)};
      if (ppoll(&pfd, 1, &timeout, nullptr) > 0) {
        const ssize_t n = recv(from, buffer, sizeof(buffer), 0);
        if (n > 0) {
          bytes_[way].fetch_add(static_cast<uint64_t>(n));
          held.emplace_back(arrival(static_cast<size_t>(n)),
                            std::string(buffer, static_cast<size_t>(n)));
        } else if (n == 0 || errno != EINTR) {
          reading = false;  // the source ended: deliver what is held
        }
      }
    } else {
      std::this_thread::sleep_for(wait);
    }
    while (!held.empty() && held.front().first <= Clock::now()) {
      if (!SendAll(to, held.front().second.data(),
                   held.front().second.size())) {
        Shutdown(c);
        return;
      }
      held.pop_front();
    }
  }
  if (c->silenced.load() && !stopping_.load()) return;  // black-holed
  // This direction's source ended and its bytes are delivered.
  shutdown(to, SHUT_WR);
}

}  // namespace testing
}  // namespace tally
