// report: a repair report rendered as CSV or HTML, for people who review
// it outside a terminal.
#include <iostream>
#include <string>

#include "tools/cli/commands/command.h"
#include "tools/cli/commands/commands.h"
#include "tools/cli/commands/report_render.h"
#include "tree/status_macros.h"

namespace tally {
namespace cli {

CommandResult Report(const Context& ctx) {
  TALLY_ASSIGN_OR_RETURN(const ReportFormat format,
                         ParseReportFormat(ctx.format));
  TALLY_ASSIGN_OR_RETURN(const std::string rendered,
                         RenderRepairReport(ctx.args[0], format));
  std::cout << rendered;
  return 0;
}

}  // namespace cli
}  // namespace tally
