#include "node/observe/log.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tally {
namespace node {
namespace {

using ::testing::HasSubstr;

const absl::Time kWhen = absl::FromUnixMillis(1'796'274'850'123);

TEST(LogLine, TextQuotesValuesWithSpacesAndEscapesThem) {
  const std::string line =
      FormatLogLine(kWhen, LogLevel::kWarning, LogFormat::kText, "session",
                    {{"peer", "10.0.0.2:7400"},
                     {"outcome", absl::UnavailableError("failed to connect")},
                     {"rows", uint64_t{12}},
                     {"empty", ""},
                     {"tricky", "a\"b\\c\nd=e"}});
  EXPECT_EQ(line,
            "2026-12-03T05:14:10.123Z WARN session peer=10.0.0.2:7400 "
            "outcome=\"UNAVAILABLE: failed to connect\" rows=12 empty=\"\" "
            "tricky=\"a\\\"b\\\\c\\nd=e\"");
}

TEST(LogLine, TextKeepsAMessageOnOneLine) {
  const std::string line = FormatLogLine(kWhen, LogLevel::kInfo,
                                         LogFormat::kText, "a\nb\tc\x01", {});
  EXPECT_EQ(line, "2026-12-03T05:14:10.123Z INFO a\\nb\\tc\\x01");
}

TEST(LogLine, JsonIsOneObjectWithTypedFields) {
  const std::string line = FormatLogLine(
      kWhen, LogLevel::kError, LogFormat::kJson, "store: a write failed",
      {{"error", absl::ResourceExhaustedError("No space left on device")},
       {"rows", 7},
       {"ratio", 0.5},
       {"dry_run", true},
       {"took", absl::Milliseconds(1500)}});
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const nlohmann::json parsed = nlohmann::json::parse(line);
  EXPECT_EQ(parsed["time"], "2026-12-03T05:14:10.123Z");
  EXPECT_EQ(parsed["level"], "error");
  EXPECT_EQ(parsed["msg"], "store: a write failed");
  EXPECT_EQ(parsed["error"], "RESOURCE_EXHAUSTED: No space left on device");
  EXPECT_EQ(parsed["rows"], 7);
  EXPECT_EQ(parsed["ratio"], 0.5);
  EXPECT_EQ(parsed["dry_run"], true);
  EXPECT_EQ(parsed["took"], "1.5s");
  // The order is the order given: time, level, msg, then the fields.
  EXPECT_LT(line.find("\"time\""), line.find("\"level\""));
  EXPECT_LT(line.find("\"msg\":"), line.find("\"error\":"));
}

TEST(LogLine, JsonReplacesBytesThatAreNotUtf8) {
  const std::string line =
      FormatLogLine(kWhen, LogLevel::kInfo, LogFormat::kJson, "key",
                    {{"key", std::string("a\xff\xfe")}});
  const nlohmann::json parsed = nlohmann::json::parse(line);
  EXPECT_THAT(parsed["key"].get<std::string>(), HasSubstr("a"));
}

TEST(LogLine, NotANumberIsAStringInJson) {
  const std::string line = FormatLogLine(
      kWhen, LogLevel::kInfo, LogFormat::kJson, "m", {{"nan", std::nan("")}});
  EXPECT_NO_THROW(nlohmann::json::parse(line));
}

TEST(LogSettings, LevelsAndFormatsParseAndNameThemselves) {
  EXPECT_EQ(*ParseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_EQ(*ParseLogLevel("WARN"), LogLevel::kWarning);
  EXPECT_EQ(*ParseLogLevel("warning"), LogLevel::kWarning);
  EXPECT_EQ(*ParseLogLevel("error"), LogLevel::kError);
  EXPECT_THAT(ParseLogLevel("loud").status().message(),
              HasSubstr("debug, info, warning, error"));
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  EXPECT_FALSE(ParseLogFormat("xml").ok());
  EXPECT_EQ(LogLevelName(LogLevel::kWarning), "warning");
  EXPECT_EQ(LogFormatName(LogFormat::kJson), "json");
}

TEST(LogSettings, TheLevelDecidesWhatIsWritten) {
  SetLogLevel(LogLevel::kWarning);
  EXPECT_FALSE(LogEnabled(LogLevel::kInfo));
  EXPECT_TRUE(LogEnabled(LogLevel::kWarning));
  EXPECT_TRUE(LogEnabled(LogLevel::kError));
  SetLogLevel(LogLevel::kInfo);
  EXPECT_TRUE(LogEnabled(LogLevel::kInfo));
  EXPECT_FALSE(LogEnabled(LogLevel::kDebug));
}

// Under systemd each line carries its priority for journald, so that
// `journalctl -p warning` finds the warnings (it found nothing: every line
// was "info").
TEST(Log, UnderTheJournalEachLineCarriesItsPriority) {
  EXPECT_EQ(JournalPriorityPrefix(LogLevel::kError), "<3>");
  EXPECT_EQ(JournalPriorityPrefix(LogLevel::kWarning), "<4>");
  EXPECT_EQ(JournalPriorityPrefix(LogLevel::kInfo), "<6>");
  EXPECT_EQ(JournalPriorityPrefix(LogLevel::kDebug), "<7>");
  EXPECT_TRUE(IsJournalStream("8:12345", 8, 12345));
  EXPECT_FALSE(IsJournalStream("8:12345", 8, 12346));  // another stream
  EXPECT_FALSE(IsJournalStream(nullptr, 8, 12345));    // not under systemd
  for (const char* bad : {"", "8", "8:", ":1", "x:1", "8:1:2"}) {
    EXPECT_FALSE(IsJournalStream(bad, 8, 1)) << bad;
  }
}

// Bytes from a config file or a client (a terminal's escape sequences,
// bytes that are not UTF-8) never reach the terminal raw: before, a config
// value with "\x1b[31m" turned the operator's terminal red.
TEST(Log, ControlBytesAndInvalidUtf8AreEscaped) {
  EXPECT_EQ(EscapeForLog("5\x01\xff\x1b[31mred caf\xc3\xa9 \xed\xa0\x80"),
            "5\\x01\\xff\\x1b[31mred caf\xc3\xa9 \\xed\\xa0\\x80");
  EXPECT_EQ(QuoteLogValue("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(QuoteLogValue("a\xff"
                          "b"),
            "\"a\\xffb\"");
  EXPECT_EQ(FormatLogLine(kWhen, LogLevel::kError, LogFormat::kText,
                          "bad \x9b"
                          "2J",
                          {{"v", "\x1b]0;x\x07"}}),
            "2026-12-03T05:14:10.123Z ERROR bad \\x9b2J "
            "v=\"\\x1b]0;x\\x07\"");
}

}  // namespace
}  // namespace node
}  // namespace tally
