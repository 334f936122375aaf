// Helpers of the multi-process tests of the sidecar's apply path
// (tests/pg/pg_apply_locks_test.cc, pg_triggers_test.cc,
// pg_refused_rows_test.cc): sidecars keeping several tables, tables
// compared by PostgreSQL's own md5 in key order, and pgbench.
//
//   std::unique_ptr<NodeProcess> a = StartTablesSidecar(
//       "a", dir.path(), *pg, addr_a, {addr_b}, {"public.x", "public.y"});
//   EXPECT_EQ(OrderedMd5(*pg_a, "x", "id"), OrderedMd5(*pg_b, "x", "id"));
//
// Every helper reports its own failures through gtest (EXPECT) and answers
// something harmless ("", -1, null) then.
#ifndef TALLY_TESTS_PG_PG_APPLY_HELPERS_H_
#define TALLY_TESTS_PG_PG_APPLY_HELPERS_H_

#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "support/pg_cluster.h"
#include "support/process.h"

namespace tally {
namespace pgtest {

// A sidecar on `pg` keeping `tables` (qualified names, in the order given),
// listening on `listen`, peering `peers`, with `extra` flags (sessions
// every second unless `extra` sets --sync-interval).
inline std::unique_ptr<testing::NodeProcess> StartTablesSidecar(
    const std::string& name, const std::string& data_dir,
    testing::PgCluster& pg, const std::string& listen,
    const std::vector<std::string>& peers,
    const std::vector<std::string>& tables,
    const std::vector<std::string>& extra = {}) {
  std::vector<std::string> flags = {"--postgres", pg.Uri()};
  for (const std::string& table : tables) {
    flags.push_back("--table");
    flags.push_back(table);
  }
  bool interval = false;
  for (const std::string& e : extra) interval |= e == "--sync-interval";
  if (!interval) {
    flags.push_back("--sync-interval");
    flags.push_back("1s");
  }
  for (const std::string& peer : peers) {
    flags.push_back("--peer");
    flags.push_back(peer);
  }
  flags.insert(flags.end(), extra.begin(), extra.end());
  absl::StatusOr<std::unique_ptr<testing::NodeProcess>> node =
      testing::NodeProcess::Start(name, data_dir, flags, listen);
  EXPECT_TRUE(node.ok()) << node.status();
  return node.ok() ? *std::move(node) : nullptr;
}

// The md5 of `table`'s rows ordered by `key` ("empty" for none): equal
// tables, equal sums.
inline std::string OrderedMd5(testing::PgCluster& pg, absl::string_view table,
                              absl::string_view key) {
  absl::StatusOr<std::string> md5 = pg.Execute(
      absl::StrCat("SELECT coalesce(md5(string_agg(x::text, ',' ORDER BY x.",
                   key, ")), 'empty') FROM ", table, " x"));
  EXPECT_TRUE(md5.ok()) << md5.status();
  return md5.ok() ? *md5 : "";
}

// One value of `sql`'s result ("" on error).
inline std::string Query(testing::PgCluster& pg, absl::string_view sql) {
  absl::StatusOr<std::string> r = pg.Execute(sql);
  EXPECT_TRUE(r.ok()) << r.status() << "\n" << sql;
  return r.ok() ? *r : "";
}

// pgbench against `pg`'s database postgres with `args`.
inline testing::CommandResult Pgbench(testing::PgCluster& pg,
                                      const std::vector<std::string>& args,
                                      absl::Duration timeout) {
  std::vector<std::string> argv = {
      absl::StrCat(testing::PostgresBinDir(), "/pgbench"),
      "-h",
      "127.0.0.1",
      "-p",
      std::to_string(pg.port()),
      "-U",
      "postgres"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("postgres");
  return testing::RunCommand(argv, timeout);
}

// A number pgbench printed after `label` ("number of failed transactions:
// 0 (0.000%)" → 0); -1 when absent.
inline double PgbenchFigure(const std::string& out, const std::string& label) {
  std::smatch m;
  const std::regex re(label + "\\s*([0-9.]+)");
  if (!std::regex_search(out, m, re)) return -1;
  return std::stod(m[1]);
}

}  // namespace pgtest
}  // namespace tally

#endif  // TALLY_TESTS_PG_PG_APPLY_HELPERS_H_
