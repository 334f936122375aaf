// TcpProxy: a loopback TCP forwarder that a test can cut and heal, to play
// a network link that fails.
//
//   auto proxy = TcpProxy::Start("127.0.0.1:7401");   // the real target
//   // point a client (e.g. a tallyd --peer) at (*proxy)->address()
//   (*proxy)->Cut(TcpProxy::CutMode::kReset);  // link down
//   (*proxy)->Heal();                          // link up again
//
// A long link: Start(target, absl::Milliseconds(25)) holds every byte 25 ms
// in each direction before forwarding it (the bench's `wan` scenario), in
// the order read. A narrow one: with `bytes_per_second` too, each
// direction's bytes (of all connections together) also take their size
// over that rate to pass, one chunk after another, as on one shared link.
// bytes_up() and bytes_down() count what crossed each way.
//
// Two ways to fail a link:
//   - kReset: every open connection is closed (both sides see a reset or
//     an end of stream at once) and new connections are accepted and
//     closed immediately, as when a router in between refuses them.
//   - kBlackhole: nothing is forwarded any more and nothing is closed: open
//     connections go silent, as on a partition where no packet (and no
//     reset) gets through; new connections are accepted and never served.
//     Connections silenced this way stay silent after Heal() (their state
//     is lost, as in a NAT that forgot them); new ones are served again.
//
// Thread-safe. Runs one accepting thread and two threads per connection;
// the destructor closes everything and joins them.
#ifndef TALLY_SUPPORT_TCP_PROXY_H_
#define TALLY_SUPPORT_TCP_PROXY_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tally {
namespace testing {

class TcpProxy {
 public:
  enum class CutMode { kReset, kBlackhole };

  // Listens on 127.0.0.1 at a free port and forwards every connection to
  // `target` ("HOST:PORT", an IPv4 address), each direction's bytes held
  // `one_way_delay` first. Returns an error if it cannot listen, the target
  // is malformed or the delay is negative.
  static absl::StatusOr<std::unique_ptr<TcpProxy>> Start(
      const std::string& target,
      absl::Duration one_way_delay = absl::ZeroDuration(),
      double bytes_per_second = 0);
  ~TcpProxy();
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  // "127.0.0.1:PORT", where clients connect.
  const std::string& address() const { return address_; }

  void Cut(CutMode mode) ABSL_LOCKS_EXCLUDED(mu_);
  void Heal() ABSL_LOCKS_EXCLUDED(mu_);

  // Connections accepted so far (refused ones included).
  int accepted() const { return accepted_.load(); }
  // Bytes forwarded so far: client to target, and target to client.
  uint64_t bytes_up() const { return bytes_[0].load(); }
  uint64_t bytes_down() const { return bytes_[1].load(); }

 private:
  struct Connection {
    int client_fd = -1;
    int target_fd = -1;
    // Set when the connection is cut: its pumps stop forwarding.
    std::atomic<bool> silenced{false};
    std::thread up;    // client -> target
    std::thread down;  // target -> client
  };

  TcpProxy() = default;
  void AcceptLoop();
  void Pump(Connection* c, int from, int to);
  // Pump with one_way_delay_ > 0: each chunk read is written once it has
  // been held that long.
  void DelayedPump(Connection* c, int from, int to);
  // Closes both sockets' directions so that the pumps end.
  static void Shutdown(Connection* c);

  // Constant after Start().
  int listen_fd_ = -1;
  std::string address_;
  std::string target_host_;
  int target_port_ = 0;
  absl::Duration one_way_delay_;
  double bytes_per_second_ = 0;                  // 0: unlimited
  std::atomic<uint64_t> bytes_[2] = {{0}, {0}};  // up, down
  // When each direction's link is free again (bytes_per_second_ > 0).
  absl::Mutex link_mu_;
  std::chrono::steady_clock::time_point link_free_[2] ABSL_GUARDED_BY(link_mu_);

  std::thread acceptor_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> accepted_{0};

  absl::Mutex mu_;
  bool cut_ ABSL_GUARDED_BY(mu_) = false;
  CutMode mode_ ABSL_GUARDED_BY(mu_) = CutMode::kReset;
  std::vector<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  // Sockets accepted while black-holed: held open, never served.
  std::vector<int> held_fds_ ABSL_GUARDED_BY(mu_);
};

}  // namespace testing
}  // namespace tally

#endif  // TALLY_SUPPORT_TCP_PROXY_H_
