// DelayProxy: a loopback TCP forwarder that holds every byte for a fixed
// time in each direction, to play a long link (the `wan` scenario).
//
//   auto proxy = DelayProxy::Start("127.0.0.1:7401", absl::Milliseconds(25));
//   // point a client at (*proxy)->address(): every round trip through it
//   // takes 2 x 25 ms more
//
// Bytes are forwarded in the order read, each chunk when its delay is up;
// bandwidth is loopback's. A connection ends in one direction when its
// source ends and the bytes still held have been delivered.
//
// Thread-safe. One accepting thread and two threads per connection; the
// destructor closes everything and joins them.
#ifndef TALLY_TOOLS_BENCH_DELAY_PROXY_H_
#define TALLY_TOOLS_BENCH_DELAY_PROXY_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tally {
namespace bench {

class DelayProxy {
 public:
  // Listens on 127.0.0.1 at a free port and forwards every connection to
  // `target` ("HOST:PORT", an IPv4 address), delaying each direction by
  // `one_way`. Returns an error if it cannot listen or the target is
  // malformed.
  static absl::StatusOr<std::unique_ptr<DelayProxy>> Start(
      const std::string& target, absl::Duration one_way);
  ~DelayProxy();
  DelayProxy(const DelayProxy&) = delete;
  DelayProxy& operator=(const DelayProxy&) = delete;

  // "127.0.0.1:PORT", where clients connect.
  const std::string& address() const { return address_; }

 private:
  struct Connection {
    int client_fd = -1;
    int target_fd = -1;
    std::thread up;    // client -> target
    std::thread down;  // target -> client
  };

  DelayProxy() = default;
  void AcceptLoop();
  void Pump(int from, int to);

  // Constant after Start().
  int listen_fd_ = -1;
  std::string address_;
  std::string target_host_;
  int target_port_ = 0;
  absl::Duration one_way_;

  std::thread acceptor_;
  std::atomic<bool> stopping_{false};

  absl::Mutex mu_;
  std::vector<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
};

}  // namespace bench
}  // namespace tally

#endif  // TALLY_TOOLS_BENCH_DELAY_PROXY_H_
