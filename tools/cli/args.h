// Command-line grammar of `tally`: the commands, the flags each accepts, and
// the checks that run before anything talks to a node, so that a mistyped
// command line gets one clear "tally: ..." line and exit 2 instead of
// absl's own usage dump (which exits 1, the code `tally diff` uses for
// "different").
//
//   std::vector<std::string> args(argv + 1, argv + argc);
//   absl::Status expanded = ExpandFlagfiles(&args);   // --flagfile=F
//   NormalizeFlagNames(&args);               // --dry-run -> --dry_run
//   absl::StatusOr<FlagSet> given = ScanFlags(args);
//   ... absl::ParseCommandLine(...) ...
//   const CommandSpec* command = FindCommand(positional[0]);
//   absl::Status ok = CheckCommandLine(*command, positional.size() - 1,
//                                      *given);
//
// Thread-safe: pure functions (ScanFlags reads and sets absl flags).
#ifndef TALLY_TOOLS_CLI_ARGS_H_
#define TALLY_TOOLS_CLI_ARGS_H_

#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tally {
namespace cli {

// put, get and del take one KEY for a keyspace of a node's store and one
// value per primary-key column for a PostgreSQL table (`tally
// --keyspace=public.order_items get 7 3`); PostgreSQL allows 32 key
// columns.
inline constexpr size_t kMaxKeyValues = 32;

struct CommandSpec {
  absl::string_view name;
  // Positional arguments after the command name.
  size_t min_args;
  size_t max_args;
  absl::string_view synopsis;  // "diff A B [--json]"
  absl::string_view summary;   // one line: what it does
  absl::string_view example;
  // Flags only this command accepts, by absl name. The global flags
  // (--node, --keyspace, --json, --timeout, --tls-*) are accepted everywhere so
  // that an alias like `tally --node=X --keyspace=Y` works with every command.
  std::vector<absl::string_view> flags;
};

// Every command, in the order the usage text lists them.
const std::vector<CommandSpec>& Commands();
// nullptr when there is no such command.
const CommandSpec* FindCommand(absl::string_view name);

// The text of `tally help`: synopsis, commands with an example each, global
// flags, exit codes.
std::string UsageText();

// Every flag defined in a file whose path contains `defining_file`, with
// its default and help, names spelled with dashes.
std::string FlagsText(absl::string_view defining_file);

// True when `args` ask for help (--help or --helpshort before any "--").
// tally answers those itself, with exit code 0; absl would exit 1, which
// scripts read as "different".
bool WantsHelp(const std::vector<std::string>& args);

// Replaces --flagfile=FILE[,FILE...] (or `--flagfile FILE`) by the flags
// the files hold, in absl's format (one flag a line, leading and trailing
// whitespace ignored, `#` comment lines and blank lines skipped; nested
// --flagfile lines are followed, ten deep at most), and --fromenv=a,b /
// --tryfromenv=a,b by --a=$FLAGS_a ..., so that ScanFlags checks every flag
// and absl never has to report one itself (it exits 1, which reads as
// "absent" or "different"). Returns kNotFound for a file that cannot be read
// and for --fromenv of an unset variable, kInvalidArgument for a line that is
// not a flag. Stops at a bare "--".
absl::Status ExpandFlagfiles(std::vector<std::string>* args);

// Flags seen on the command line, by absl name ("dry_run").
using FlagSet = std::set<std::string>;

// Rewrites "--value-size=5" to "--value_size=5" (and "-dry-run" to
// "-dry_run"): people type dashes, absl flag names cannot hold them. Stops at
// a bare "--"; what follows is positional.
void NormalizeFlagNames(std::vector<std::string>* args);

// Walks `args` (argv without argv[0]) as absl will: "--name=value",
// "--name value" for non-boolean flags, "--name" / "--noname" for booleans;
// stops at "--". Returns the names of the flags given, or kInvalidArgument
// for an unknown flag, a missing value or a value the flag's type rejects
// ("--count=ten"). Sets the flags it parses, as absl would.
absl::StatusOr<FlagSet> ScanFlags(const std::vector<std::string>& args);

// Rewrites "--name VALUE" (two arguments, a flag that takes a value) to
// "--name=VALUE", as ScanFlags read it: absl questions a separate value
// that starts with '-' ("Did you really mean to set flag 'file' to the
// value '-'?") on stderr, where tally promises one line. Run it on
// arguments ScanFlags accepted. Stops at a bare "--".
void JoinFlagValues(std::vector<std::string>* args);

// Checks the number of positional arguments and that every
// command-specific flag given belongs to `command`.
absl::Status CheckCommandLine(const CommandSpec& command, size_t args,
                              const FlagSet& given);

// Which node `repair --source` names.
enum class Side { kA, kB };

// "a"/"A" or `address_a`, "b"/"B" or `address_b`. kInvalidArgument for
// anything else, and for an address that is both A and B.
absl::StatusOr<Side> ParseSide(absl::string_view source,
                               absl::string_view address_a,
                               absl::string_view address_b);

}  // namespace cli
}  // namespace tally

#endif  // TALLY_TOOLS_CLI_ARGS_H_
