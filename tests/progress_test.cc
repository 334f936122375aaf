// Multi-process tests of the progress of long work: a total
// and a time left where the work has a true total — a bootstrap's rows, a
// file's bytes, a repair into an empty node — and "unknown" where it has
// none, in status, on the status page's data, and in the periodic
// {"progress": ...} lines of `tally load|repair|sync --json`. Real tallyd
// processes and the real tally. Nothing here asserts a speed: the work is
// slowed (a bandwidth limit, a stopped node) only so that it lasts long
// enough to be seen running.
#include <signal.h>
#include <sys/types.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/client/client.h"
#include "support/pg_test_macros.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "tests/node_connect.h"
#include "tests/node_under_test.h"
#include "tests/pg/pg_sidecar_helpers.h"
#include "tests/wait_for.h"

namespace tally {
namespace {

using ::tally::testing::CommandResult;
using ::tally::testing::Connect;
using ::tally::testing::NodeProcess;
using ::tally::testing::Rows;
using ::tally::testing::RunCommand;
using ::tally::testing::RunTally;
using ::tally::testing::StartNode;
using ::tally::testing::Status;
using ::tally::testing::TallyPath;
using ::tally::testing::TempDir;
using ::testing::HasSubstr;

constexpr char kKeyspace[] = "default";

// Waits up to 60 s for `done`: a bootstrap slowed down to be seen.
bool WaitFor(const std::function<bool()>& done) {
  return ::tally::testing::WaitFor(done, absl::Seconds(60));
}

// `rows` rows of ~40 bytes ("<prefix>-00042" and 30 bytes) into `address`.
void LoadRows(const std::string& address, const std::string& prefix, int rows) {
  int i = 0;
  auto loaded =
      Connect(address)->Load(kKeyspace, [&](std::string* k, std::string* v) {
        if (i == rows) return false;
        *k = absl::StrFormat("%s-%05d", prefix, i++);
        *v = std::string(30, 'x');
        return true;
      });
  ASSERT_TRUE(loaded.ok()) << loaded.status();
}

// The lines of `out` that start with `prefix`.
std::vector<std::string> LinesStarting(const std::string& out,
                                       const std::string& prefix) {
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    if (absl::StartsWith(line, prefix)) lines.emplace_back(line);
  }
  return lines;
}

const std::regex kEtaNumber("\"eta_seconds\":[0-9]");

// A node that copies a source from nothing (a bootstrap) knows
// the rows it will receive — the source's — and shows them as its
// session's total with a rate and a time left, in Admin.Status, `tally
// status` and its --json.
TEST(Progress, ABootstrapFromASourceHasTheSourcesRowsAsItsTotal) {
  TempDir dir_source, dir_copy;
  auto source = StartNode("source", dir_source.path());
  ASSERT_TRUE(source);
  LoadRows(source->address(), "key", 50000);
  // ~2 MB at 0.25 MB/s: the session runs for several seconds.
  auto copy =
      StartNode("copy", dir_copy.path(),
                {"--peer", absl::StrCat(source->address(), ",role=source"),
                 "--sync-interval", "1h", "--repair-bandwidth", "0.25"});
  ASSERT_TRUE(copy);

  // While it runs, once a batch has moved: a total, a rate and a time left.
  v1::SessionProgress running;
  ASSERT_TRUE(WaitFor([&] {
    const v1::StatusResponse s = Status(copy->address());
    if (s.peers_size() != 1) return false;
    running = s.peers(0).session();
    return s.peers(0).session_running() && running.rows_received() > 0 &&
           running.has_eta_seconds();
  })) << copy->Log();
  ASSERT_TRUE(running.has_rows_expected());
  EXPECT_EQ(running.rows_expected(), 50000u);
  EXPECT_LT(running.rows_received(), 50000u);
  EXPECT_GT(running.rows_per_second(), 0);
  EXPECT_GT(running.eta_seconds(), 0);

  const CommandResult text = RunTally({"status", "--node", copy->address()});
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(std::regex_search(
      text.out,
      std::regex(absl::StrCat("session with ", source->address(),
                              ": [0-9]+ of 50000 rows \\([0-9]+%\\), [0-9]+ "
                              "rows/s, ETA [0-9]"))))
      << text.out;
  const CommandResult json =
      RunTally({"status", "--node", copy->address(), "--json"});
  EXPECT_EQ(json.exit_code, 0) << json.err;
  EXPECT_THAT(json.out, HasSubstr("\"rows_expected\":50000"));

  ASSERT_TRUE(WaitFor([&] { return Rows(copy->address()) == 50000; }))
      << copy->Log();
  EXPECT_EQ(copy->Stop(), 0);
  EXPECT_EQ(source->Stop(), 0);
}

// `tally sync --json`: its progress lines and its result carry the
// session's total where the row counts give one (an empty peer), and null
// where they do not (two full nodes: anything from no row to all of them
// may move).
TEST(Progress, SyncShowsATotalIntoAnEmptyPeerAndNoneBetweenFullNodes) {
  TempDir dir_a, dir_b;
  auto b = StartNode("node-b", dir_b.path());
  ASSERT_TRUE(b);
  auto a = StartNode("node-a", dir_a.path(),
                     {"--peer", b->address(), "--sync-interval", "1h",
                      "--repair-bandwidth", "0.05"});
  ASSERT_TRUE(a);
  // The first (scheduled) session found both empty.
  ASSERT_TRUE(WaitFor([&] {
    const v1::StatusResponse s = Status(a->address());
    return s.peers_size() == 1 && s.peers(0).sessions_ok() > 0 &&
           !s.peers(0).session_running();
  })) << a->Log();
  LoadRows(a->address(), "a", 5000);  // ~200 KB at 0.05 MB/s: ~4 s

  CommandResult r = RunTally({"sync", a->address(), "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
  const std::vector<std::string> progress =
      LinesStarting(r.out, "{\"progress\"");
  ASSERT_FALSE(progress.empty()) << r.out;
  // The last progress line of the running session: 5,000 rows to move.
  EXPECT_THAT(progress.back(), HasSubstr("\"rows_expected\":5000")) << r.out;
  EXPECT_THAT(r.out, HasSubstr("\"rows_per_second\":"));
  const std::vector<std::string> result = LinesStarting(r.out, "{\"result\"");
  ASSERT_EQ(result.size(), 1u) << r.out;
  EXPECT_THAT(result[0], HasSubstr("\"rows_expected\":5000"));
  EXPECT_EQ(Rows(b->address()), 5000u);

  // Both full now (and b has rows a lacks): no total.
  LoadRows(b->address(), "b", 100);
  r = RunTally({"sync", a->address(), "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
  const std::vector<std::string> again = LinesStarting(r.out, "{\"result\"");
  ASSERT_EQ(again.size(), 1u) << r.out;
  EXPECT_THAT(again[0], HasSubstr("\"rows_expected\":null"));
  EXPECT_THAT(again[0], HasSubstr("\"eta_seconds\":null"));
  EXPECT_EQ(a->Stop(), 0);
  EXPECT_EQ(b->Stop(), 0);
}

// `tally repair --json` into an empty node: progress lines with the rows to
// copy as the total and a time left, whether node A runs the repair or
// this tool does (--third-party); a two-way repair of two full nodes has
// no total, and says so.
TEST(Progress, RepairIntoAnEmptyNodeHasATotalAndATimeLeft) {
  for (const bool third_party : {false, true}) {
    SCOPED_TRACE(third_party ? "from the tool" : "on node A");
    TempDir dir_a, dir_b;
    auto a = StartNode("node-a", dir_a.path());
    auto b = StartNode("node-b", dir_b.path());
    ASSERT_TRUE(a && b);
    LoadRows(a->address(), "a", 5000);  // ~200 KB at 0.05 MB/s: ~4 s
    std::vector<std::string> args = {
        "repair",     a->address(),       b->address(), "--source",
        a->address(), "--bandwidth=0.05", "--json"};
    if (third_party) args.push_back("--third-party");
    CommandResult r = RunTally(args);
    EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
    const std::vector<std::string> progress =
        LinesStarting(r.out, "{\"progress\"");
    ASSERT_FALSE(progress.empty()) << r.out;
    EXPECT_THAT(progress[0], HasSubstr("\"total\":5000,\"unit\":\"rows\""))
        << r.out;
    // Before the end, the time left is a number.
    EXPECT_TRUE(std::regex_search(progress[0], kEtaNumber)) << progress[0];
    EXPECT_THAT(r.out, HasSubstr("{\"summary\":"));
    EXPECT_EQ(Rows(b->address()), 5000u);

    // Two full nodes, two-way: rows to copy unknown.
    LoadRows(a->address(), "more", 3000);
    LoadRows(b->address(), "other", 3000);
    args = {"repair", a->address(), b->address(), "--bandwidth=0.05", "--json"};
    if (third_party) args.push_back("--third-party");
    r = RunTally(args);
    EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
    const std::vector<std::string> unknown =
        LinesStarting(r.out, "{\"progress\"");
    ASSERT_FALSE(unknown.empty()) << r.out;
    EXPECT_THAT(unknown[0], HasSubstr("\"total\":null"));
    EXPECT_THAT(unknown[0], HasSubstr("\"eta_seconds\":null"));
    EXPECT_EQ(a->Stop(), 0);
    EXPECT_EQ(b->Stop(), 0);
  }
}

// `tally load --json`: a file's size is the total of its progress lines
// (bytes read of it) with a time left; a pipe's is unknown. The node is
// stopped for a moment (SIGSTOP) so that the load lasts past its first
// progress line.
TEST(Progress, LoadOfAFileHasItsSizeAsTotalAndOfAPipeNone) {
  TempDir dir;
  auto node = StartNode("node", dir.path());
  ASSERT_TRUE(node);
  const std::string path = dir.path() + "/rows.jsonl";
  {
    std::ofstream out(path);
    for (int i = 0; i < 200000; ++i) {
      out << absl::StrFormat("{\"key\": \"k%06d\", \"value\": \"%s\"}\n", i,
                             std::string(40, 'v'));
    }
  }
  const uint64_t size = std::filesystem::file_size(path);

  // Runs `argv` while the node is stopped for 1.5 s.
  auto run_stalled = [&](const std::vector<std::string>& argv) {
    CommandResult r;
    EXPECT_EQ(kill(node->pid(), SIGSTOP), 0);
    std::thread load([&] { r = RunCommand(argv); });
    absl::SleepFor(absl::Milliseconds(1500));
    EXPECT_EQ(kill(node->pid(), SIGCONT), 0);
    load.join();
    return r;
  };
  const CommandResult file =
      run_stalled({TallyPath(), "load", "--node", node->address(), "--file",
                   path, "--json"});
  EXPECT_EQ(file.exit_code, 0) << file.err << file.out;
  std::vector<std::string> progress = LinesStarting(file.out, "{\"progress\"");
  ASSERT_FALSE(progress.empty()) << file.out;
  EXPECT_THAT(progress[0], HasSubstr(absl::StrCat("\"total\":", size,
                                                  ",\"unit\":\"bytes\"")));
  EXPECT_TRUE(std::regex_search(progress[0], kEtaNumber)) << progress[0];
  // The summary comes last, as before.
  EXPECT_THAT(file.out, HasSubstr("\"rows\":200000,"));
  EXPECT_EQ(Rows(node->address()), 200000u);

  // The same rows again, through a pipe (loading a row twice is harmless).
  const CommandResult pipe = run_stalled(
      {"/bin/bash", "-c",
       absl::StrCat("cat '", path, "' | '", TallyPath(), "' load --node ",
                    node->address(), " --file - --json")});
  EXPECT_EQ(pipe.exit_code, 0) << pipe.err << pipe.out;
  progress = LinesStarting(pipe.out, "{\"progress\"");
  ASSERT_FALSE(progress.empty()) << pipe.out;
  EXPECT_THAT(progress[0], HasSubstr("\"total\":null,\"unit\":\"bytes\""));
  EXPECT_THAT(progress[0], HasSubstr("\"eta_seconds\":null"));
  EXPECT_EQ(node->Stop(), 0);
}

// The PostgreSQL index build: each progress line of the log has the rate
// and the time left to the tables' estimate (pg_class.reltuples), and the
// build's part of status carries them. The last line comes as the build
// ends: all rows read, nothing left.
TEST(Progress, AnIndexBuildLogsItsRateAndTimeLeft) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<testing::PgCluster> pg = pgtest::StartTableCluster();
  ASSERT_TRUE(pg);
  ASSERT_TRUE(pg->Execute("INSERT INTO t SELECT g, g, 'row ' || g FROM "
                          "generate_series(1, 20000) g")
                  .ok());
  // An estimate for the build: ANALYZE reads all of a table this small.
  ASSERT_TRUE(pg->Execute("ANALYZE t").ok());
  TempDir dir;
  auto side = pgtest::StartSidecar("pg-a", dir.path(), *pg,
                                   testing::FreeLoopbackAddress(), {});
  ASSERT_TRUE(side);
  ASSERT_TRUE(pgtest::WaitFor(
      [&] { return pgtest::Following(side->address()); }, absl::Seconds(60)))
      << side->Log();
  const std::string log = side->Log();
  EXPECT_TRUE(std::regex_search(
      log, std::regex("build: 20000 of ~20000 rows read \\(public.t\\), "
                      "20000 written, [0-9]+ rows/s, ETA 0s")))
      << log;
  const std::string status = pgtest::StatusJson(side->address());
  EXPECT_THAT(status, HasSubstr("\"build_rows_per_second\":"));
  EXPECT_THAT(status, HasSubstr("\"build_eta_seconds\":"));
  EXPECT_THAT(status, HasSubstr("\"build_seconds\":"));
  EXPECT_EQ(side->Stop(), 0);
}

}  // namespace
}  // namespace tally
