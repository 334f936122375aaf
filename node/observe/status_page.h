// StatusPage: a node's status as one HTML page for people — GET / on the
// metrics port (node/observe/metrics_server.h). Like /metrics
// (node/observe/metrics.h) it is rendered on the server from the StatusResponse
// that Admin.Status answers, so the page, `tally status` and Prometheus never
// disagree.
//
// The page shows the node, its keyspaces, its peers (the running or last
// session's phase and progress, the last session's time, outcome and rows
// each way, feed lag) and, per peer and keyspace, a heat map of the token
// space: one strip of PeerStatus.heat's segments for the last session and
// one for the last sessions together, each segment coloured by the
// differences found there (node/sync/repair_heat.h). Its numbers come from
// the status table (node/observe/status_fields.h), read by JSON key; the
// table's numbers the page neither shows nor leaves to `tally status` on
// purpose (a number new to the table) end it, under "Other numbers"
// (RenderOtherNumbers). No script: the drawing is
// inline SVG, each segment with a tooltip (<title>) giving its token range
// and counts, and the page reloads itself every kStatusPageRefreshSeconds.
//
//   v1::StatusResponse status;
//   TALLY_RETURN_IF_ERROR(CollectNodeStatus(store, status_sources, &status));
//   std::string html = RenderStatusPage(status, absl::Now());
//
// Every name from the status (node, keyspace, peer, outcome) is escaped.
// Segments are marked for tools as well as eyes: each is an SVG <rect> with
// class "seg" ("seg hot" when it has a difference), data-segment,
// data-differences and data-rows-repaired; each strip has data-peer,
// data-keyspace and data-window ("last" or "recent").
//
// Thread-safe: pure functions.
#ifndef TALLY_NODE_OBSERVE_STATUS_PAGE_H_
#define TALLY_NODE_OBSERVE_STATUS_PAGE_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "node/observe/status_fields.h"
#include "tally/v1/tally.pb.h"

namespace tally {
namespace node {

// The Content-Type of RenderStatusPage's output.
inline constexpr absl::string_view kStatusPageContentType =
    "text/html; charset=utf-8";

// How often the page reloads itself.
inline constexpr int kStatusPageRefreshSeconds = 5;

// The whole page, as of `now` (for "12 s ago").
std::string RenderStatusPage(const ::tally::v1::StatusResponse& status,
                             absl::Time now);

// The numbers of the status table that `numbers` has neither read nor
// placed, a table row each per item of their scope (caption, item, value
// for people; each row's data-key is the JSON key), under the heading
// "Other numbers": the page's last part, where a number new to the table
// shows until the page gives it a place. Empty when there is none.
std::string RenderOtherNumbers(const StatusNumberReader& numbers);

// `text` safe in HTML text and in a double- or single-quoted attribute:
// & < > " ' as character references.
std::string EscapeHtml(absl::string_view text);

// The first token of segment `segment` of `segments` equal ranges of the
// 64-bit token space (KeyspaceHeat): floor(segment * 2^64 / segments).
// REQUIRES: 0 < segments, segment <= segments (segments itself gives the
// end, 2^64, as 0).
uint64_t SegmentFirstToken(uint64_t segment, uint64_t segments);

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_OBSERVE_STATUS_PAGE_H_
