// recheck: the keys of a repair report, diffed again between its nodes.
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "tools/cli/commands/command.h"
#include "tools/cli/commands/commands.h"
#include "tools/cli/commands/repair_report.h"
#include "tree/diff/key_list_view.h"
#include "tree/status_macros.h"

namespace tally {
namespace cli {

// A diff of the report's nodes and keyspace over the report's keys
// (--keys-from, as it were): the keys that still differ are printed as
// diff prints them, then its summary line.
CommandResult Recheck(const Context& ctx) {
  TALLY_ASSIGN_OR_RETURN(const RepairReportKeys report,
                         ReadRepairReport(ctx.args[0]));
  if (report.keys.empty()) {
    if (ctx.json) {
      PrintJson({{"report", ctx.args[0]}, {"keys", 0}, {"differ", 0}});
    } else {
      std::cout << absl::StrFormat(
          "report %s lists no keys: nothing to check\n", ctx.args[0]);
    }
    return 0;
  }
  Context diff = ctx;
  diff.args = {report.a, report.b};
  diff.keyspace = report.keyspace;
  diff.scope =
      tree::DiffScope{{}, std::make_shared<const tree::KeyList>(report.keys)};
  if (!ctx.json) {
    std::cout << absl::StrFormat(
        "recheck of %s: keyspace '%s', A=%s B=%s, %d key%s\n", ctx.args[0],
        report.keyspace, report.a, report.b, report.keys.size(),
        report.keys.size() == 1 ? "" : "s");
  }
  return Diff(diff);
}

}  // namespace cli
}  // namespace tally
