// Metrics: a node's status in the Prometheus text exposition format
// (version 0.0.4), for GET /metrics (node/observe/metrics_server.h).
//
// The metrics are the StatusResponse that Admin.Status answers, rendered
// as metric families — one source of truth for `tally status` and for
// Prometheus, so the two never disagree. Every family has # HELP and
// # TYPE lines; counters end in `_total` and count since the node started
// (Prometheus handles the reset at a restart); gauges are current values.
// A family without samples (no peers, no subscribers) is left out. The
// families, their help and their samples are the rows of the status table
// (node/observe/status_fields.h), which also writes docs/reference/metrics.md.
//
//   v1::StatusResponse status;
//   TALLY_RETURN_IF_ERROR(CollectNodeStatus(store, status_sources, &status));
//   std::string body = RenderPrometheus(status);
//
// Label values are escaped as the format requires (backslash, double quote
// and newline); names of keyspaces, origins and peers are validated
// elsewhere to be printable, so the output is always valid UTF-8.
//
// Thread-safe: pure functions.
#ifndef TALLY_NODE_OBSERVE_METRICS_H_
#define TALLY_NODE_OBSERVE_METRICS_H_

#include <string>

#include "absl/strings/string_view.h"
#include "tally/v1/tally.pb.h"

namespace tally {
namespace node {

// The Content-Type of RenderPrometheus's output.
inline constexpr absl::string_view kPrometheusContentType =
    "text/plain; version=0.0.4; charset=utf-8";

// The whole exposition for one scrape; ends with a newline.
std::string RenderPrometheus(const ::tally::v1::StatusResponse& status);

// A label value escaped for the text format: \ as \\, " as \" and a
// newline as \n.
std::string EscapePrometheusLabelValue(absl::string_view value);

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_OBSERVE_METRICS_H_
