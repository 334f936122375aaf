// The metrics server: what it serves, and that clients that misbehave
// (slow, idle, huge bodies, many ranges, file descriptors used up) never keep
// a scrape out or a Stop waiting.
#include "node/observe/metrics_server.h"

#include <httplib.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tally {
namespace node {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(MetricsServer, ServesMetricsOnAnyPortAnd404Elsewhere) {
  int scrapes = 0;
  auto server = MetricsServer::Start("127.0.0.1:0", [&scrapes] {
    ++scrapes;
    return absl::StatusOr<std::string>(absl::StrCat("x_total ", scrapes, "\n"));
  });
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  EXPECT_EQ((*server)->address(),
            absl::StrCat("127.0.0.1:", (*server)->port()));

  httplib::Client client("127.0.0.1", (*server)->port());
  httplib::Result first = client.Get("/metrics");
  ASSERT_TRUE(first) << httplib::to_string(first.error());
  EXPECT_EQ(first->status, 200);
  EXPECT_EQ(first->body, "x_total 1\n");
  EXPECT_EQ(first->get_header_value("Content-Type"),
            "text/plain; version=0.0.4; charset=utf-8");
  httplib::Result second = client.Get("/metrics");
  ASSERT_TRUE(second);
  EXPECT_EQ(second->body, "x_total 2\n");

  httplib::Result other = client.Get("/");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
  EXPECT_THAT(other->body, HasSubstr("/metrics"));
  httplib::Result post = client.Post("/metrics", "", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 404);
  EXPECT_THAT(post->body, HasSubstr("POST /metrics"));
  EXPECT_EQ(scrapes, 2);
  (*server)->Stop();
  EXPECT_FALSE(client.Get("/metrics"));
}

TEST(MetricsServer, RenderErrorAnswers500) {
  auto server = MetricsServer::Start("127.0.0.1:0", [] {
    return absl::StatusOr<std::string>(absl::UnavailableError("store closed"));
  });
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", (*server)->port());
  httplib::Result r = client.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500);
  EXPECT_THAT(r->body, HasSubstr("store closed"));
}

TEST(MetricsServer, BadAddressesAreRefused) {
  auto render = [] { return absl::StatusOr<std::string>(""); };
  for (const char* bad : {"9400", "127.0.0.1:x", ":9400", "127.0.0.1:70000"}) {
    EXPECT_EQ(MetricsServer::Start(bad, render).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  auto first = MetricsServer::Start("127.0.0.1:0", render);
  ASSERT_TRUE(first.ok());
  // The port is taken.
  auto second = MetricsServer::Start((*first)->address(), render);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr((*first)->address()));
}

TEST(MetricsServer, StopRightAfterStartReturns) {
  for (int i = 0; i < 20; ++i) {
    auto server = MetricsServer::Start(
        "127.0.0.1:0", [] { return absl::StatusOr<std::string>(""); });
    ASSERT_TRUE(server.ok());
    (*server)->Stop();
    (*server)->Stop();  // idempotent
  }
}

// A raw client: a blocking socket to 127.0.0.1:`port`; -1 when refused.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  timeval two_seconds{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &two_seconds, sizeof(two_seconds));
  return fd;
}

// Sends `request` on a new connection and reads the answer until the
// server closes (or 2 s pass).
std::string Exchange(int port, const std::string& request) {
  const int fd = Connect(port);
  if (fd < 0) return "connect failed";
  send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string answer;
  char buffer[65536];
  ssize_t n;
  while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) {
    answer.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return answer;
}

std::string Body(const std::string& answer) {
  const size_t end = answer.find("\r\n\r\n");
  return end == std::string::npos ? "" : answer.substr(end + 4);
}

absl::StatusOr<std::unique_ptr<MetricsServer>> StartServer(
    const std::string& body) {
  return MetricsServer::Start(
      "127.0.0.1:0", [body] { return absl::StatusOr<std::string>(body); },
      [] { return absl::StatusOr<std::string>("<html>page</html>"); });
}

