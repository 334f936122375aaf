#include "node/config/config_file.h"

#include <ini.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/temp_dir.h"

namespace tally {
namespace node {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Pair;

// What the packaged libinih (Debian's libinih-dev, built with its default
// options) does with a text: (name, value) per handler call, and its
// return (0, or the first line it refused). config_file.cc is written
// against these facts; a libinih built otherwise fails here first.
struct InihResult {
  std::vector<std::pair<std::string, std::string>> calls;
  int returned = 0;
};

InihResult RunInih(const std::string& text) {
  InihResult result;
  result.returned = ini_parse_string(
      text.c_str(),
      [](void* user, const char* section, const char* name,
         const char* value) -> int {
        auto* calls =
            static_cast<std::vector<std::pair<std::string, std::string>>*>(
                user);
        calls->emplace_back(absl::StrCat("[", section, "]", name), value);
        return 1;
      },
      &result.calls);
  return result;
}

TEST(PackagedLibinih, BehavesAsConfigFileExpects) {
  // `#` is no inline comment; quotes are kept.
  EXPECT_THAT(RunInih("a = /x  # c\nb = \"q #2\"\n").calls,
              ElementsAre(Pair("[]a", "/x  # c"), Pair("[]b", "\"q #2\"")));
  // ` ;` ends a value, even inside quotes; `;` without a space does not.
  EXPECT_THAT(
      RunInih("a = /x ; c\nb = \"q ;2\"\nc = x;y\n").calls,
      ElementsAre(Pair("[]a", "/x"), Pair("[]b", "\"q"), Pair("[]c", "x;y")));
  // An indented line continues the value above, under its name.
  EXPECT_THAT(RunInih("peer = a:1\n  peer = b:2\n").calls,
              ElementsAre(Pair("[]peer", "a:1"), Pair("[]peer", "peer = b:2")));
  // `:` splits too; sections are passed on, their headers are not.
  EXPECT_THAT(RunInih("a: b\n[s]\nc = d\n").calls,
              ElementsAre(Pair("[]a", "b"), Pair("[s]c", "d")));
  // A line without `=` or `:` is refused by line number; parsing goes on.
  const InihResult words = RunInih("a = 1\njust words\nc = 3\n");
  EXPECT_EQ(words.returned, 2);
  EXPECT_EQ(words.calls.size(), 2u);
  // A line of 200 characters or more is split in two.
  const InihResult long_line =
      RunInih(absl::StrCat("a = ", std::string(300, 'x'), "\n"));
  ASSERT_FALSE(long_line.calls.empty());
  EXPECT_LT(long_line.calls[0].second.size(), 300u);
}

// Writes `text` to a file and applies it.
class ConfigFileTest : public ::testing::Test {
 protected:
  absl::Status Apply(const std::string& text) {
    std::ofstream(path_) << text;
    return ApplyConfigFile(path_, &config_);
  }
  std::string Message(const std::string& text) {
    config_ = NodeConfig();
    const absl::Status s = Apply(text);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << text;
    return std::string(s.message());
  }
  // "PATH:LINE:", as errors start.
  std::string At(int line) const { return absl::StrCat(path_, ":", line, ":"); }

