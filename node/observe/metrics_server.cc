#include "node/observe/metrics_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "node/observe/log.h"
#include "node/observe/metrics.h"
#include "node/observe/status_page.h"

namespace tally {
namespace node {
namespace {

// After its answer, a connection is read (and what comes discarded) for
// this long before it is closed: closing with unread bytes makes the kernel
// reset the connection, which can destroy the answer before the client
// reads it (a 413 to a client still sending its body).
constexpr absl::Duration kLinger = absl::Seconds(1);
constexpr size_t kMaxLingerBytes = 1 << 20;
// How long accepting pauses when the process is out of file descriptors.
constexpr absl::Duration kAcceptPause = absl::Milliseconds(200);

struct HostPort {
  std::string host;
  int port = 0;
};

absl::StatusOr<HostPort> ParseListen(absl::string_view listen) {
  const size_t colon = listen.rfind(':');
  if (colon == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "metrics address '%s' has no port; use HOST:PORT", listen));
  }
  absl::string_view host = listen.substr(0, colon);
  const absl::string_view port = listen.substr(colon + 1);
  absl::ConsumePrefix(&host, "[");
  absl::ConsumeSuffix(&host, "]");
  HostPort out;
  out.host = std::string(host);
  if (out.host.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "metrics address '%s' has no host; use HOST:PORT", listen));
  }
  if (!absl::SimpleAtoi(port, &out.port) || out.port < 0 || out.port > 65535) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "metrics address '%s' has a bad port; ports are 0..65535", listen));
  }
  return out;
}

// A non-blocking listening socket on `where`; its bound port in `port`.
absl::StatusOr<int> Listen(const HostPort& where, const std::string& listen,
                           int* port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(where.port);
  const auto unavailable = [&listen] {
    return absl::UnavailableError(absl::StrFormat(
        "cannot listen for metrics on %s (address in use, or not an address "
        "of this machine)",
        listen));
  };
  if (getaddrinfo(where.host.c_str(), service.c_str(), &hints, &found) != 0) {
    return unavailable();
  }
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                a->ai_protocol);
    if (fd < 0) continue;
    // SO_REUSEADDR for a quick restart; not SO_REUSEPORT, which would let
    // a second process bind the same port and silently share the scrapes.
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 ||
        ::listen(fd, SOMAXCONN) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) return unavailable();
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  *port = bound.ss_family == AF_INET6
              ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
              : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return fd;
}

absl::string_view Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 413:
      return "Content Too Large";
    case 431:
      return "Request Header Fields Too Large";
    default:
      return "Internal Server Error";
  }
}

std::string Answer(int status, absl::string_view content_type,
                   absl::string_view body, bool head) {
  std::string out = absl::StrFormat(
      "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
      "Connection: close\r\n\r\n",
      status, Reason(status), content_type, body.size());
  if (!head) out.append(body.data(), body.size());
  return out;
}

std::string PlainAnswer(int status, absl::string_view text, bool head) {
  return Answer(status, "text/plain; charset=utf-8", absl::StrCat(text, "\n"),
                head);
}

}  // namespace

class MetricsServer::Loop {
 public:
  Loop(int listen_fd, int wake_fd, Render render, Render page)
      : listen_fd_(listen_fd),
        wake_fd_(wake_fd),
        render_(std::move(render)),
        page_(std::move(page)) {}

  ~Loop() {
    for (Connection& c : connections_) close(c.fd);
    close(listen_fd_);
    close(wake_fd_);
  }

  void RequestStop() {
    stopping_.store(true);
    const uint64_t one = 1;
    // An eventfd's counter cannot overflow from one write per Stop.
    (void)!write(wake_fd_, &one, sizeof(one));
  }

