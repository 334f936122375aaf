// The part of a keyspace `tally diff` and `tally repair` cover, from their
// flags: `--range FROM:TO` (hex tokens, tree/token_range.h) or
// `--keys-from FILE` (one key a line; `-` is standard input; with
// --escaped each line is C-escaped, so keys may hold any byte), and how
// such a scope travels to node A (RunDiffRequest.range / keys).
//
//   TALLY_ASSIGN_OR_RETURN(ctx.scope, ReadDiffScope(range, keys_from, esc));
//   for (const tree::DiffScope& part : RequestScopes(ctx.scope)) {
//     SetScope(part, &request);  // one RunDiff call per part
//   }
//
// Thread-compatible.
#ifndef TALLY_TOOLS_CLI_COMMANDS_DIFF_SCOPE_FLAGS_H_
#define TALLY_TOOLS_CLI_COMMANDS_DIFF_SCOPE_FLAGS_H_

#include <istream>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tally/v1/tally.pb.h"
#include "tree/diff/diff_scope.h"

namespace tally {
namespace cli {

// The scope the flags name (nullopt: the flag was not given); the whole
// keyspace when neither was. kInvalidArgument for both at once, a flag
// given an empty value (`--range "$UNSET"` must not widen a repair to the
// whole keyspace), a bad range, or a key list ReadKeyList refuses;
// kNotFound for a file that cannot be opened.
absl::StatusOr<tree::DiffScope> ReadDiffScope(
    const std::optional<std::string>& range,
    const std::optional<std::string>& keys_from, bool escaped);

// The keys of `in`, as ReadDiffScope reads a --keys-from file (`source`
// names it in errors). Duplicates are dropped, the first kept; empty lines
// are skipped. kInvalidArgument, naming the line, for a line that is not a
// valid C-escaped key (with --escaped), an empty or over-long key (a line
// is not read past a few times the longest key), a line ending in a
// carriage return or a file starting with a UTF-8 byte order mark (a file
// saved with Windows conventions: read as they are, its keys would all be
// absent and the diff would report them equal), or a file without keys.
absl::StatusOr<tree::KeyList> ReadKeyList(std::istream& in, bool escaped,
                                          const std::string& source);

// `scope` cut into parts that each fit one RunDiffRequest
// (node/sync/diff_run.h's key limits): one part, `scope` itself, unless it is a
// longer key list.
std::vector<tree::DiffScope> RequestScopes(const tree::DiffScope& scope);

// Sets `request`'s range or keys to `scope`'s.
void SetScope(const tree::DiffScope& scope, v1::RunDiffRequest* request);

}  // namespace cli
}  // namespace tally

#endif  // TALLY_TOOLS_CLI_COMMANDS_DIFF_SCOPE_FLAGS_H_
