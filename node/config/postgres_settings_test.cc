#include "node/config/postgres_settings.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tally {
namespace node {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(MaskConninfo, MasksTheUrlPasswordAndKeepsTheRest) {
  EXPECT_EQ(MaskConninfo("postgresql://tally:s3cret@db.example:5432/app"),
            "postgresql://tally:********@db.example:5432/app");
  EXPECT_EQ(MaskConninfo("postgres://u:p%40ss@h/app?sslmode=require"),
            "postgres://u:********@h/app?sslmode=require");
  EXPECT_EQ(MaskConninfo("postgresql://u@h/app?password=s3cret&sslmode=off"),
            "postgresql://u@h/app?password=********&sslmode=off");
  EXPECT_EQ(MaskConninfo("postgresql://u@127.0.0.1:5432/app"),
            "postgresql://u@127.0.0.1:5432/app");
}

TEST(ConninfoOrigin, NamesTheDatabaseWithoutUserPasswordOrParameters) {
  EXPECT_EQ(ConninfoOrigin("postgresql://reader:s3cret@master.example:5432/"
                           "app?sslmode=require&password=x"),
            "postgresql://master.example:5432/app");
  EXPECT_EQ(ConninfoOrigin("postgres://reader@master/app"),
            "postgresql://master/app");
  EXPECT_EQ(ConninfoOrigin("postgresql:///app?host=10.0.0.3&port=6432"),
            "postgresql://10.0.0.3:6432/app");
  EXPECT_EQ(ConninfoOrigin("host=m dbname='my app' password=s3cret"),
            "postgresql://m/my%20app");
  EXPECT_EQ(ConninfoOrigin("postgresql://m/app?no_such_option=1"),
            "postgresql://unparsable");
}

TEST(IsPostgresUrl, TellsAUrlFromAKeywordString) {
  EXPECT_TRUE(IsPostgresUrl("postgresql://m/app"));
  EXPECT_TRUE(IsPostgresUrl("postgres://m/app"));
  EXPECT_FALSE(IsPostgresUrl("host=m dbname=app"));
  EXPECT_FALSE(IsPostgresUrl("10.0.0.2:7400"));
}

TEST(MaskConninfo, MasksAKeywordPasswordWhateverItsQuoting) {
  const std::string masked =
      MaskConninfo("host=127.0.0.1 port=5432 dbname=app password='a b\\'c'");
  EXPECT_THAT(masked, Not(HasSubstr("a b")));
  EXPECT_THAT(masked, HasSubstr("password=********"));
  EXPECT_THAT(masked, HasSubstr("host=127.0.0.1"));
  EXPECT_THAT(masked, HasSubstr("dbname=app"));
  EXPECT_THAT(MaskConninfo("dbname=app password=s3cret"),
              Not(HasSubstr("s3cret")));
}

TEST(MaskConninfo, ShowsNothingOfAStringLibpqCannotParse) {
  EXPECT_EQ(MaskConninfo("password=s3cret host='unclosed"),
            "<unparsable connection string>");
}

TEST(ValidateConninfo, AcceptsUrlsAndKeywordStringsAndNamesTheSyntaxError) {
  EXPECT_TRUE(ValidateConninfo("postgresql://tally@127.0.0.1:5432/app").ok());
  EXPECT_TRUE(ValidateConninfo("host=/tmp port=5 dbname=app").ok());
  absl::Status bad = ValidateConninfo("nosuchkeyword=1 dbname=app");
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()), HasSubstr("nosuchkeyword"));
  EXPECT_EQ(ValidateConninfo("").code(), absl::StatusCode::kInvalidArgument);
}

// libpq's own messages quote what they could not parse, which can be the
// password itself.
TEST(ValidateConninfo, NeverRepeatsAPasswordLibpqQuotes) {
  for (const char* bad : {"host=h password s3cret", "password=x s3cret",
                          "postgresql://u:s3cret@[h/db"}) {
    absl::Status s = ValidateConninfo(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()), Not(HasSubstr("s3cret"))) << bad;
    EXPECT_THAT(std::string(s.message()), HasSubstr("<withheld")) << bad;
  }
  // Without a password, libpq's words stay whole.
  EXPECT_THAT(std::string(ValidateConninfo("host=h dbname").message()),
              HasSubstr("\"dbname\""));
}

TEST(ParseQualifiedTable, SplitsSchemaAndTable) {
  absl::StatusOr<QualifiedTable> t = ParseQualifiedTable("public.users");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->schema, "public");
  EXPECT_EQ(t->table, "users");
  EXPECT_TRUE(ParseQualifiedTable("_s1.Order_Items2").ok());
}

TEST(ParseQualifiedTable, RefusesNamesOutsideTheRule) {
  for (const char* bad :
       {"users", "a.b.c", ".users", "public.", "public.1st", "public.us-ers",
        "public.\"Users\"", "pub lic.users"}) {
    EXPECT_EQ(ParseQualifiedTable(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_THAT(std::string(ParseQualifiedTable("users").status().message()),
              HasSubstr("SCHEMA.TABLE"));
  EXPECT_THAT(std::string(ParseQualifiedTable("public." + std::string(64, 'a'))
                              .status()
                              .message()),
              HasSubstr("at most 63"));
  EXPECT_TRUE(ParseQualifiedTable("public." + std::string(63, 'a')).ok());
}

}  // namespace
}  // namespace node
}  // namespace tally