// Before: cpp-httplib's two serving threads each held a connection while its
// client sent the request a byte at a time, so two such clients froze / and
// /metrics, and Stop (SIGTERM) waited for them for minutes.
TEST(MetricsServer, SlowAndIdleClientsDoNotKeepAScrapeOutOrStopWaiting) {
  auto server = StartServer("x 1\n");
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  std::vector<int> slow;
  for (int i = 0; i < 2 * MetricsServer::kMaxConnections; ++i) {
    const int fd = Connect(port);
    ASSERT_GE(fd, 0);
    // Half send the start of a request, half nothing at all.
    if (i % 2 == 0) send(fd, "GET /metrics HT", 15, MSG_NOSIGNAL);
    slow.push_back(fd);
  }
  for (int round = 0; round < 3; ++round) {
    for (int fd : slow) send(fd, "T", 1, MSG_NOSIGNAL);  // a trickle
    const absl::Time start = absl::Now();
    const std::string answer =
        Exchange(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_THAT(answer, StartsWith("HTTP/1.1 200 OK\r\n"));
    EXPECT_EQ(Body(answer), "x 1\n");
    EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  }
  const absl::Time stop = absl::Now();
  (*server)->Stop();
  EXPECT_LT(absl::Now() - stop, absl::Seconds(2));
  for (int fd : slow) close(fd);
}

// Before: a 400 MB body was read and buffered whole.
TEST(MetricsServer, ARequestWithABodyIsRefusedWithoutReadingIt) {
  auto server = StartServer("x 1\n");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string answer =
      Exchange((*server)->port(),
               "POST /metrics HTTP/1.1\r\nContent-Length: 400000000\r\n\r\n" +
                   std::string(100000, 'b'));
  EXPECT_THAT(answer, StartsWith("HTTP/1.1 413 "));
  EXPECT_THAT(Body(answer), HasSubstr("not accepted"));
  EXPECT_THAT(Exchange((*server)->port(),
                       "GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
              StartsWith("HTTP/1.1 413 "));
}

// Before: a 2,000-part Range header got a 30 MB multipart answer and held a
// serving thread for a minute. Ranges are ignored: the answer is whole.
TEST(MetricsServer, RangesAreIgnored) {
  const std::string metrics(5000, 'm');
  auto server = StartServer(metrics);
  ASSERT_TRUE(server.ok()) << server.status();
  std::string ranges = "bytes=0-0";
  for (int i = 1; i < 2000; ++i)
    absl::StrAppend(&ranges, ",", i, "-", i + 3000);
  const std::string answer = Exchange(
      (*server)->port(),
      absl::StrCat("GET /metrics HTTP/1.1\r\nRange: ", ranges, "\r\n\r\n"));
  EXPECT_THAT(answer, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_EQ(Body(answer), metrics);
}

TEST(MetricsServer, OversizedRequestsAndHeadAreAnswered) {
  auto server = StartServer("x 1\n");
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  EXPECT_THAT(
      Exchange(port, "GET /metrics HTTP/1.1\r\nX: " +
                         std::string(MetricsServer::kMaxRequestBytes, 'h')),
      StartsWith("HTTP/1.1 431 "));
  const std::string head = Exchange(port, "HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_THAT(head, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(head, HasSubstr("Content-Length: 4\r\n"));
  EXPECT_EQ(Body(head), "");
  EXPECT_EQ(Body(Exchange(port, "GET /?refresh=5 HTTP/1.0\r\n\r\n")),
            "<html>page</html>");
  EXPECT_THAT(Exchange(port, "garbage\r\n\r\n"), StartsWith("HTTP/1.1 400 "));
}

// Running out of file descriptors (here: a low limit, used up by idle
// connections) pauses accepting; once descriptors are free again, scrapes
// are answered. The server never stops listening.
TEST(MetricsServer, RunningOutOfFileDescriptorsOnlyPausesAccepting) {
  auto server = StartServer("x 1\n");
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  const int probe = dup(0);
  ASSERT_GE(probe, 0);
  close(probe);
  rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(probe + 12);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> clients;
  for (int i = 0; i < 12; ++i) {
    const int fd = Connect(port);  // the server's side takes one each
    if (fd >= 0) clients.push_back(fd);
  }
  absl::SleepFor(absl::Milliseconds(300));  // the server hit the limit
  for (int fd : clients) close(fd);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  std::string answer;
  for (int attempt = 0; attempt < 20; ++attempt) {
    answer = Exchange(port, "GET /metrics HTTP/1.1\r\n\r\n");
    if (absl::StartsWith(answer, "HTTP/1.1 200")) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_THAT(answer, StartsWith("HTTP/1.1 200 OK\r\n"));
}

}  // namespace
}  // namespace node
}  // namespace tally
