// tallyd's command line: what it was asked to do, and the NodeConfig the
// config file and the flags make together — the one path from argv to a
// checked config, for a node's start and for `tallyd --check-config`.
//
//   tallyd [--config FILE] [--SETTING VALUE | --SETTING=VALUE]...
//   tallyd --check-config [--config FILE] [--SETTING VALUE]...
//
// Every flag but --config, --check-config, --help and --version is a
// setting of node/config/config.h, read by ApplySetting as the file's lines
// are;
// `--insecure` alone means `--insecure true`; underscores work as dashes.
// The file applies first, then the flags in order (ApplyCommandLineSettings),
// then ValidateConfig.
//
// Thread-compatible: functions of their arguments (and the file).
#ifndef TALLY_NODE_CONFIG_TALLYD_COMMAND_LINE_H_
#define TALLY_NODE_CONFIG_TALLYD_COMMAND_LINE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "node/config/config.h"

namespace tally {
namespace node {

struct TallydCommandLine {
  enum class Action {
    kRun,          // start the node
    kCheckConfig,  // --check-config: check, print the settings, exit
    kHelp,         // --help, -h, help
    kVersion,      // --version
    // --print-reference=metrics|settings|man|completion (hidden): print the
    // Markdown that docs/reference/metrics.md or settings.md holds (man: the
    // roff of tallyd.conf(5); completion: tallyd's bash completion), and
    // exit.
    kPrintReference,
  };
  Action action = Action::kRun;
  // kPrintReference: "metrics", "settings", "man" or "completion".
  std::string reference;
  // --config FILE; empty: none.
  std::string config_file;
  // (name, value) of every other flag, in order, names with dashes.
  std::vector<std::pair<std::string, std::string>> settings;
};

// Reads the arguments after the program's name. --help and --version win
// as soon as they are seen (as they always have). kInvalidArgument with a
// message for the operator ("unexpected argument 'x' (see --help)", "--peer
// needs a value (see --help)") otherwise. Settings' names and values are
// checked later, by LoadNodeConfig.
absl::StatusOr<TallydCommandLine> ParseTallydCommandLine(
    const std::vector<std::string>& args);

// The config tallyd runs with: the file's settings (node/config/config_file.h),
// overridden by the flags, then checked by ValidateConfig — everything a
// node checks before it opens its store, binds its ports or connects to
// PostgreSQL. The first error, naming the file and line or the flag.
absl::StatusOr<NodeConfig> LoadNodeConfig(const TallydCommandLine& command);

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_CONFIG_TALLYD_COMMAND_LINE_H_