  testing::TempDir dir_;
  const std::string path_ = dir_.path() + "/tallyd.conf";
  NodeConfig config_;
};

TEST_F(ConfigFileTest, ReadsTheSampleFormat) {
  const absl::Status s = Apply(
      "# tallyd's configuration\n"
      "; a comment line in the INI way\n"
      "name = eu#3\n"
      "data-dir = /srv/a#b   # a comment\n"
      "listen = 127.0.0.1:7500 ; a comment in the INI way\n"
      "tls-ca = \"/etc/tally/ca #2.pem\"  # quoted: the # is the value's\n"
      "tls-cert = '/etc/tally/a;b.pem'\n"
      "peer = 127.0.0.1:7401\n"
      "peer = 127.0.0.1:7402\n"
      "   # an indented comment\n"
      "\n"
      "sync_interval: 5s\n"
      "max-sessions = 3\r\n");
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(config_.name, "eu#3");
  EXPECT_EQ(config_.data_dir, "/srv/a#b");
  EXPECT_EQ(config_.listen, "127.0.0.1:7500");
  EXPECT_EQ(config_.tls_ca, "/etc/tally/ca #2.pem");
  EXPECT_EQ(config_.tls_cert, "/etc/tally/a;b.pem");
  ASSERT_EQ(config_.peers.size(), 2u);
  EXPECT_EQ(config_.sync_interval, absl::Seconds(5));
  EXPECT_EQ(config_.max_sessions, 3);
}

TEST_F(ConfigFileTest, AnUnclosedQuoteNamesTheFileAndLine) {
  EXPECT_THAT(Message("name = a\ndata-dir = \"/srv/tally\n"),
              AllOf(HasSubstr(At(2)), HasSubstr("data-dir"),
                    HasSubstr("no closing one")));
  EXPECT_THAT(Message("name = 'a\n"),
              AllOf(HasSubstr(At(1)), HasSubstr("' quote")));
  EXPECT_THAT(
      Message("name = \"a\" b\n"),
      AllOf(HasSubstr(At(1)), HasSubstr("'b' after the closing quote")));
}

TEST_F(ConfigFileTest, ASemicolonAfterASpaceInsideQuotesIsRefused) {
  // libinih cuts the value at ` ;`; the value would silently be `"/srv/a`.
  EXPECT_THAT(
      Message("name = a\ndata-dir = \"/srv/a ;b\"\n"),
      AllOf(HasSubstr(At(2)), HasSubstr("data-dir"),
            HasSubstr("';' after a space"), Not(HasSubstr("no closing one"))));
  // A real unclosed quote with a comment after it is still that.
  EXPECT_THAT(Message("data-dir = \"/srv/a ; comment\n"),
              HasSubstr("no closing one"));
}

TEST_F(ConfigFileTest, ADuplicatePeerNamesBothLines) {
  EXPECT_THAT(Message("peer = 127.0.0.1:7401\n"
                      "peer = 127.0.0.1:7402\n"
                      "peer =    127.0.0.1:7401 ,  role=source\n"),
              AllOf(HasSubstr(At(3)), HasSubstr("peer 127.0.0.1:7401"),
                    HasSubstr("first on line 1"), HasSubstr("twice")));
  // Host names are case-insensitive.
  EXPECT_THAT(Message("peer = db-2.example:7400\npeer = DB-2.Example:7400\n"),
              AllOf(HasSubstr(At(2)), HasSubstr("first on line 1 as "
                                                "db-2.example:7400")));
  EXPECT_THAT(Message("table = public.t\npostgres = dbname=a\n"
                      "table = public.t\n"),
              AllOf(HasSubstr(At(3)), HasSubstr("table public.t"),
                    HasSubstr("first on line 1")));
}

TEST_F(ConfigFileTest, AnUnknownSettingGetsTheNearestName) {
  EXPECT_THAT(Message("name = a\nsync-intervall = 5s\n"),
              AllOf(HasSubstr(At(2)),
                    HasSubstr("unknown setting "
                              "'sync-intervall'"),
                    HasSubstr("did you mean 'sync-interval'?")));
  EXPECT_THAT(Message("peers = 127.0.0.1:7401\n"),
              HasSubstr("did you mean 'peer'?"));
  EXPECT_THAT(Message("colour = blue\n"),
              AllOf(HasSubstr("unknown setting 'colour'"),
                    Not(HasSubstr("did you mean"))));
}

TEST_F(ConfigFileTest, ASettingGivenTwiceIsRefusedUnlessItRepeats) {
  EXPECT_THAT(Message("name = a\ndata-dir = /x\nname = b\n"),
              AllOf(HasSubstr(At(3)), HasSubstr("name is given twice"),
                    HasSubstr("first on line 1")));
  // Spelt with underscores, it is the same setting.
  EXPECT_THAT(Message("data-dir = /x\ndata_dir = /y\n"),
              AllOf(HasSubstr(At(2)), HasSubstr("data-dir is given twice")));
  EXPECT_TRUE(Apply("peer = 127.0.0.1:1\npeer = 127.0.0.1:2\n"
                    "postgres = dbname=a\ntable = a.b\ntable = a.c\n")
                  .ok());
}

TEST_F(ConfigFileTest, ASectionHeaderIsRefused) {
  EXPECT_THAT(Message("name = a\n[node]\ndata-dir = /x\n"),
              AllOf(HasSubstr(At(2)),
                    HasSubstr("'[node]' is a section "
                              "header"),
                    HasSubstr("no sections")));
  // Also one that holds no setting, and one libinih would find malformed.
  EXPECT_THAT(Message("name = a\n  [tally]  # trailing\n"),
              AllOf(HasSubstr(At(2)), HasSubstr("'[tally]'")));
  EXPECT_THAT(Message("[tally\n"),
              AllOf(HasSubstr(At(1)), HasSubstr("section")));
}

TEST_F(ConfigFileTest, AnEmptyValueIsRefused) {
  for (const char* empty :
       {"data-dir =\n", "data-dir = \"\"\n", "data-dir = ''  # nothing\n",
        "data-dir =   # nothing\n", "data-dir = ; no\n"}) {
    EXPECT_THAT(Message(absl::StrCat("name = a\n", empty)),
                AllOf(HasSubstr(At(2)), HasSubstr("data-dir has an empty "
                                                  "value")))
        << empty;
  }
}

TEST_F(ConfigFileTest, BadDurationsAndSizesNameTheSettingAndLine) {
  EXPECT_THAT(Message("name = a\nsync-interval = soon\n"),
              AllOf(HasSubstr(At(2)), HasSubstr("sync-interval: 'soon' is not "
                                                "a duration")));
  EXPECT_THAT(Message("session-timeout = -5m\n"),
              AllOf(HasSubstr(At(1)), HasSubstr("session-timeout"),
                    HasSubstr("positive")));
  EXPECT_THAT(Message("max-clock-skew = 3h\n"),
              AllOf(HasSubstr(At(1)), HasSubstr("limit")));
  EXPECT_THAT(Message("repair-bandwidth = -1\n"),
              AllOf(HasSubstr(At(1)), HasSubstr("repair-bandwidth must be")));
  EXPECT_THAT(Message("\nlog-retention-entries = 10M\n"),
              AllOf(HasSubstr(At(2)), HasSubstr("log-retention-entries")));
  EXPECT_THAT(Message("max-sessions = 0\n"),
              AllOf(HasSubstr(At(1)), HasSubstr("max-sessions must be an "
                                                "integer in 1..256")));
}

TEST_F(ConfigFileTest, LinesLibinihWouldMisreadAreRefused) {
  // Indented: libinih would read it as more of `name`'s value.
  EXPECT_THAT(Message("name = a\n  data-dir = /x\n"),
              AllOf(HasSubstr(At(2)), HasSubstr("indented")));
  EXPECT_THAT(Message("\tname = a\n"),
              AllOf(HasSubstr(At(1)), HasSubstr("indented")));
  // Too long: libinih would read its end as a line of its own.
  EXPECT_THAT(Message(absl::StrCat("name = a\ndata-dir = /",
                                   std::string(250, 'x'), "\n")),
              AllOf(HasSubstr(At(2)), HasSubstr("longer than 198 characters")));
  // The longest it reads whole is read whole.
  const std::string longest = absl::StrCat("/", std::string(186, 'y'));
  ASSERT_EQ(absl::StrCat("data-dir = ", longest).size(), 198u);
  ASSERT_TRUE(Apply(absl::StrCat("data-dir = ", longest, "\n")).ok());
  EXPECT_EQ(config_.data_dir, longest);
  // Not `name = value`.
  EXPECT_THAT(Message("name = a\njust words # and a comment\n"),
              AllOf(HasSubstr(At(2)),
                    HasSubstr("expected 'name = value', got 'just words'")));
  EXPECT_THAT(Message("listen 127.0.0.1:7400\n"),
              AllOf(HasSubstr(At(1)), HasSubstr("expected 'name = value', got "
                                                "'listen 127.0.0.1:7400'")));
  EXPECT_THAT(Message("name = a\n= /x\n"),
              AllOf(HasSubstr(At(2)),
                    HasSubstr("expected 'name = value', got '= /x'")));
  EXPECT_THAT(Message(std::string("name = a\0b\n", 11)),
              AllOf(HasSubstr(At(1)), HasSubstr("NUL")));
}

TEST_F(ConfigFileTest, TheFirstErrorIsReported) {
  // libinih's refusal of line 2 comes before tally's of line 3 ...
  EXPECT_THAT(Message("name = a\nwords\nmax-sessions = x\n"),
              AllOf(HasSubstr(At(2)), Not(HasSubstr("max-sessions"))));
  // ... and tally's of line 1 before libinih's of line 2.
  EXPECT_THAT(Message("max-sessions = x\nwords\n"),
              AllOf(HasSubstr(At(1)), HasSubstr("max-sessions")));
}

TEST_F(ConfigFileTest, AMissingFileIsNotFound) {
  EXPECT_EQ(ApplyConfigFile(dir_.path() + "/none.conf", &config_).code(),
            absl::StatusCode::kNotFound);
}

// /dev/zero would be read without end (tallyd --check-config died of
// bad_alloc), a FIFO without a writer waited on for ever (a SIGHUP reload
// with it): both are refused at once, as is a file over the limit.
TEST_F(ConfigFileTest, OnlyARegularFileOfBoundedSizeIsRead) {
  absl::Status zero = ApplyConfigFile("/dev/zero", &config_);
  EXPECT_EQ(zero.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(zero.message(), HasSubstr("not a regular file"));

  const std::string fifo = dir_.path() + "/fifo.conf";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  absl::Status from_fifo = ApplyConfigFile(fifo, &config_);
  EXPECT_EQ(from_fifo.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(from_fifo.message(), HasSubstr("not a regular file"));

  const std::string big = dir_.path() + "/big.conf";
  {
    std::ofstream out(big);
    const std::string line = "# a comment line of a config file\n";
    for (size_t written = 0; written <= kMaxConfigFileBytes;
         written += line.size()) {
      out << line;
    }
  }
  absl::Status too_big = ApplyConfigFile(big, &config_);
  EXPECT_EQ(too_big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_big.message(), HasSubstr("larger than"));

  // A symlink to a regular file is read as the file.
  const std::string real = dir_.path() + "/real.conf";
  std::ofstream(real) << "name = via-link\n";
  const std::string link = dir_.path() + "/link.conf";
  ASSERT_EQ(symlink(real.c_str(), link.c_str()), 0);
  ASSERT_TRUE(ApplyConfigFile(link, &config_).ok());
  EXPECT_EQ(config_.name, "via-link");
}

}  // namespace
}  // namespace node
}  // namespace tally
