// ListenerWatch: a listening socket nobody accepts on is found stuck; one
// that accepts is not.
#include "node/rpc/listener_watch.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace tally {
namespace node {
namespace {

TEST(AcceptQueueLength, ReadsTheListenSocketOfThePort) {
  const char* text =
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when "
      "retrnsmt   uid  timeout inode\n"
      "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000003 00:00000000 "
      "00000000     0        0 1 1 0000000000000000 100 0 0 10 0\n"
      "   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 "
      "00000000     0        0 2 1 0000000000000000 20 4 30 10 -1\n"
      "   2: 00000000:1F91 00000000:0000 0A 00000000:00000000 00:00000000 "
      "00000000     0        0 3 1 0000000000000000 100 0 0 10 0\n";
  EXPECT_EQ(AcceptQueueLength(text, 0x1F90), 3u);
  EXPECT_EQ(AcceptQueueLength(text, 0x1F91), 0u);
  EXPECT_EQ(AcceptQueueLength(text, 0x1F92), std::nullopt);
  EXPECT_EQ(AcceptQueueLength("", 80), std::nullopt);
}

// A listening socket on a free loopback port; its port in `port`.
int ListenOnLoopback(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) ||
      listen(fd, 16) != 0) {
    return -1;
  }
  socklen_t length = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length);
  *port = ntohs(addr.sin_port);
  return fd;
}

TEST(ListenerWatch, AListenerThatDoesNotAcceptIsStuck) {
  int port = 0;
  const int fd = ListenOnLoopback(&port);
  ASSERT_GE(fd, 0);
  absl::Notification stuck;
  auto watch = ListenerWatch::Start(port, absl::Milliseconds(50), 3,
                                    [&stuck] { stuck.Notify(); });
  EXPECT_TRUE(stuck.WaitForNotificationWithTimeout(absl::Seconds(5)));
  watch.reset();
  close(fd);
}

TEST(ListenerWatch, AListenerThatAcceptsIsNot) {
  int port = 0;
  const int fd = ListenOnLoopback(&port);
  ASSERT_GE(fd, 0);
  std::atomic<bool> done{false};
  std::thread acceptor([fd, &done] {
    while (!done.load()) {
      const int c = accept(fd, nullptr, nullptr);
      if (c >= 0) close(c);
    }
  });
  absl::Notification stuck;
  auto watch = ListenerWatch::Start(port, absl::Milliseconds(50), 3,
                                    [&stuck] { stuck.Notify(); });
  EXPECT_FALSE(stuck.WaitForNotificationWithTimeout(absl::Milliseconds(800)));
  watch.reset();
  done.store(true);
  shutdown(fd, SHUT_RDWR);  // wakes the accept
  acceptor.join();
  close(fd);
}

}  // namespace
}  // namespace node
}  // namespace tally
