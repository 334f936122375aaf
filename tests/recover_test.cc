// A damaged data directory and a full disk, end to end: tallyd refuses to
// open a store it would otherwise silently empty or shorten, `tally recover`
// salvages it, and a node whose disk filled up loses no acknowledged write.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "tests/disk_damage.h"
#include "tests/health_check.h"

namespace tally {
namespace {

using ::tally::testing::CommandResult;
using ::tally::testing::HealthCheck;
using ::tally::testing::NodeProcess;
using ::tally::testing::RunTally;
using ::tally::testing::ScopedTmpfs;
using ::tally::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

const std::vector<std::string> kNoSync = {"--sync-writes", "false"};

std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Starts a node on `dir`, loads `rows` synthetic rows (key-0...), stops it.
void MakeStore(const std::string& dir, int rows) {
  auto node = NodeProcess::Start("a", dir, kNoSync);
  ASSERT_TRUE(node.ok()) << node.status();
  const CommandResult load = RunTally(
      {"--node", (*node)->address(), "load", "--count", absl::StrCat(rows)});
  ASSERT_EQ(load.exit_code, 0) << load.err;
  ASSERT_EQ((*node)->Stop(), 0);
}

// tallyd on `dir` serves key-0 and key-<rows-1>.
void ExpectServes(const std::string& dir, int rows) {
  auto node = NodeProcess::Start("a", dir, kNoSync);
  ASSERT_TRUE(node.ok()) << node.status();
  for (const std::string& key :
       {std::string("key-0"), absl::StrCat("key-", rows - 1)}) {
    const CommandResult get =
        RunTally({"--node", (*node)->address(), "get", key});
    EXPECT_EQ(get.exit_code, 0) << key << ": " << get.err;
  }
  EXPECT_EQ((*node)->Stop(), 0);
}

// CURRENT deleted: before the fix tallyd made a new empty store over the
// old one (deleting its 60,000 rows' tables) and served it.
TEST(Recover, TallydRefusesAStoreWithoutCurrentAndTallyRecoverBringsItBack) {
  TempDir dir;
  constexpr int kRows = 5000;
  MakeStore(dir.path(), kRows);
  ASSERT_TRUE(std::filesystem::remove(dir.path() + "/CURRENT"));
  const std::vector<std::string> files = FilesIn(dir.path());

  auto refused = NodeProcess::Start("a", dir.path(), kNoSync);
  ASSERT_FALSE(refused.ok()) << "tallyd started on a store without CURRENT";
  EXPECT_THAT(refused.status().message(), HasSubstr("CURRENT file is missing"));
  EXPECT_THAT(refused.status().message(),
              HasSubstr("tally recover --data-dir " + dir.path()));
  std::vector<std::string> after = FilesIn(dir.path());
  // tallyd may leave LevelDB's LOCK and LOG; nothing else changes.
  for (const char* name : {"LOCK", "LOG", "LOG.old"}) {
    after.erase(std::remove(after.begin(), after.end(), name), after.end());
  }
  std::vector<std::string> before = files;
  for (const char* name : {"LOCK", "LOG", "LOG.old"}) {
    before.erase(std::remove(before.begin(), before.end(), name), before.end());
  }
  EXPECT_EQ(after, before);

  const CommandResult recover = RunTally({"recover", "--data-dir", dir.path()});
  ASSERT_EQ(recover.exit_code, 0) << recover.out << recover.err;
  EXPECT_THAT(recover.out, HasSubstr(absl::StrCat(kRows, " rows, sound")));
  EXPECT_THAT(recover.out, HasSubstr("anti-entropy"));
  const CommandResult verify = RunTally({"verify", "--data-dir", dir.path()});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  ExpectServes(dir.path(), kRows);
}

TEST(Recover, TallydRefusesADamagedLogAndTallyRecoverSalvagesTheRest) {
  TempDir dir;
  constexpr int kRows = 3000;
  MakeStore(dir.path(), kRows);
  std::string log;
  for (const std::string& name : FilesIn(dir.path())) {
    if (absl::EndsWith(name, ".log")) log = dir.path() + "/" + name;
  }
  ASSERT_FALSE(log.empty());
  const uintmax_t size = std::filesystem::file_size(log);
  ASSERT_GT(size, 100'000u);
  {
    std::fstream f(log, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size / 2));
    f.write("\xde\xad\xbe\xef", 4);
  }
  auto refused = NodeProcess::Start("a", dir.path(), kNoSync);
  ASSERT_FALSE(refused.ok()) << "tallyd started on a damaged log";
  EXPECT_THAT(refused.status().message(), HasSubstr("is damaged"));
  EXPECT_THAT(refused.status().message(), HasSubstr("tally recover"));

  const CommandResult recover = RunTally({"recover", "--data-dir", dir.path()});
  ASSERT_EQ(recover.exit_code, 0) << recover.out << recover.err;
  EXPECT_THAT(recover.out, HasSubstr("sound"));
  ExpectServes(dir.path(), 1);
}

// Damaged bytes in the table files (one flipped every 100,003 bytes):
// before the fix `tally recover` died of a LevelDB assertion halfway through
// (SIGABRT), leaving a store that tallyd and verify then reported as having
// lost its log, and `tally verify` read garbage keys or aborted too.
TEST(Recover, DamagedTablesAreReportedByVerifyAndSalvagedByRecover) {
  TempDir dir;
  constexpr int kRows = 60000;
  MakeStore(dir.path(), kRows);
  ExpectServes(dir.path(), kRows);  // its open turns the log into a table
  const int flipped =
      ::tally::testing::FlipBytesEvery(dir.path(), 1017, 100'003);
  ASSERT_GT(flipped, 10);

  const CommandResult verify = RunTally({"verify", "--data-dir", dir.path()});
  EXPECT_EQ(verify.exit_code, 1) << verify.out << verify.err;
  EXPECT_THAT(verify.out, HasSubstr("problem: damaged table"));
  EXPECT_THAT(verify.out, HasSubstr("tally recover --data-dir"));

  const CommandResult recover = RunTally({"recover", "--data-dir", dir.path()});
  ASSERT_EQ(recover.exit_code, 0) << recover.out << recover.err;
  EXPECT_THAT(recover.out, HasSubstr("damaged table: "));
  EXPECT_THAT(recover.out, HasSubstr("sound"));
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/lost"));

  const CommandResult again = RunTally({"verify", "--data-dir", dir.path()});
  EXPECT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_THAT(again.out, HasSubstr("sound"));
  auto node = NodeProcess::Start("a", dir.path(), kNoSync);
  ASSERT_TRUE(node.ok()) << node.status();
  const CommandResult put =
      RunTally({"--node", (*node)->address(), "put", "after", "v"});
  EXPECT_EQ(put.exit_code, 0) << put.err;
  EXPECT_EQ((*node)->Stop(), 0);
}

TEST(Recover, RecoverRefusesADirectoryWithoutAStoreOrARunningNode) {
  TempDir dir;
  const CommandResult empty = RunTally({"recover", "--data-dir", dir.path()});
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_THAT(empty.err, HasSubstr("nothing to recover"));
  auto node = NodeProcess::Start("a", dir.path(), kNoSync);
  ASSERT_TRUE(node.ok()) << node.status();
  const CommandResult locked = RunTally({"recover", "--data-dir", dir.path()});
  EXPECT_EQ(locked.exit_code, 2);
  EXPECT_THAT(locked.err, HasSubstr("stop it first"));
  EXPECT_EQ((*node)->Stop(), 0);
}

// A disk-full episode on a real (tmpfs) file system, as root:
// writes fail, space is freed, more writes come; before the fix they were
// acknowledged and gone after a restart. Now the node refuses them until it
// is restarted, and every acknowledged write is there afterwards.
TEST(DiskFull, TallydRefusesWritesAfterADiskFullAndLosesNoAcknowledgedWrite) {
  TempDir dir;
  absl::StatusOr<std::unique_ptr<ScopedTmpfs>> tmpfs =
      ScopedTmpfs::Mount(dir.path() + "/fs", 4 << 20);
  if (!tmpfs.ok()) GTEST_SKIP() << tmpfs.status();
  const std::string& fs = (*tmpfs)->path();
  const std::string data = fs + "/data";
  const std::string filler = fs + "/filler";
  { std::ofstream(filler, std::ios::binary) << std::string(1 << 20, 'f'); }

  std::map<std::string, std::string> acknowledged;
  int refused = 0;
  {
    auto node = NodeProcess::Start("a", data);
    ASSERT_TRUE(node.ok()) << node.status();
    const std::string address = (*node)->address();
    EXPECT_EQ(HealthCheck(address, ""), std::string("\x08\x01", 2));
    bool full = false;
    for (int i = 0; i < 200 && !full; ++i) {
      const std::string key = absl::StrCat("full-", i);
      const std::string value(60'000, static_cast<char>('a' + i % 26));
      const CommandResult put =
          RunTally({"--node", address, "put", key, value});
      if (put.exit_code == 0) {
        acknowledged[key] = value;
      } else {
        EXPECT_THAT(put.err, HasSubstr("No space left on device"));
        full = true;
      }
    }
    ASSERT_TRUE(full) << "the tmpfs never filled";
    std::filesystem::remove(filler);
    for (int i = 0; i < 5; ++i) {
      const std::string key = absl::StrCat("after-", i);
      const CommandResult put = RunTally({"--node", address, "put", key, "v"});
      if (put.exit_code == 0) {
        acknowledged[key] = "v";
      } else {
        ++refused;
        EXPECT_THAT(put.err, HasSubstr("restart"));
        // The node answered: it is not "unreachable".
        EXPECT_THAT(put.err, AllOf(HasSubstr("is unavailable"),
                                   Not(HasSubstr("unreachable"))));
      }
    }
    EXPECT_THAT((*node)->Log(), HasSubstr("NOT_SERVING"));
    EXPECT_EQ(HealthCheck(address, ""), std::string("\x08\x02", 2));
    // Status says why, in text and JSON, so that an operator (or an alert
    // on tally_store_writable) sees it without reading the log.
    const CommandResult status = RunTally({"--node", address, "status"});
    EXPECT_THAT(status.out, HasSubstr("REFUSING WRITES until restarted"));
    const CommandResult json =
        RunTally({"--node", address, "--json", "status"});
    EXPECT_THAT(json.out, HasSubstr("\"store_write_error\":\""));
    // Reads go on.
    EXPECT_EQ(RunTally({"--node", address, "get", "full-0"}).exit_code, 0);
    EXPECT_EQ((*node)->Stop(), 0);
  }
  EXPECT_EQ(refused, 5);
  auto node = NodeProcess::Start("a", data);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ(HealthCheck((*node)->address(), ""), std::string("\x08\x01", 2));
  EXPECT_THAT(RunTally({"--node", (*node)->address(), "--json", "status"}).out,
              HasSubstr("\"store_write_error\":null"));
  for (const auto& [key, value] : acknowledged) {
    const CommandResult get =
        RunTally({"--node", (*node)->address(), "get", key});
    ASSERT_EQ(get.exit_code, 0) << key << ": " << get.err;
    EXPECT_EQ(get.out, value + "\n") << key;
  }
  EXPECT_EQ(
      RunTally({"--node", (*node)->address(), "put", "again", "v"}).exit_code,
      0);
  EXPECT_EQ((*node)->Stop(), 0);
}

}  // namespace
}  // namespace tally
