// ReadRowValue: a row's value as a node holds it now, read by key — what
// `diff --values` prints under a difference and what a repair report holds
// before and after the repair (`repair --report FILE --values`).
//
//   ReadValue now = ReadRowValue(ctx, *client, key);
//   std::cout << ValueText(now);          // 'value' or (missing)
//   line["a_before"] = ValueJson(now);    // {"value": ...} or {"none": ...}
//
// Thread-compatible.
#ifndef TALLY_TOOLS_CLI_COMMANDS_ROW_VALUE_H_
#define TALLY_TOOLS_CLI_COMMANDS_ROW_VALUE_H_

#include <optional>
#include <string>

#include "node/client/client.h"
#include "tools/cli/commands/command.h"
#include "tools/cli/format.h"

namespace tally {
namespace cli {

// The value, or why there is none ("missing", "deleted", or the error
// reading it).
struct ReadValue {
  std::optional<std::string> value;
  std::string none;
};

// The row at `key` of ctx.keyspace on `node`, now.
ReadValue ReadRowValue(const Context& ctx, node::NodeClient& node,
                       const std::string& key);

// On one line: C-escaped in quotes, cut after 200 characters; or the
// reason in parentheses.
std::string ValueText(const ReadValue& read);

// {"value": ...} (or "value_base64" beside a C-escaped "value" for bytes
// that are not UTF-8), or {"none": reason}.
Json ValueJson(const ReadValue& read);

}  // namespace cli
}  // namespace tally

#endif  // TALLY_TOOLS_CLI_COMMANDS_ROW_VALUE_H_
