// MetricsServer: a small HTTP/1.1 server for Prometheus — GET /metrics
// answers the node's metrics (node/observe/metrics.h) as text/plain;
// version=0.0.4 — and for people: GET / answers the status page
// (node/observe/status_page.h) as text/html when one is given. HEAD is
// answered as GET without the body. Anything else (another path or method)
// is 404.
//
//   absl::StatusOr<std::unique_ptr<MetricsServer>> server =
//       MetricsServer::Start("127.0.0.1:9400", [&] { return Render(); },
//                            [&] { return RenderPage(); });
//   LogInfo((*server)->address());  // with the bound port, for ...:0
//   (*server)->Stop();
//
// Plain HTTP only: metrics carry names and counts, not rows, but an
// operator should still keep them off untrusted networks; NodeConfig refuses
// a non-loopback address without --insecure.
//
// Built to stay up for the scrapes when clients misbehave, since the node's
// health is read from it: one thread serves every connection without
// blocking on any (non-blocking sockets and poll), one request per
// connection. A request must arrive whole within kRequestDeadline and fit
// in kMaxRequestBytes; a request with a body is refused (413) without
// reading it; Range headers are ignored (the answer is always whole); an
// answer the client does not read within kResponseDeadline is dropped. At
// most kMaxConnections are open; one more closes the oldest that is still
// sending its request, so idle or trickling connections cannot keep a
// scrape out. Running out of file descriptors pauses accepting for a moment
// instead of ending the server. `render` runs on the serving thread.
//
// Thread-safe. Stop() (or the destructor) returns within a moment whatever
// the clients do, and once it returns `render` is not running and will not
// be called again.
#ifndef TALLY_NODE_OBSERVE_METRICS_SERVER_H_
#define TALLY_NODE_OBSERVE_METRICS_SERVER_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tally {
namespace node {

class MetricsServer {
 public:
  // Produces the body of one scrape; an error answers 500 with its message.
  using Render = std::function<absl::StatusOr<std::string>()>;

  static constexpr absl::Duration kRequestDeadline = absl::Seconds(5);
  static constexpr absl::Duration kResponseDeadline = absl::Seconds(10);
  static constexpr size_t kMaxRequestBytes = 16 * 1024;
  static constexpr int kMaxConnections = 32;

  // Binds `listen` ("HOST:PORT"; port 0 picks a free one) and starts
  // serving: `render` at GET /metrics, and `page` (HTML) at GET / when not
  // null. Returns kInvalidArgument for a malformed address and
  // kUnavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& listen, Render render, Render page = nullptr);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // "HOST:PORT" with the port bound.
  const std::string& address() const { return address_; }
  int port() const { return port_; }

  // Stops accepting, closes every connection and waits for the serving
  // thread. Idempotent.
  void Stop();

 private:
  class Loop;

  MetricsServer() = default;

  std::unique_ptr<Loop> loop_;
  std::thread thread_;
  std::string address_;
  int port_ = 0;
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_OBSERVE_METRICS_SERVER_H_
