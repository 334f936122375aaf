// ListenerWatch: notices a listening TCP port that no longer accepts.
//
// gRPC (1.51) stops accepting on a listening socket for good after an
// accept error it does not retry, such as running out of file descriptors
// ("Failed accept4: Too many open files"): the socket stays open, clients'
// connections wait in its accept queue and time out, and nothing else in
// the node notices. The watch reads the kernel's count of connections
// waiting in the port's accept queue (/proc/net/tcp and tcp6, the rx_queue
// of the LISTEN socket) every `interval`, after connecting to the port
// itself once so that a dead listener shows. A listener that accepts
// empties its queue within milliseconds; one found with connections
// waiting `checks` times in a row is stuck, and `stuck` is called, once.
//
//   auto watch = ListenerWatch::Start(port, absl::Seconds(5), 6, [] {
//     LogError("the listener is stuck");
//   });
//
// Thread-safe; the destructor stops the watch (and waits for a `stuck` in
// progress).
#ifndef TALLY_NODE_RPC_LISTENER_WATCH_H_
#define TALLY_NODE_RPC_LISTENER_WATCH_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace tally {
namespace node {

class ListenerWatch {
 public:
  static std::unique_ptr<ListenerWatch> Start(int port, absl::Duration interval,
                                              int checks,
                                              std::function<void()> stuck);
  ~ListenerWatch();
  ListenerWatch(const ListenerWatch&) = delete;
  ListenerWatch& operator=(const ListenerWatch&) = delete;

 private:
  ListenerWatch() = default;
  void Run(int port, absl::Duration interval, int checks,
           const std::function<void()>& stuck);

  absl::Notification stop_;
  std::thread thread_;
};

// The number of connections waiting to be accepted on the LISTEN socket of
// `port`, from the text of /proc/net/tcp or /proc/net/tcp6 (the largest if
// several addresses listen on it); nullopt when no LISTEN socket has that
// port. Pure: for tests.
std::optional<uint64_t> AcceptQueueLength(absl::string_view proc_net_tcp,
                                          int port);

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_RPC_LISTENER_WATCH_H_
