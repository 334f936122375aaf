#include "tests/node_metrics.h"

#include <httplib.h>

#include <regex>

namespace tally {
namespace testing {

int MetricsPort(const NodeProcess& node) {
  static const std::regex kMetrics(
      "metrics on http://127\\.0\\.0\\.1:(\\d+)/metrics");
  std::smatch m;
  const std::string log = node.Log();
  if (!std::regex_search(log, m, kMetrics)) return 0;
  return std::stoi(m[1]);
}

std::string Scrape(int port) {
  httplib::Client client("127.0.0.1", port);
  httplib::Result r = client.Get("/metrics");
  if (!r) return "scrape failed: " + httplib::to_string(r.error());
  return r->body;
}

}  // namespace testing
}  // namespace tally
