// A running tallyd's metrics port, and one scrape of it, for the tests that
// read /metrics from real nodes (cluster, watching, control, the status
// page in a browser).
//
//   const int port = MetricsPort(*node);  // 0 if it logged none
//   EXPECT_THAT(Scrape(port), HasSubstr("tally_sessions_total"));
#ifndef TALLY_TESTS_NODE_METRICS_H_
#define TALLY_TESTS_NODE_METRICS_H_

#include <string>

#include "support/process.h"

namespace tally {
namespace testing {

// The port of "metrics on http://127.0.0.1:PORT/metrics" in the node's log;
// 0 when the node logged no such line.
int MetricsPort(const NodeProcess& node);

// The body of GET /metrics on 127.0.0.1:`port`, or "scrape failed: WHY".
std::string Scrape(int port);

}  // namespace testing
}  // namespace tally

#endif  // TALLY_TESTS_NODE_METRICS_H_
