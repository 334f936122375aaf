#include "tools/cli/commands/report_render.h"

#include <fstream>
#include <string>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/temp_dir.h"

namespace tally {
namespace cli {
namespace {

using ::tally::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kReport[] =
    R"({"report":"tally repair","a":"10.0.0.1:7400","b":"10.0.0.2:7400",)"
    R"("keyspace":"users","mode":"two-way","dry_run":false,)"
    R"("started":"2026-12-04T10:00:00Z"})"
    "\n"
    R"({"key":"user:1","a":{"hlc":"7","millis":1,"counter":0,)"
    R"("origin":"eu/db-1","time":"2026-12-04T09:00:00.000Z","deleted":false},)"
    R"("b":null,"action":"copy_to_b"})"
    "\n"
    R"({"key":"say \"hi\", <b>","a":null,"b":{"hlc":"9","millis":2,)"
    R"("counter":0,"origin":"us/db-2","time":"2026-12-04T09:30:00.000Z",)"
    R"("deleted":true},"action":"copy_to_a"})"
    "\n"
    R"({"summary":{"differences":2,"rows_to_a":1,"rows_to_b":1}})"
    "\n";

std::string Write(const TempDir& dir, const std::string& text) {
  const std::string path = dir.path() + "/report.jsonl";
  std::ofstream(path) << text;
  return path;
}

TEST(RenderRepairReport, CsvHasARowPerKeyQuotedAsRfc4180Says) {
  TempDir dir;
  absl::StatusOr<std::string> csv =
      RenderRepairReport(Write(dir, kReport), ReportFormat::kCsv);
  ASSERT_TRUE(csv.ok()) << csv.status();
  const std::vector<std::string> rows =
      absl::StrSplit(*csv, "\r\n", absl::SkipEmpty());
  ASSERT_EQ(rows.size(), 3u) << *csv;
  EXPECT_EQ(rows[0],
            "key,action,a_present,a_deleted,a_time,a_hlc,a_origin,b_present,"
            "b_deleted,b_time,b_hlc,b_origin,a_before,b_before,a_after,"
            "b_after");
  EXPECT_EQ(rows[1],
            "\"user:1\",\"copy_to_b\",\"yes\",\"no\","
            "\"2026-12-04T09:00:00.000Z\",\"7\",\"eu/db-1\",\"no\",\"\",\"\","
            "\"\",\"\",\"\",\"\",\"\",\"\"");
  EXPECT_THAT(rows[2], HasSubstr("\"say \"\"hi\"\", <b>\",\"copy_to_a\""));
  EXPECT_THAT(rows[2], HasSubstr("\"yes\",\"yes\",\"2026-12-04T09:30"));
}

TEST(RenderRepairReport, HtmlIsOnePageWithEveryKeyEscaped) {
  TempDir dir;
  absl::StatusOr<std::string> html =
      RenderRepairReport(Write(dir, kReport), ReportFormat::kHtml);
  ASSERT_TRUE(html.ok()) << html.status();
  EXPECT_THAT(*html, HasSubstr("<!DOCTYPE html>"));
  EXPECT_THAT(*html, HasSubstr("keyspace <b>users</b>"));
  EXPECT_THAT(*html, HasSubstr("<code>user:1</code></td><td>copy_to_b"));
  EXPECT_THAT(*html, HasSubstr("say &quot;hi&quot;, &lt;b&gt;"));
  EXPECT_THAT(*html, Not(HasSubstr("<b>\"")));
  EXPECT_THAT(*html, HasSubstr("<b>deleted</b>"));
  EXPECT_THAT(*html, HasSubstr("differences <b>2</b>"));
  EXPECT_THAT(*html, HasSubstr("2 keys"));
}

TEST(RenderRepairReport, ACutShortReportSaysSoAndBadInputIsNamed) {
  TempDir dir;
  std::string cut(kReport);
  cut.resize(cut.find("{\"summary\""));
  absl::StatusOr<std::string> html =
      RenderRepairReport(Write(dir, cut), ReportFormat::kHtml);
  ASSERT_TRUE(html.ok()) << html.status();
  EXPECT_THAT(*html, HasSubstr("did not finish"));

  EXPECT_EQ(
      RenderRepairReport(Write(dir, "{\"key\":\"x\"}\n"), ReportFormat::kCsv)
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RenderRepairReport(dir.path() + "/none", ReportFormat::kCsv)
                .status()
                .code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ParseReportFormat("pdf").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ParseReportFormat("csv").ok());
}

}  // namespace
}  // namespace cli
}  // namespace tally