  void Run() {
    std::vector<pollfd> polled;
    std::vector<std::list<Connection>::iterator> polled_connections;
    while (!stopping_.load()) {
      const absl::Time now = absl::Now();
      polled.clear();
      polled_connections.clear();
      polled.push_back({wake_fd_, POLLIN, 0});
      const bool accepting =
          now >= accept_paused_until_ &&
          (static_cast<int>(connections_.size()) < kMaxConnections ||
           OldestReading() != connections_.end());
      if (accepting) polled.push_back({listen_fd_, POLLIN, 0});
      absl::Time next = now + absl::Seconds(1);
      if (!accepting && accept_paused_until_ > now) {
        next = std::min(next, accept_paused_until_);
      }
      for (auto it = connections_.begin(); it != connections_.end(); ++it) {
        polled.push_back({it->fd,
                          static_cast<short>(
                              it->state == State::kWriting ? POLLOUT : POLLIN),
                          0});
        polled_connections.push_back(it);
        next = std::min(next, it->deadline);
      }
      const int timeout_ms = static_cast<int>(std::clamp<int64_t>(
          absl::ToInt64Milliseconds(next - now) + 1, 0, 1000));
      if (poll(polled.data(), polled.size(), timeout_ms) < 0 &&
          errno != EINTR) {
        LogWarning("metrics server: poll failed",
                   {{"error", std::strerror(errno)}});
        absl::SleepFor(absl::Milliseconds(100));
        continue;
      }
      if (stopping_.load()) break;
      const size_t first_connection = accepting ? 2 : 1;
      const absl::Time after = absl::Now();
      for (size_t i = 0; i < polled_connections.size(); ++i) {
        const short revents = polled[first_connection + i].revents;
        Connection& c = *polled_connections[i];
        if (revents != 0) Serve(c, revents, after);
        if (c.state != State::kClosed && after >= c.deadline) {
          c.state = State::kClosed;  // too slow: sending, reading or gone
        }
      }
      for (auto it = connections_.begin(); it != connections_.end();) {
        if (it->state == State::kClosed) {
          close(it->fd);
          it = connections_.erase(it);
        } else {
          ++it;
        }
      }
      if (accepting && (polled[1].revents & POLLIN) != 0) Accept(after);
    }
  }

 private:
  enum class State { kReading, kWriting, kLingering, kClosed };

  struct Connection {
    int fd = -1;
    State state = State::kReading;
    absl::Time opened;
    absl::Time deadline;
    std::string in;   // the request as far as it came
    std::string out;  // the answer
    size_t written = 0;
    size_t discarded = 0;
  };

  std::list<Connection>::iterator OldestReading() {
    auto oldest = connections_.end();
    for (auto it = connections_.begin(); it != connections_.end(); ++it) {
      if (it->state == State::kReading &&
          (oldest == connections_.end() || it->opened < oldest->opened)) {
        oldest = it;
      }
    }
    return oldest;
  }

