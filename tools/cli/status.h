// `tally status` output: a node's StatusResponse as text for people or as
// one JSON object for machines.
//
// The text has a summary (node, sequences, sessions, feed totals), the
// process (uptime, CPU, resident memory by kind, open files of the limit)
// and the node's repair bandwidth, then tables: keyspaces, rows per origin,
// peers (sessions and repairs), where the session with each peer is
// (phase, keyspace, for how long), each peer's last sessions (a small table
// per peer that had any; a paused peer says so in the peers table), how
// long the sessions with each peer take (count, mean, p50 and p90 estimated
// from the histogram's buckets), a heat map — each peer and keyspace with
// differences drawn as strips of the token space (tools/cli/heat_strip.h),
// the last session and the recent ones, on one scale with its legend —,
// the feeds this node follows (per peer: connected, lag, counters) and the
// subscribers it serves; last, the numbers of the status table
// (node/observe/status_fields.h) that this layout does not name
// (OtherNumbersText). The JSON holds every field of the response.
//
//   std::cout << StatusText(response, client->address(), absl::Now());
//   std::cout << DumpJson(StatusJson(response, client->address())) << "\n";
//
// Thread-safe: pure functions.
#ifndef TALLY_TOOLS_CLI_STATUS_H_
#define TALLY_TOOLS_CLI_STATUS_H_

#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "node/observe/status_fields.h"
#include "tally/v1/tally.pb.h"
#include "tools/cli/format.h"

namespace tally {
namespace cli {

// `dialed` is the address the tool connected to, shown when the node does
// not report its listen address; `now` dates "last session ... ago".
std::string StatusText(const ::tally::v1::StatusResponse& status,
                       absl::string_view dialed, absl::Time now);

// The numbers of the status table that `numbers` has neither read nor
// placed, a row each per item of their scope (caption, item, value for
// people): StatusText's last table, where a number new to the table shows
// until the layout gives it a place. Empty when there is none.
std::string OtherNumbersText(const node::StatusNumberReader& numbers);

// The JSON's numbers that /metrics exports come from the status table
// (node/observe/status_fields.h): the layout here names their keys and
// order, the table their values.
Json StatusJson(const ::tally::v1::StatusResponse& status,
                absl::string_view dialed);

}  // namespace cli
}  // namespace tally

#endif  // TALLY_TOOLS_CLI_STATUS_H_
