// What `tally diff` and `tally repair` share.
//
// Both run in one of two ways, with the same output, JSON and exit codes:
//  - on node A (the default): A is asked (Admin.RunDiff) to diff against B
//    itself and streams the differences, the repair's progress and the
//    summary back; the tool needs a link to A only, and the nodes' traffic
//    is one answer per exchange, a session's;
//  - from here (--third-party): the tool asks both nodes for their trees
//    and, for a repair, moves the rows itself: for nodes that cannot reach
//    each other. Used anyway, with a note on stderr, when A answers that it
//    cannot reach B or that it has no RunDiff (an older tallyd). A diff that
//    A has begun to stream is never run again from here.
// Two PostgreSQL URLs instead of node addresses compare the databases
// directly (tools/cli/pg/pg_diff.h), no node involved.
#ifndef TALLY_TOOLS_CLI_COMMANDS_NODE_DIFF_H_
#define TALLY_TOOLS_CLI_COMMANDS_NODE_DIFF_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "node/client/client.h"
#include "tools/cli/commands/command.h"
#include "tree/diff/diff.h"
#include "tree/merkle_tree.h"

namespace tally {
namespace cli {

// Why a RunDiff on A is run from here instead, or nullopt when it is not:
// only before A streamed anything, and only when A could not reach B or
// does not know the call.
std::optional<std::string> FallbackReason(const absl::Status& status,
                                          bool streamed, const std::string& a);

// The fallback's note goes on stderr once the run from here is over: as a
// line of its own after a success, within the one error line after a
// failure.
CommandResult WithFallbackNote(const std::optional<std::string>& reason,
                               CommandResult result);

// One side of a difference as A streamed it.
tree::RowEntry EntryOf(const std::string& key, const v1::DiffSide& side);

// Connects to A only and waits for the connection, so that its set-up is
// not inside the diff's timing.
absl::StatusOr<std::unique_ptr<node::NodeClient>> ConnectToA(
    const Context& ctx);

// Sets up both connections at once and before the first round, so that a
// diff's rounds and its timing do not include them. A node that cannot be
// reached is reported by the first call, as without this; a link that
// swallows packets delays that report by at most a few seconds.
void ConnectBoth(const Context& ctx, node::NodeClient& a, node::NodeClient& b);

// A diff's figures as JSON and as text, and as A's summary gives them.
Json DiffStatsJson(const tree::DiffStats& stats, double seconds);
std::string DiffStatsText(const tree::DiffStats& stats);
tree::DiffStats DiffStatsOf(const v1::RunDiffSummary& summary);

// Adds the counts of one RunDiff call to `*total`: a --keys-from list
// longer than one request is run as several calls (diff_scope_flags.h),
// reported as one. The roots after add up too: the keys of the calls are
// disjoint, so the XOR of their roots is the root of all of them.
void AddRunDiffSummary(const v1::RunDiffSummary& part,
                       v1::RunDiffSummary* total);

// " (tokens FROM:TO)" or " (N keys)" for a run limited by --range or
// --keys-from, "" otherwise: goes after the keyspace in output lines.
std::string ScopeText(const Context& ctx);
// Adds "range" or "keys" (their count) to a summary's JSON.
void AddScopeJson(const Context& ctx, Json* summary);

// `tally diff URL URL` / `tally repair URL URL`: the result of comparing
// two PostgreSQL databases directly, or nullopt when ctx.args are node
// addresses. kInvalidArgument with --range or --keys-from.
std::optional<CommandResult> MaybePostgres(const Context& ctx, bool repair);

}  // namespace cli
}  // namespace tally

#endif  // TALLY_TOOLS_CLI_COMMANDS_NODE_DIFF_H_
