#include "node/config/settings_table.h"

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tally {
namespace node {
namespace {

TEST(SettingsTable, EveryRowParsesAndShows) {
  for (const SettingInfo& setting : SettingsTable()) {
    SCOPED_TRACE(std::string(setting.name));
    EXPECT_NE(setting.apply, nullptr);
    EXPECT_NE(setting.show, nullptr);
    EXPECT_FALSE(setting.section.empty());
    EXPECT_EQ(FindSetting(setting.name), &setting);
    // Only the settings for tests may stay out of --help.
    if (!setting.for_tests) EXPECT_FALSE(setting.help.empty());
  }
  EXPECT_EQ(FindSetting("sync_interval"), nullptr);  // names have dashes
}

// Every setting the table has for operators is in the sample config that
// packaging installs, as a line of its own (`name = value`, commented out
// or not), so that the file shows what can be set.
TEST(SettingsTable, TheCompletionOffersEverySettingsFlag) {
  const std::string completion = SettingsBashCompletion();
  EXPECT_NE(completion.find("complete -F _tallyd tallyd"), std::string::npos);
  for (const SettingInfo& setting : SettingsTable()) {
    const std::string flag = absl::StrCat(" --", setting.name, " ");
    const std::string last = absl::StrCat(" --", setting.name, "'");
    const bool offered = completion.find(flag) != std::string::npos ||
                         completion.find(last) != std::string::npos;
    EXPECT_EQ(offered, !setting.for_tests) << setting.name;
  }
  // After --data-dir, directories.
  EXPECT_NE(completion.find("--data-dir)"), std::string::npos) << completion;
}

TEST(SettingsTable, TheSampleConfigNamesEverySetting) {
  const std::string path =
      absl::StrCat(TALLY_SOURCE_DIR, "/packaging/tallyd.conf");
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::stringstream text;
  text << in.rdbuf();
  std::set<std::string> named;
  for (absl::string_view line : absl::StrSplit(text.str(), '\n')) {
    absl::ConsumePrefix(&line, "#");
    line = absl::StripAsciiWhitespace(line);
    const size_t eq = line.find(" = ");
    if (eq != absl::string_view::npos) {
      named.insert(std::string(line.substr(0, eq)));
    }
  }
  for (const SettingInfo& setting : SettingsTable()) {
    if (setting.for_tests) continue;
    EXPECT_TRUE(named.count(std::string(setting.name)))
        << setting.name << " is not in " << path << "; add a line `# "
        << setting.name << " = ...` for it";
  }
}

}  // namespace
}  // namespace node
}  // namespace tally
