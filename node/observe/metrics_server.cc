#include "node/observe/metrics_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "node/observe/metrics.h"
#include "node/observe/status_page.h"

namespace tally {
namespace node {
namespace {

// Scrapes are rare and cheap: two threads serve them.
constexpr size_t kServingThreads = 2;

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

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& listen, Render render, Render page) {
  absl::StatusOr<HostPort> where = ParseListen(listen);
  if (!where.ok()) return where.status();

  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->server_ = std::make_unique<httplib::Server>();
  httplib::Server& http = *server->server_;
  http.new_task_queue = [] { return new httplib::ThreadPool(kServingThreads); };
  // One request per connection: Stop() never waits out a keep-alive.
  http.set_keep_alive_max_count(1);
  // cpp-httplib's default sets SO_REUSEPORT, which lets a second process
  // bind the same port and silently share the scrapes. SO_REUSEADDR alone
  // still allows a quick restart.
  http.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  http.Get("/metrics", [render = std::move(render)](const httplib::Request&,
                                                    httplib::Response& res) {
    absl::StatusOr<std::string> body = render();
    if (!body.ok()) {
      res.status = 500;
      res.set_content(absl::StrCat(body.status().ToString(), "\n"),
                      "text/plain; charset=utf-8");
      return;
    }
    res.set_content(std::move(*body), std::string(kPrometheusContentType));
  });
  const bool has_page = page != nullptr;
  if (has_page) {
    http.Get("/", [page = std::move(page)](const httplib::Request&,
                                           httplib::Response& res) {
      absl::StatusOr<std::string> body = page();
      if (!body.ok()) {
        res.status = 500;
        res.set_content(absl::StrCat(body.status().ToString(), "\n"),
                        "text/plain; charset=utf-8");
        return;
      }
      res.set_content(std::move(*body), std::string(kStatusPageContentType));
    });
  }
  http.set_error_handler(
      [has_page](const httplib::Request& req, httplib::Response& res) {
        if (res.status == 404) {
          res.set_content(
              absl::StrCat("no such page: ", req.method, " ", req.path,
                           "; metrics are at GET /metrics",
                           has_page ? ", the status page at GET /" : "", "\n"),
              "text/plain; charset=utf-8");
        }
      });

  if (where->port == 0) {
    server->port_ = http.bind_to_any_port(where->host);
  } else if (http.bind_to_port(where->host, where->port)) {
    server->port_ = where->port;
  }
  if (server->port_ <= 0) {
    return absl::UnavailableError(absl::StrFormat(
        "cannot listen for metrics on %s (address in use, or not an address "
        "of this machine)",
        listen));
  }
  const bool ipv6 = where->host.find(':') != std::string::npos;
  server->address_ = ipv6 ? absl::StrCat("[", where->host, "]:", server->port_)
                          : absl::StrCat(where->host, ":", server->port_);

  auto finished = std::make_shared<std::atomic<bool>>(false);
  server->thread_ = std::thread([&http, finished] {
    http.listen_after_bind();
    finished->store(true);
  });
  // stop() only works once the accept loop runs; wait for it, so that a
  // Stop() right after Start() cannot leave the thread serving forever.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!http.is_running() && !finished->load() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  if (!http.is_running()) {
    server->Stop();
    return absl::UnavailableError(
        absl::StrFormat("the metrics server on %s did not start", listen));
  }
  return server;
}

MetricsServer::~MetricsServer() { Stop(); }

void MetricsServer::Stop() {
  if (server_ != nullptr) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace node
}  // namespace tally
