// tallyd's PostgreSQL settings as an operator meets them: refused
// combinations exit 2 with one line naming the fix, the password never
// appears in what tallyd prints, and --help documents the settings.
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/process.h"
#include "support/temp_dir.h"

namespace tally {
namespace {

using ::tally::testing::CommandResult;
using ::tally::testing::RunCommand;
using ::tally::testing::TallydPath;
using ::tally::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

CommandResult Tallyd(const TempDir& dir, std::vector<std::string> extra) {
  std::vector<std::string> argv = {TallydPath(), "--name",   "pg-a",
                                   "--data-dir", dir.path(), "--listen",
                                   "127.0.0.1:0"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return RunCommand(argv, absl::Seconds(30));
}

int Lines(const std::string& text) {
  std::vector<std::string> lines =
      absl::StrSplit(absl::StripSuffix(text, "\n"), '\n');
  return static_cast<int>(lines.size());
}

TEST(TallydPostgres, PostgresWithoutATableIsRefusedWithThePasswordMasked) {
  TempDir dir;
  const CommandResult r =
      Tallyd(dir, {"--postgres", "postgresql://tally:s3cret@127.0.0.1:1/app"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("--table SCHEMA.TABLE"),
                           HasSubstr("tally:********@127.0.0.1:1/app"),
                           Not(HasSubstr("s3cret"))));
  EXPECT_EQ(Lines(r.err), 1) << r.err;
}

TEST(TallydPostgres, ATableWithoutPostgresOrABadNameIsRefused) {
  TempDir dir;
  const CommandResult alone = Tallyd(dir, {"--table", "public.users"});
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_THAT(alone.err, HasSubstr("needs --postgres"));
  const CommandResult bad =
      Tallyd(dir, {"--postgres", "dbname=app", "--table", "users"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, AllOf(HasSubstr("--table"), HasSubstr("SCHEMA.TABLE")));
  const CommandResult twice =
      Tallyd(dir, {"--postgres", "dbname=app", "--table", "public.t", "--table",
                   "public.t"});
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_THAT(twice.err, HasSubstr("given twice"));
  const CommandResult unparsable = Tallyd(
      dir, {"--postgres", "password=s3cret host='open", "--table", "public.t"});
  EXPECT_EQ(unparsable.exit_code, 2);
  EXPECT_THAT(unparsable.err,
              AllOf(HasSubstr("--postgres"), Not(HasSubstr("s3cret"))));
}

TEST(TallydPostgres, HelpDocumentsPostgresAndTable) {
  const CommandResult r = RunCommand({TallydPath(), "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(
      r.out,
      AllOf(HasSubstr("--postgres URL"), HasSubstr("--table SCHEMA.TABLE"),
            HasSubstr("wal_level=logical"), HasSubstr("REPLICATION")));
}

}  // namespace
}  // namespace tally
