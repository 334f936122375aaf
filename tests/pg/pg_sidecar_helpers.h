// Helpers of the multi-process tests of the PostgreSQL sidecar
// (tests/pg/pg_sidecar_test.cc, pg_crash_test.cc, pg_verify_test.cc): a
// throwaway server with the table the tests use, tallyd sidecars on it, their
// `tally status --json`, and SQL that compares tables across databases.
//
//   std::unique_ptr<PgCluster> pg = StartTableCluster();
//   std::unique_ptr<NodeProcess> a =
//       StartSidecar("a", dir.path(), *pg, FreeLoopbackAddress(), {});
//   ASSERT_TRUE(WaitFor([&] { return Following(a->address()); },
//                       absl::Seconds(20)));
//   EXPECT_EQ(TableMd5(*pg, "t"), TableMd5(*other, "t"));
//
// Every helper reports its own failures through gtest (EXPECT) and answers
// something harmless ("", -1, null) then.
#ifndef TALLY_TESTS_PG_PG_SIDECAR_HELPERS_H_
#define TALLY_TESTS_PG_PG_SIDECAR_HELPERS_H_

#include <csignal>
#include <functional>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "support/pg_cluster.h"
#include "support/process.h"

namespace tally {
namespace pgtest {

using ::tally::testing::CommandResult;
using ::tally::testing::NodeProcess;
using ::tally::testing::PgCluster;
using ::tally::testing::PgClusterOptions;
using ::tally::testing::RunTally;

// A server with `options`, and a table `t (id bigint PRIMARY KEY, a int,
// b text)` in database `postgres`.
inline std::unique_ptr<PgCluster> StartTableCluster(
    const PgClusterOptions& options = {}) {
  absl::StatusOr<std::unique_ptr<PgCluster>> pg = PgCluster::Start(options);
  EXPECT_TRUE(pg.ok()) << pg.status();
  if (!pg.ok()) return nullptr;
  EXPECT_TRUE(
      (*pg)
          ->Execute("CREATE TABLE t (id bigint PRIMARY KEY, a int, b text)")
          .ok());
  return *std::move(pg);
}

// The md5 of a table's rows in key order ("empty" for none): equal tables,
// equal sums.
inline std::string TableMd5(PgCluster& pg, absl::string_view table) {
  absl::StatusOr<std::string> md5 = pg.Execute(
      absl::StrCat("SELECT coalesce(md5(string_agg(x::text, ',' ORDER BY "
                   "x.id)), 'empty') FROM ",
                   table, " x"));
  EXPECT_TRUE(md5.ok()) << md5.status();
  return md5.ok() ? *md5 : "";
}

// Polls `done` every 100 ms until it holds or `timeout` passes.
inline bool WaitFor(const std::function<bool()>& done, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return done();
}

// A sidecar on `pg`'s table t, listening on `listen`, peering `peers`,
// sessions every `sync_interval` ("1s", "1h"), with `extra` flags.
inline std::unique_ptr<NodeProcess> StartSidecarEvery(
    const std::string& sync_interval, const std::string& name,
    const std::string& data_dir, PgCluster& pg, const std::string& listen,
    const std::vector<std::string>& peers,
    const std::vector<std::string>& extra = {}) {
  std::vector<std::string> flags = {"--postgres",      pg.Uri(),
                                    "--table",         "public.t",
                                    "--sync-interval", sync_interval};
  for (const std::string& peer : peers) {
    flags.push_back("--peer");
    flags.push_back(peer);
  }
  flags.insert(flags.end(), extra.begin(), extra.end());
  absl::StatusOr<std::unique_ptr<NodeProcess>> node =
      NodeProcess::Start(name, data_dir, flags, listen);
  EXPECT_TRUE(node.ok()) << node.status();
  return node.ok() ? *std::move(node) : nullptr;
}

// A sidecar with sessions every second.
inline std::unique_ptr<NodeProcess> StartSidecar(
    const std::string& name, const std::string& data_dir, PgCluster& pg,
    const std::string& listen, const std::vector<std::string>& peers,
    const std::vector<std::string>& extra = {}) {
  return StartSidecarEvery("1s", name, data_dir, pg, listen, peers, extra);
}

// A sidecar with sessions only when asked (`tally sync`): the feed alone
// carries changes between sidecars.
inline std::unique_ptr<NodeProcess> StartQuietSidecar(
    const std::string& name, const std::string& data_dir, PgCluster& pg,
    const std::string& listen, const std::vector<std::string>& peers) {
  return StartSidecarEvery("1h", name, data_dir, pg, listen, peers);
}

// The node's `tally status --json`, or "" when the call fails.
inline std::string StatusJson(const std::string& address) {
  const CommandResult r =
      RunTally({"status", "--node", address, "--json"}, absl::Seconds(10));
  return r.exit_code == 0 ? r.out : "";
}

inline bool Following(const std::string& address) {
  return absl::StrContains(StatusJson(address), R"("phase":"following")");
}

// The first `"field":N` in a status JSON (-1 when absent); uint64 fields
// may be quoted (`"field":"N"`).
inline long long JsonNumber(const std::string& json, const std::string& field) {
  std::smatch m;
  const std::regex re(absl::StrCat("\"", field, "\":\"?(\\d+)"));
  if (!std::regex_search(json, m, re)) return -1;
  return std::stoll(m[1]);
}

// A number of the status's database_source section (-1 without one).
inline long long SourceNumber(const std::string& status_json,
                              const std::string& field) {
  const size_t at = status_json.find("\"database_source\":{");
  if (at == std::string::npos) return -1;
  return JsonNumber(status_json.substr(at), field);
}

// Rows of t in [lo, hi] whose last commit came through a replication origin
// (`tally`: the sidecar's apply), or not (`local`: the application's).
inline std::string CountByOrigin(PgCluster& pg, long long lo, long long hi,
                                 bool tally) {
  absl::StatusOr<std::string> n = pg.Execute(
      absl::StrCat("SELECT count(*) FROM t WHERE id BETWEEN ", lo, " AND ", hi,
                   " AND (pg_xact_commit_timestamp_origin(xmin)).roident ",
                   tally ? "<> 0" : "= 0"));
  EXPECT_TRUE(n.ok()) << n.status();
  return n.ok() ? *n : "?";
}

// Waits for `node` to die at fault point `point`: its log names the point
// and it ends by SIGKILL.
inline void ExpectDiedAt(NodeProcess& node, absl::string_view point) {
  const std::string line = absl::StrCat("fault point ", point, " reached");
  ASSERT_TRUE(WaitFor([&] { return absl::StrContains(node.Log(), line); },
                      absl::Seconds(30)))
      << node.Log();
  EXPECT_EQ(node.Stop(absl::Seconds(10)), 128 + SIGKILL) << node.Log();
}

// The node's last change-log sequence (-1 when status fails).
inline long long LastSequence(const std::string& address) {
  return JsonNumber(StatusJson(address), "last_sequence");
}

// Waits until the node at `address` follows and its change log holds
// `entries`, then checks it stays so for 1.5 s (a late duplicate would add
// one).
inline void ExpectLogSettlesAt(const std::string& address, long long entries,
                               NodeProcess& node) {
  ASSERT_TRUE(WaitFor(
      [&] { return Following(address) && LastSequence(address) >= entries; },
      absl::Seconds(30)))
      << StatusJson(address) << "\n"
      << node.Log();
  absl::SleepFor(absl::Milliseconds(1500));
  EXPECT_EQ(LastSequence(address), entries) << StatusJson(address);
}

}  // namespace pgtest
}  // namespace tally

#endif  // TALLY_TESTS_PG_PG_SIDECAR_HELPERS_H_
