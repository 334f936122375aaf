// The commands of `tally`, one entry point each (tools/cli/commands/command.h
// says what they get and return). Each is in a file of its own:
//   put, get, del     rows_commands.cc
//   load              load_command.cc
//   status            status_command.cc
//   diff              diff_command.cc    (with node_diff.h, shared by repair)
//   repair            repair_command.cc
//   verify            verify_command.cc
//   recover           recover_command.cc
//   peer              peer_command.cc
//   sync              sync_command.cc
//   token             token_command.cc
//   keyspaces         keyspaces_command.cc
//   recheck           recheck_command.cc (with repair_report.h)
#ifndef TALLY_TOOLS_CLI_COMMANDS_COMMANDS_H_
#define TALLY_TOOLS_CLI_COMMANDS_COMMANDS_H_

#include "tools/cli/commands/command.h"

namespace tally {
namespace cli {

CommandResult Put(const Context& ctx);
CommandResult Get(const Context& ctx);
CommandResult Delete(const Context& ctx);
CommandResult Load(const Context& ctx);
CommandResult Status(const Context& ctx);
CommandResult Diff(const Context& ctx);
CommandResult Repair(const Context& ctx);
CommandResult Verify(const Context& ctx);
CommandResult Recover(const Context& ctx);
CommandResult Peer(const Context& ctx);
CommandResult Sync(const Context& ctx);
CommandResult Token(const Context& ctx);
CommandResult Keyspaces(const Context& ctx);
CommandResult Recheck(const Context& ctx);
// tools/cli/commands/report_command.cc
CommandResult Report(const Context& ctx);

}  // namespace cli
}  // namespace tally

#endif  // TALLY_TOOLS_CLI_COMMANDS_COMMANDS_H_
