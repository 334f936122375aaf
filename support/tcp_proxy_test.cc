#include "support/tcp_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace tally {
namespace testing {
namespace {

// A loopback server that echoes what its one connection sends, until the
// client ends it.
class EchoServer {
 public:
  EchoServer() {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(
        bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(listen_fd_, 4), 0);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    address_ = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));
    thread_ = std::thread([this] {
      const int fd = accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      char buffer[4096];
      for (ssize_t n; (n = read(fd, buffer, sizeof(buffer))) > 0;) {
        if (write(fd, buffer, static_cast<size_t>(n)) != n) break;
      }
      close(fd);
    });
  }
  ~EchoServer() {
    shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    close(listen_fd_);
  }
  const std::string& address() const { return address_; }

 private:
  int listen_fd_ = -1;
  std::string address_;
  std::thread thread_;
};

int Connect(const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  EXPECT_TRUE(absl::SimpleAtoi(address.substr(colon + 1), &port));
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  return fd;
}

// Sends `message` through `fd` and reads the echo; how long it took.
absl::Duration RoundTrip(int fd, const std::string& message,
                         std::string* echoed) {
  const absl::Time start = absl::Now();
  EXPECT_EQ(write(fd, message.data(), message.size()),
            static_cast<ssize_t>(message.size()));
  echoed->clear();
  char buffer[4096];
  while (echoed->size() < message.size()) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n <= 0) break;
    echoed->append(buffer, static_cast<size_t>(n));
  }
  return absl::Now() - start;
}

TEST(TcpProxy, ADelayedLinkHoldsEachDirectionAndKeepsTheBytesInOrder) {
  EchoServer echo;
  auto proxy = TcpProxy::Start(echo.address(), absl::Milliseconds(100));
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  const int fd = Connect((*proxy)->address());
  std::string message;
  for (int i = 0; i < 2000; ++i) absl::StrAppend(&message, i, ",");
  std::string echoed;
  // Both directions held 100 ms: a round trip takes 200 ms at least (a
  // lower bound, which load cannot break).
  EXPECT_GE(RoundTrip(fd, message, &echoed), absl::Milliseconds(200));
  EXPECT_EQ(echoed, message);
  close(fd);
}

TEST(TcpProxy, AnUndelayedLinkForwardsAndANegativeDelayIsRefused) {
  EchoServer echo;
  auto proxy = TcpProxy::Start(echo.address());
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  const int fd = Connect((*proxy)->address());
  std::string echoed;
  RoundTrip(fd, "hello", &echoed);
  EXPECT_EQ(echoed, "hello");
  close(fd);

  auto refused = TcpProxy::Start(echo.address(), absl::Milliseconds(-1));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("negative"), std::string::npos);
}

}  // namespace
}  // namespace testing
}  // namespace tally
