// MetricsServer: a small HTTP server for Prometheus — GET /metrics answers
// the node's metrics (node/observe/metrics.h) as text/plain; version=0.0.4 —
// and for people: GET / answers the status page (node/observe/status_page.h) as
// text/html when one is given. Anything else (another path or method) is
// 404.
//
//   absl::StatusOr<std::unique_ptr<MetricsServer>> server =
//       MetricsServer::Start("127.0.0.1:9400", [&] { return Render(); },
//                            [&] { return RenderPage(); });
//   LogInfo((*server)->address());  // with the bound port, for ...:0
//   (*server)->Stop();
//
// Plain HTTP only: metrics carry names and counts, not rows, but an
// operator should still keep them off untrusted networks; NodeConfig refuses
// a non-loopback address without --insecure. Scrapes are answered on the
// server's own small thread pool (cpp-httplib), each calling `render`.
//
// Thread-safe. Stop() (or the destructor) waits for scrapes in flight, so
// what `render` refers to may be destroyed once it returns.
#ifndef TALLY_NODE_OBSERVE_METRICS_SERVER_H_
#define TALLY_NODE_OBSERVE_METRICS_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace tally {
namespace node {

class MetricsServer {
 public:
  // Produces the body of one scrape; an error answers 500 with its message.
  using Render = std::function<absl::StatusOr<std::string>()>;

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

  // Stops accepting and waits for the serving thread. Idempotent.
  void Stop();

 private:
  MetricsServer() = default;

  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::string address_;
  int port_ = 0;
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_OBSERVE_METRICS_SERVER_H_
