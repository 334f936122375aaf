#include "node/config/tallyd_command_line.h"

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "node/config/config_file.h"
#include "node/config/settings_table.h"
#include "tree/status_macros.h"

namespace tally {
namespace node {
namespace {

// Flags that need no value (no placeholder in --help): given alone they
// mean true.
bool IsBoolSetting(const std::string& name) {
  const SettingInfo* setting = FindSetting(name);
  return setting != nullptr && setting->value_name.empty();
}

}  // namespace

absl::StatusOr<TallydCommandLine> ParseTallydCommandLine(
    const std::vector<std::string>& args) {
  TallydCommandLine command;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h" || arg == "help") {
      command.action = TallydCommandLine::Action::kHelp;
      return command;
    }
    if (arg == "--version" || arg == "-version") {
      command.action = TallydCommandLine::Action::kVersion;
      return command;
    }
    if (absl::StartsWith(arg, "--print-reference=")) {
      command.action = TallydCommandLine::Action::kPrintReference;
      command.reference = arg.substr(std::string("--print-reference=").size());
      if (command.reference != "metrics" && command.reference != "settings" &&
          command.reference != "man" && command.reference != "completion") {
        return absl::InvalidArgumentError(
            "--print-reference takes metrics, settings, man or completion");
      }
      return command;
    }
    if (!absl::StartsWith(arg, "--")) {
      return absl::InvalidArgumentError(
          absl::StrFormat("unexpected argument '%s' (see --help)", arg));
    }
    std::string name = arg.substr(2);
    std::string value;
    const size_t eq = name.find('=');
    const bool has_value = eq != std::string::npos;
    if (has_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    // Underscores too, for habit: --data_dir is --data-dir.
    for (char& c : name) c = c == '_' ? '-' : c;
    if (name == "check-config") {
      if (has_value) {
        return absl::InvalidArgumentError(
            "--check-config takes no value (see --help)");
      }
      command.action = TallydCommandLine::Action::kCheckConfig;
      continue;
    }
    if (!has_value) {
      if (IsBoolSetting(name)) {
        value = "true";
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return absl::InvalidArgumentError(
            absl::StrFormat("--%s needs a value (see --help)", name));
      }
    }
    if (name == "config") {
      if (value.empty()) {
        return absl::InvalidArgumentError(
            "--config needs a file name (see --help)");
      }
      command.config_file = value;
    } else {
      command.settings.emplace_back(name, value);
    }
  }
  return command;
}

absl::StatusOr<NodeConfig> LoadNodeConfig(const TallydCommandLine& command) {
  NodeConfig config;
  if (!command.config_file.empty()) {
    TALLY_RETURN_IF_ERROR(ApplyConfigFile(command.config_file, &config));
  }
  TALLY_RETURN_IF_ERROR(ApplyCommandLineSettings(command.settings, &config));
  TALLY_RETURN_IF_ERROR(ValidateConfig(config));
  return config;
}

}  // namespace node
}  // namespace tally
