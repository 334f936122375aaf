// `tallyd --check-config` as an operator runs it: the real binary, a real
// file, flags over it; exit 0 with the settings on stdout, or exit 2 with
// the error naming the file and line. It opens no store and binds no port.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
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

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

// A loopback port held (bound and listening) while the object lives.
class HeldPort {
 public:
  HeldPort() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) ==
            0 &&
        listen(fd_, 1) == 0 &&
        getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
      address_ = absl::StrCat("127.0.0.1:", ntohs(address.sin_port));
    }
  }
  ~HeldPort() { close(fd_); }
  const std::string& address() const { return address_; }

 private:
  int fd_ = -1;
  std::string address_;
};

TEST(CheckConfig, PrintsTheSettingsAFileAndFlagsMake) {
  TempDir dir;
  const std::string conf = dir.path() + "/tallyd.conf";
  const std::string data = dir.path() + "/data";
  Write(conf, absl::StrCat("# a node\n"
                           "name = eu-west/db-3\n"
                           "data-dir = ",
                           data,
                           "\n"
                           "peer = 127.0.0.1:7401\n"
                           "sync-interval = 5s  # often\n"
                           "tls-ca = \"\"  ; unset below\n"));
  // An empty value is refused, naming the file and line ...
  CommandResult r = RunCommand(
      {TallydPath(), "--check-config", "--config", conf}, absl::Seconds(10));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr(conf + ":6:"),
                           HasSubstr("tls-ca has an empty value")));
  EXPECT_EQ(r.out, "");

  // ... and once fixed, the file plus the flags are valid. The listen and
  // metrics ports are held by this test: a start would fail to bind them.
  Write(conf, absl::StrCat("# a node\n"
                           "name = eu-west/db-3\n"
                           "data-dir = ",
                           data,
                           "\n"
                           "peer = 127.0.0.1:7401\n"
                           "sync-interval = 5s  # often\n"
                           "postgres = postgresql://tally:s3cret@127.0.0.1/"
                           "app\n"
                           "table = public.users\n"));
  HeldPort listen;
  HeldPort metrics;
  ASSERT_FALSE(listen.address().empty());
  r = RunCommand({TallydPath(), "--check-config", "--config", conf,
                  "--sync-interval", "7s", "--listen", listen.address(),
                  "--metrics-listen", metrics.address()},
                 absl::Seconds(10));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("name = eu-west/db-3\n"),
                           HasSubstr("peer = 127.0.0.1:7401\n"),
                           HasSubstr("sync-interval = 7s\n"),
                           HasSubstr("listen = " + listen.address() + "\n"),
                           HasSubstr("max-sessions = 2\n"),
                           HasSubstr("postgres = postgresql://tally:********@"),
                           HasSubstr("table = public.users\n")));
  EXPECT_THAT(r.out, Not(HasSubstr("s3cret")));
  EXPECT_THAT(r.err, HasSubstr("valid"));
  // No store was opened (nor created).
  EXPECT_FALSE(std::filesystem::exists(data));

  // What it printed is a config file giving the same settings (the masked
  // password is a password too).
  const std::string printed = dir.path() + "/printed.conf";
  Write(printed, r.out);
  const CommandResult again = RunCommand(
      {TallydPath(), "--check-config", "--config", printed}, absl::Seconds(10));
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.out, r.out);
}

TEST(CheckConfig, RefusesWhatAStartWouldRefuse) {
  TempDir dir;
  const std::string conf = dir.path() + "/tallyd.conf";
  Write(conf, "name = a\ndata-dir = /tmp/x\nsync-intervall = 5s\n");
  CommandResult r = RunCommand(
      {TallydPath(), "--check-config", "--config", conf}, absl::Seconds(10));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, AllOf(HasSubstr(conf + ":3: unknown setting"),
                           HasSubstr("did you mean 'sync-interval'?")));
  EXPECT_EQ(r.out, "");

  // The checks of the whole config, as at start: a non-loopback listen
  // without TLS.
  Write(conf, "name = a\ndata-dir = /tmp/x\n");
  r = RunCommand({TallydPath(), "--check-config", "--config", conf, "--listen",
                  "0.0.0.0:7400"},
                 absl::Seconds(10));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--insecure"));
  // A bad flag over a good file.
  r = RunCommand(
      {TallydPath(), "--check-config", "--config", conf, "--max-sessions", "0"},
      absl::Seconds(10));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--max-sessions"));
  // And --check-config itself takes no value.
  r = RunCommand({TallydPath(), "--check-config=yes", "--config", conf},
                 absl::Seconds(10));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("takes no value"));
}

// A config value with a terminal's escape sequence and bytes that are not
// UTF-8: before, the error line echoed them raw (the operator's terminal
// turned red); now they are C-escaped.
TEST(CheckConfig, RawBytesInAnErrorAreEscaped) {
  TempDir dir;
  const std::string conf = dir.path() + "/tallyd.conf";
  Write(conf,
        "name = a\ndata-dir = /tmp/x\nsync-interval = 5\x01\xff\x1b[31mred\n");
  const CommandResult r = RunCommand(
      {TallydPath(), "--check-config", "--config", conf}, absl::Seconds(10));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("'5\\x01\\xff\\x1b[31mred' is not a duration"));
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\xff'), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tally