  void Accept(absl::Time now) {
    while (true) {
      if (static_cast<int>(connections_.size()) >= kMaxConnections) {
        auto oldest = OldestReading();
        if (oldest == connections_.end()) return;
        close(oldest->fd);
        connections_.erase(oldest);
      }
      const int fd =
          accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
            errno == ENOMEM) {
          // The connection waits in the backlog; accepting resumes soon.
          accept_paused_until_ = now + kAcceptPause;
          if (now >= next_fd_warning_) {
            next_fd_warning_ = now + absl::Minutes(1);
            LogWarning(
                "metrics server: cannot accept a connection; accepting "
                "again in a moment",
                {{"error", std::strerror(errno)}});
          }
        }
        return;  // EAGAIN: none left; others (a client gone): next poll
      }
      Connection& c = connections_.emplace_back();
      c.fd = fd;
      c.opened = now;
      c.deadline = now + kRequestDeadline;
    }
  }

  void Serve(Connection& c, short revents, absl::Time now) {
    if (c.state == State::kWriting) {
      if ((revents & (POLLOUT | POLLERR | POLLHUP)) != 0) Write(c, now);
      return;
    }
    char buffer[4096];
    const ssize_t n = recv(c.fd, buffer, sizeof(buffer), 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      c.state = State::kClosed;  // gone, or done with the answer
      return;
    }
    if (n < 0) return;
    if (c.state == State::kLingering) {
      c.discarded += static_cast<size_t>(n);
      if (c.discarded > kMaxLingerBytes) c.state = State::kClosed;
      return;
    }
    c.in.append(buffer, static_cast<size_t>(n));
    size_t end = c.in.find("\r\n\r\n");
    size_t head_length = end == std::string::npos ? end : end + 4;
    if (end == std::string::npos) {
      end = c.in.find("\n\n");
      head_length = end == std::string::npos ? end : end + 2;
    }
    if (end == std::string::npos) {
      if (c.in.size() > kMaxRequestBytes) {
        StartAnswer(c,
                    PlainAnswer(431,
                                absl::StrFormat("a request is at most %d bytes",
                                                kMaxRequestBytes),
                                false),
                    now);
      }
      return;
    }
    StartAnswer(c, Respond(absl::string_view(c.in).substr(0, head_length)),
                now);
  }

  // The answer to one request's head (its request line and headers).
  std::string Respond(absl::string_view head) {
    std::vector<absl::string_view> lines =
        absl::StrSplit(head, absl::ByAnyChar("\r\n"), absl::SkipEmpty());
    if (lines.empty()) return PlainAnswer(400, "an empty request", false);
    std::vector<absl::string_view> request_line =
        absl::StrSplit(lines[0], ' ', absl::SkipEmpty());
    if (request_line.size() != 3 ||
        !absl::StartsWith(request_line[2], "HTTP/1.")) {
      return PlainAnswer(400, "not an HTTP/1.x request line", false);
    }
    const absl::string_view method = request_line[0];
    absl::string_view path = request_line[1];
    const bool head_only = method == "HEAD";
    for (size_t i = 1; i < lines.size(); ++i) {
      const size_t colon = lines[i].find(':');
      if (colon == absl::string_view::npos) continue;
      const std::string name = absl::AsciiStrToLower(
          absl::StripAsciiWhitespace(lines[i].substr(0, colon)));
      const absl::string_view value =
          absl::StripAsciiWhitespace(lines[i].substr(colon + 1));
      if ((name == "content-length" && value != "0") ||
          name == "transfer-encoding") {
        // Never read: nothing served here takes a body.
        return PlainAnswer(413, "requests with a body are not accepted",
                           head_only);
      }
    }
    path = path.substr(0, path.find('?'));
    const bool get = method == "GET" || head_only;
    if (get && path == "/metrics") {
      return Rendered(render_, kPrometheusContentType, head_only);
    }
    if (get && path == "/" && page_ != nullptr) {
      return Rendered(page_, kStatusPageContentType, head_only);
    }
    return PlainAnswer(
        404,
        absl::StrCat("no such page: ", method, " ", path,
                     "; metrics are at GET /metrics",
                     page_ != nullptr ? ", the status page at GET /" : ""),
        head_only);
  }

  static std::string Rendered(const Render& render,
                              absl::string_view content_type, bool head) {
    absl::StatusOr<std::string> body = render();
    if (!body.ok()) return PlainAnswer(500, body.status().ToString(), head);
    return Answer(200, content_type, *body, head);
  }

  void StartAnswer(Connection& c, std::string answer, absl::Time now) {
    c.in.clear();
    c.out = std::move(answer);
    c.written = 0;
    c.state = State::kWriting;
    c.deadline = now + kResponseDeadline;
    Write(c, now);
  }

  void Write(Connection& c, absl::Time now) {
    while (c.written < c.out.size()) {
      const ssize_t n = send(c.fd, c.out.data() + c.written,
                             c.out.size() - c.written, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) return;
        c.state = State::kClosed;
        return;
      }
      c.written += static_cast<size_t>(n);
    }
    shutdown(c.fd, SHUT_WR);
    c.out.clear();
    c.state = State::kLingering;
    c.deadline = now + kLinger;
  }

  const int listen_fd_;
  const int wake_fd_;
  const Render render_;
  const Render page_;
  std::atomic<bool> stopping_{false};
  // Only the serving thread touches these.
  std::list<Connection> connections_;
  absl::Time accept_paused_until_ = absl::InfinitePast();
  absl::Time next_fd_warning_ = absl::InfinitePast();
};

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& listen, Render render, Render page) {
  absl::StatusOr<HostPort> where = ParseListen(listen);
  if (!where.ok()) return where.status();
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  absl::StatusOr<int> listen_fd = Listen(*where, listen, &server->port_);
  if (!listen_fd.ok()) return listen_fd.status();
  const int wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0) {
    close(*listen_fd);
    return absl::UnavailableError(
        absl::StrFormat("the metrics server on %s cannot start: eventfd: %s",
                        listen, std::strerror(errno)));
  }
  const bool ipv6 = where->host.find(':') != std::string::npos;
  server->address_ = ipv6 ? absl::StrCat("[", where->host, "]:", server->port_)
                          : absl::StrCat(where->host, ":", server->port_);
  server->loop_ = std::make_unique<Loop>(*listen_fd, wake_fd, std::move(render),
                                         std::move(page));
  server->thread_ = std::thread([loop = server->loop_.get()] { loop->Run(); });
  return server;
}

MetricsServer::~MetricsServer() { Stop(); }

void MetricsServer::Stop() {
  if (loop_ != nullptr) loop_->RequestStop();
  if (thread_.joinable()) thread_.join();
  loop_.reset();  // closes the sockets: the port is free once Stop returns
}

}  // namespace node
}  // namespace tally
