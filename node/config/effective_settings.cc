#include "node/config/effective_settings.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "node/config/settings_table.h"

namespace tally {
namespace node {
namespace {

// The value as a config file must hold it to read back as itself
// (node/config/config_file.h): quoted if it holds a comment character or
// whitespace at an end, or starts with a quote.
std::string Quoted(const std::string& value) {
  const bool plain = value.find_first_of("#;") == std::string::npos &&
                     absl::StripAsciiWhitespace(value) == value &&
                     !absl::StartsWith(value, "\"") &&
                     !absl::StartsWith(value, "'");
  if (plain) return value;
  const char quote = value.find('"') == std::string::npos ? '"' : '\'';
  return absl::StrCat(std::string(1, quote), value, std::string(1, quote));
}

}  // namespace

std::vector<std::pair<std::string, std::string>> EffectiveSettings(
    const NodeConfig& config) {
  // Each setting as its row of node/config/settings_table.h shows it.
  std::vector<std::pair<std::string, std::string>> settings;
  for (const SettingInfo& setting : SettingsTable()) {
    setting.show(setting.name, config, &settings);
  }
  return settings;
}

std::string FormatEffectiveSettings(const NodeConfig& config) {
  std::string text;
  for (const auto& [name, value] : EffectiveSettings(config)) {
    absl::StrAppend(&text, name, " = ", Quoted(value), "\n");
  }
  return text;
}

}  // namespace node
}  // namespace tally
