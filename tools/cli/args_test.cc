#include "tools/cli/args.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

// Stand-ins for the flags tally.cc defines, so that ScanFlags has a registry
// to check against.
ABSL_FLAG(std::string, node, "127.0.0.1:7400", "test");
ABSL_FLAG(bool, json, false, "test");
ABSL_FLAG(uint64_t, count, 0, "test");
ABSL_FLAG(bool, dry_run, false, "test");
ABSL_FLAG(uint64_t, value_size, 100, "test");
ABSL_FLAG(std::string, source, "", "test");

namespace tally {
namespace cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(NormalizeFlagNames, TurnsDashesIntoUnderscoresInNamesOnly) {
  std::vector<std::string> args = {
      "--dry-run", "--value-size=a-b", "-data-dir", "put", "-5",
      "--",        "--not-a-flag-here"};
  NormalizeFlagNames(&args);
  EXPECT_THAT(args, ElementsAre("--dry_run", "--value_size=a-b", "-data_dir",
                                "put", "-5", "--", "--not-a-flag-here"));
}

TEST(ScanFlags, ReturnsTheFlagsGivenInEveryForm) {
  absl::StatusOr<FlagSet> given =
      ScanFlags({"--node", "h:1", "get", "--json", "--count=5", "--nodry_run",
                 "k", "--", "--bogus"});
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_THAT(*given, ElementsAre("count", "dry_run", "json", "node"));
  EXPECT_EQ(absl::GetFlag(FLAGS_count), 5u);
  EXPECT_EQ(absl::GetFlag(FLAGS_node), "h:1");
}

TEST(ScanFlags, UnknownFlagIsAnError) {
  absl::StatusOr<FlagSet> given = ScanFlags({"status", "--nodes=x"});
  EXPECT_EQ(given.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(given.status().message(), HasSubstr("unknown flag '--nodes'"));
}

TEST(ScanFlags, NonNumericCountIsAnError) {
  absl::StatusOr<FlagSet> given = ScanFlags({"load", "--count=ten"});
  EXPECT_EQ(given.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(given.status().message(), HasSubstr("--count"));
  EXPECT_FALSE(ScanFlags({"load", "--count=-3"}).ok());
}

TEST(ScanFlags, MissingValueIsAnError) {
  absl::StatusOr<FlagSet> given = ScanFlags({"status", "--node"});
  EXPECT_THAT(given.status().message(), HasSubstr("needs a value"));
}

TEST(CheckCommandLine, CountsPositionalArguments) {
  const CommandSpec* put = FindCommand("put");
  ASSERT_NE(put, nullptr);
  EXPECT_TRUE(CheckCommandLine(*put, 2, {}).ok());
  absl::Status s = CheckCommandLine(*put, 1, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("put KEY... VALUE"));
  EXPECT_FALSE(CheckCommandLine(*FindCommand("status"), 1, {}).ok());
  // Several key values address a PostgreSQL table's key columns, up to
  // PostgreSQL's 32.
  EXPECT_TRUE(CheckCommandLine(*put, 1 + kMaxKeyValues, {}).ok());
  EXPECT_FALSE(CheckCommandLine(*put, 2 + kMaxKeyValues, {}).ok());
  EXPECT_TRUE(CheckCommandLine(*FindCommand("get"), 3, {}).ok());
  EXPECT_FALSE(
      CheckCommandLine(*FindCommand("del"), kMaxKeyValues + 1, {}).ok());
}

TEST(CheckCommandLine, CommandFlagsBelongToTheirCommand) {
  EXPECT_TRUE(
      CheckCommandLine(*FindCommand("repair"), 2, {"dry_run", "node"}).ok());
  absl::Status s = CheckCommandLine(*FindCommand("get"), 1, {"dry_run"});
  EXPECT_THAT(s.message(), HasSubstr("--dry-run applies to 'repair'"));
  // Global flags are fine everywhere.
  EXPECT_TRUE(
      CheckCommandLine(*FindCommand("verify"), 0, {"json", "keyspace"}).ok());
}

TEST(FindCommand, KnowsEveryDocumentedCommand) {
  for (const char* name :
       {"put", "get", "del", "load", "status", "diff", "repair", "verify",
        "recover", "peer", "sync", "help"}) {
    EXPECT_NE(FindCommand(name), nullptr) << name;
    EXPECT_THAT(UsageText(), HasSubstr(FindCommand(name)->example));
  }
  EXPECT_EQ(FindCommand("remove"), nullptr);
}

TEST(WantsHelp, SeesHelpFlagsBeforeTheSeparatorOnly) {
  EXPECT_TRUE(WantsHelp({"diff", "--help"}));
  EXPECT_TRUE(WantsHelp({"-helpshort"}));
  EXPECT_FALSE(WantsHelp({"put", "--", "k", "--help"}));
  EXPECT_FALSE(WantsHelp({"help"}));  // the command, handled as one
}

TEST(FlagsText, ListsFlagsOfTheFileWithDashes) {
  const std::string text = FlagsText("args_test.cc");
  EXPECT_THAT(text, HasSubstr("--value-size (default: 100)"));
  EXPECT_THAT(text, HasSubstr("--dry-run (default: false)"));
}

TEST(ParseSide, AcceptsLettersAndAddresses) {
  EXPECT_EQ(*ParseSide("A", "h:1", "h:2"), Side::kA);
  EXPECT_EQ(*ParseSide("b", "h:1", "h:2"), Side::kB);
  EXPECT_EQ(*ParseSide("h:2", "h:1", "h:2"), Side::kB);
  EXPECT_FALSE(ParseSide("c", "h:1", "h:2").ok());
  EXPECT_FALSE(ParseSide("h:1", "h:1", "h:1").ok());
}

// A file under the system's temp directory, removed at the end of scope.
class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    path_ = (std::filesystem::temp_directory_path() /
             absl::StrCat("tally-args-test-", getpid(), "-", counter_++))
                .string();
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::filesystem::remove(path_); }
  const std::string& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

TEST(ExpandFlagfiles, ReplacesAFlagfileByItsFlags) {
  TempFile inner("--count=7\n");
  TempFile outer(absl::StrCat(
      "# tally flags\n\n  --node=h:9  \n--flagfile=", inner.path(), "\n"));
  std::vector<std::string> args = {"--json", "--flagfile", outer.path(),
                                   "get",    "--",         "--flagfile=x"};
  ASSERT_TRUE(ExpandFlagfiles(&args).ok());
  EXPECT_THAT(args, ElementsAre("--json", "--node=h:9", "--count=7", "get",
                                "--", "--flagfile=x"));
}

TEST(ExpandFlagfiles, AnUnreadableOrMalformedFlagfileIsAnError) {
  std::vector<std::string> args = {"--flagfile=/nonexistent/tally.flags", "get",
                                   "k"};
  const absl::Status missing = ExpandFlagfiles(&args);
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("/nonexistent/tally.flags"));

  TempFile positional("--json\nget\n");
  args = {"--flagfile=" + positional.path()};
  const absl::Status bad = ExpandFlagfiles(&args);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("line 2"));

