// SettingsTable: every tallyd setting in one table — its name (as in the
// config file and the flags), the value it takes, its help text, where it
// goes in NodeConfig (a parser and a printer) and which section of the
// reference it belongs to.
//
// The table drives ApplySetting (node/config/config.h: the config file's lines
// and the flags alike), the names ("did you mean"), the settings that repeat
// and the flags that need no value, EffectiveSettings (`tallyd
// --check-config`), the settings part of `tallyd --help` (and so of
// tallyd's man page, which help2man makes from it), the generated
// docs/reference/settings.md (SettingsMarkdown()), the man page
// tallyd.conf(5) (SettingsManPage()) and tallyd's bash completion
// (SettingsBashCompletion()). A unit test checks that
// the sample config (packaging/tallyd.conf) names every setting that is not
// for tests. A new setting needs one row here and its field in NodeConfig.
//
// Thread-safe: the table is immutable.
#ifndef TALLY_NODE_CONFIG_SETTINGS_TABLE_H_
#define TALLY_NODE_CONFIG_SETTINGS_TABLE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "node/config/config.h"

namespace tally {
namespace node {

// (name, value) lines of a config, as EffectiveSettings lists them.
using SettingLines = std::vector<std::pair<std::string, std::string>>;

struct SettingInfo {
  absl::string_view name;  // with dashes: "sync-interval"
  // What the reference groups it under ("Sessions", "TLS", ...).
  absl::string_view section;
  // The value's placeholder in --help ("DURATION"); empty for a flag that
  // needs no value (given alone it means true).
  absl::string_view value_name;
  // The help text as --help prints it after the flag: its lines, without
  // the indentation of the column (a first line starting with a newline
  // starts the text under the flag). Empty: not in --help.
  absl::string_view help;
  // May be given more than once (peer, table); the flags' list replaces
  // the config file's.
  bool repeats = false;
  // For tests only: left out of the sample config and the reference.
  bool for_tests = false;
  // Sets the setting in `config` from `value`; `name` is the setting's, for
  // messages. kInvalidArgument for a bad value.
  absl::Status (*apply)(absl::string_view name, absl::string_view value,
                        NodeConfig* config);
  // Appends the setting's lines as --check-config prints them (none when
  // it is unset and has no default worth showing, one per peer or table).
  void (*show)(absl::string_view name, const NodeConfig& config,
               SettingLines* out);
  // For a setting that repeats: empties its list, which the flags then
  // replace (ApplyCommandLineSettings).
  void (*clear)(NodeConfig* config) = nullptr;
};

// Every setting, in the order of --help and --check-config.
const std::vector<SettingInfo>& SettingsTable();

// The row of `name` (with dashes), or nullptr.
const SettingInfo* FindSetting(absl::string_view name);

// The settings part of `tallyd --help`: every row with help, formatted.
std::string SettingsUsage();

// The settings reference (docs/reference/settings.md), from the table.
std::string SettingsMarkdown();

// The man page tallyd.conf(5), in roff, from the table; `version` goes in
// its header ("tally 1.2.0").
std::string SettingsManPage(absl::string_view version);

// Bash completion for tallyd (installed as completions/tallyd): every
// setting's flag and tallyd's own flags (--config, --check-config, --help,
// --version); after a flag, directories for a DIR, files for a FILE,
// true/false for a BOOL.
std::string SettingsBashCompletion();

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_CONFIG_SETTINGS_TABLE_H_
