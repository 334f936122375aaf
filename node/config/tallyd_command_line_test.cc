#include "node/config/tallyd_command_line.h"

#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/temp_dir.h"

namespace tally {
namespace node {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using Action = TallydCommandLine::Action;

TEST(TallydCommandLine, ReadsTheFlagsInOrder) {
  auto command = ParseTallydCommandLine(
      {"--config", "/etc/tally/tallyd.conf", "--name=a", "--data_dir", "/x",
       "--insecure", "--peer", "127.0.0.1:1", "--peer=127.0.0.1:2"});
  ASSERT_TRUE(command.ok()) << command.status();
  EXPECT_EQ(command->action, Action::kRun);
  EXPECT_EQ(command->config_file, "/etc/tally/tallyd.conf");
  EXPECT_THAT(command->settings,
              ElementsAre(Pair("name", "a"), Pair("data-dir", "/x"),
                          Pair("insecure", "true"), Pair("peer", "127.0.0.1:1"),
                          Pair("peer", "127.0.0.1:2")));
}

TEST(TallydCommandLine, KnowsTheActions) {
  EXPECT_EQ(ParseTallydCommandLine({"--check-config", "--name", "a"})->action,
            Action::kCheckConfig);
  EXPECT_EQ(ParseTallydCommandLine({"--name", "a", "--check-config"})->action,
            Action::kCheckConfig);
  EXPECT_EQ(ParseTallydCommandLine({"--name", "a", "--help"})->action,
            Action::kHelp);
  EXPECT_EQ(ParseTallydCommandLine({"--version", "stray"})->action,
            Action::kVersion);
}

TEST(TallydCommandLine, RefusesWhatIsNotAFlag) {
  for (const auto& [args, expected] :
       std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"stray"}, "unexpected argument 'stray'"},
           {{"--name"}, "--name needs a value"},
           {{"--check-config=yes"}, "--check-config takes no value"},
           {{"--config="}, "--config needs a file name"}}) {
    const auto command = ParseTallydCommandLine(args);
    EXPECT_EQ(command.status().code(), absl::StatusCode::kInvalidArgument)
        << expected;
    EXPECT_THAT(std::string(command.status().message()), HasSubstr(expected));
  }
}

TEST(LoadNodeConfig, AppliesTheFileThenTheFlagsThenChecks) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/tallyd.conf";
  std::ofstream(path) << "name = a\ndata-dir = /x\npeer = 127.0.0.1:7401\n"
                         "sync-interval = 5s\n";
  auto config = LoadNodeConfig(*ParseTallydCommandLine(
      {"--config", path, "--sync-interval", "7s", "--peer", "127.0.0.1:7402"}));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->name, "a");
  EXPECT_EQ(config->sync_interval, absl::Seconds(7));
  ASSERT_EQ(config->peers.size(), 1u);
  EXPECT_EQ(config->peers[0].address, "127.0.0.1:7402");

  // The file's error names the file and line; a flag's names the flag; the
  // checks of the whole config come last.
  std::ofstream(path) << "name = a\nsync-interval = soon\n";
  EXPECT_THAT(
      std::string(LoadNodeConfig(*ParseTallydCommandLine({"--config", path}))
                      .status()
                      .message()),
      AllOf(HasSubstr(path + ":2:"), HasSubstr("sync-interval")));
  EXPECT_THAT(
      std::string(LoadNodeConfig(*ParseTallydCommandLine(
                                     {"--name", "a", "--max-sessionz", "3"}))
                      .status()
                      .message()),
      AllOf(HasSubstr("--max-sessionz: unknown setting"),
            HasSubstr("did you mean 'max-sessions'?")));
  EXPECT_THAT(
      std::string(LoadNodeConfig(*ParseTallydCommandLine({"--name", "a"}))
                      .status()
                      .message()),
      HasSubstr("--data-dir is required"));
  EXPECT_EQ(LoadNodeConfig(*ParseTallydCommandLine(
                               {"--config", dir.path() + "/none.conf"}))
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace node
}  // namespace tally