  TempFile loop("");
  std::ofstream(loop.path()) << "--flagfile=" << loop.path() << "\n";
  args = {"--flagfile=" + loop.path()};
  EXPECT_THAT(ExpandFlagfiles(&args).message(), HasSubstr("nest"));
}

// An ifstream opens a directory and reads it as empty, so `--flagfile=DIR`
// used to add no flags at all: the command then ran against the default
// node and keyspace instead of failing.
TEST(ExpandFlagfiles, ADirectoryAsFlagfileIsAnError) {
  const std::string dir = ::testing::TempDir();
  std::vector<std::string> args = {"--flagfile=" + dir, "get", "k"};
  const absl::Status s = ExpandFlagfiles(&args);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("is a directory"));
}

TEST(ExpandFlagfiles, FromenvReadsFlagsFromTheEnvironment) {
  setenv("FLAGS_node", "h:5", 1);
  unsetenv("FLAGS_count");
  std::vector<std::string> args = {"--tryfromenv=node,count", "status"};
  ASSERT_TRUE(ExpandFlagfiles(&args).ok());
  EXPECT_THAT(args, ElementsAre("--node=h:5", "status"));
  args = {"--fromenv=count", "status"};
  EXPECT_EQ(ExpandFlagfiles(&args).code(), absl::StatusCode::kNotFound);
}

TEST(JoinFlagValues, JoinsSeparateValuesOfValueFlagsOnly) {
  std::vector<std::string> args = {"--node", "-",  "--json", "get", "--count",
                                   "5",      "--", "--node", "x"};
  JoinFlagValues(&args);
  EXPECT_THAT(args, ElementsAre("--node=-", "--json", "get", "--count=5", "--",
                                "--node", "x"));
}

}  // namespace
}  // namespace cli
}  // namespace tally
