// The change feed along a chain of sidecars A - B - C while an application
// hammers a few hot rows on A (as pgbench's branches and tellers are): the
// lag of a probe row written on A until it is on C. Real tallyd processes
// on throwaway PostgreSQL 15 servers, sessions only on request, so that
// the feed alone carries the probes.
#include <algorithm>
#include <atomic>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "support/pg_cluster.h"
#include "support/pg_test_macros.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "tests/pg/pg_load.h"
#include "tests/pg/pg_sidecar_helpers.h"

namespace tally {
namespace {

using ::tally::pgtest::Following;
using ::tally::pgtest::PgLoad;
using ::tally::pgtest::StartQuietSidecar;
using ::tally::pgtest::StartTableCluster;
using ::tally::pgtest::TableMd5;
using ::tally::pgtest::WaitFor;
using ::tally::testing::FreeLoopbackAddress;
using ::tally::testing::NodeProcess;
using ::tally::testing::PgCluster;
using ::tally::testing::TempDir;

constexpr int kHotRows = 10;
constexpr long long kProbeFirst = 10'000'000;

// The publisher re-read every row its backend answered as changed since
// indexed, for up to a second per read-ahead window, hoping the index would
// catch up; a row the application keeps changing never lets it, so every
// window holding a hot row cost a second, and the chain's lag grew to tens
// of seconds. Now such a row is skipped at once as superseded (the capture
// indexes the newer write), and a batch goes out after a short fill time
// rather than at a full megabyte.
TEST(PgHotRows, AChainStaysCloseBehindWhileAFewRowsAreHammered) {
  TALLY_SKIP_UNLESS_POSTGRES();
  std::unique_ptr<PgCluster> pg[3];
  TempDir dir[3];
  std::string addr[3];
  for (int i = 0; i < 3; ++i) {
    pg[i] = StartTableCluster();
    ASSERT_NE(pg[i], nullptr);
    addr[i] = FreeLoopbackAddress();
  }
  std::unique_ptr<NodeProcess> side[3];
  // A - B - C, each link both ways; no A - C link.
  const std::vector<std::vector<std::string>> peers = {
      {addr[1]}, {addr[0], addr[2]}, {addr[1]}};
  for (int i = 0; i < 3; ++i) {
    side[i] = StartQuietSidecar(absl::StrCat("hot-", std::string(1, 'a' + i)),
                                dir[i].path(), *pg[i], addr[i], peers[i]);
    ASSERT_NE(side[i], nullptr);
  }
  ASSERT_TRUE(WaitFor(
      [&] {
        return Following(addr[0]) && Following(addr[1]) && Following(addr[2]);
      },
      absl::Seconds(30)))
      << side[0]->Log() << side[1]->Log() << side[2]->Log();
  // The hot rows, on every node through the feed.
  ASSERT_TRUE(pg[0]
                  ->Execute(absl::StrCat("INSERT INTO t SELECT g, 0, 'hot' "
                                         "FROM generate_series(1, ",
                                         kHotRows, ") g"))
                  .ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::string md5 = TableMd5(*pg[0], "t");
        return TableMd5(*pg[1], "t") == md5 && TableMd5(*pg[2], "t") == md5;
      },
      absl::Seconds(30)))
      << side[0]->Log() << side[1]->Log() << side[2]->Log();

  PgLoad load;
  // Four writers on the hot rows, one row a transaction, each pausing 1 ms
  // between transactions: up to ~4,000 updates a second of 10 rows, more
  // than pgbench's TPC-B puts on its branches here. (Unpaced, the writers
  // took every cycle of a 2-core machine shared with other tests, and the
  // chain's lag measured the CPU left to it rather than the feed.)
  for (int w = 0; w < 4; ++w) {
    load.Add(
        pg[0]->Uri(),
        [w](pg::Connection& c, uint64_t i) {
          return c
              .Exec(absl::StrCat("UPDATE t SET a = a + 1 WHERE id = ",
                                 (i * 3 + w) % kHotRows + 1))
              .status();
        },
        absl::Milliseconds(1));
  }
  // Other rows change too: upserts over 20,000 keys, 10 a transaction.
  load.Add(
      pg[0]->Uri(),
      [](pg::Connection& c, uint64_t i) {
        const long long from = 1000 + (i * 10) % 20000;
        return c
            .Exec(absl::StrCat("INSERT INTO t SELECT g, ", i,
                               ", 'other' FROM generate_series(", from, ", ",
                               from + 9,
                               ") g ON CONFLICT (id) DO UPDATE SET a = "
                               "excluded.a"))
            .status();
      },
      absl::Milliseconds(1));

  // The probe: a new row on A every 100 ms, and C polled for the newest.
  struct Probe {
    absl::Time written;
    absl::Time seen = absl::InfinitePast();
  };
  std::mutex mu;
  std::vector<Probe> probes;
  std::atomic<bool> done{false};
  std::thread writer([&] {
    std::unique_ptr<pg::Connection> c =
        *pg::Connection::Open(pg[0]->Uri(), pg::ConnectOptions{});
    for (long long n = 0; !done.load(); ++n) {
      const absl::Time now = absl::Now();
      if (c->Exec(absl::StrCat("INSERT INTO t VALUES (", kProbeFirst + n,
                               ", 0, 'probe')"))
              .ok()) {
        std::lock_guard<std::mutex> lock(mu);
        probes.push_back(Probe{now});
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
  });
  std::thread watcher([&] {
    std::unique_ptr<pg::Connection> c =
        *pg::Connection::Open(pg[2]->Uri(), pg::ConnectOptions{});
    while (!done.load()) {
      absl::StatusOr<pg::Result> r = c->Exec(absl::StrCat(
          "SELECT coalesce(max(id), -1) FROM t WHERE id >= ", kProbeFirst));
      long long newest = -1;
      if (r.ok() && r->rows() == 1 &&
          absl::SimpleAtoi(r->Value(0, 0), &newest) && newest >= 0) {
        const absl::Time now = absl::Now();
        std::lock_guard<std::mutex> lock(mu);
        // Probes are written in order: every one up to the newest is there.
        for (long long n = 0; n <= newest - kProbeFirst &&
                              n < static_cast<long long>(probes.size());
             ++n) {
          if (probes[n].seen == absl::InfinitePast()) probes[n].seen = now;
        }
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
  });
  absl::SleepFor(absl::Seconds(15));
  const uint64_t hot_steps = load.steps();
  // The probes of the load's last second have their chance too.
  absl::SleepFor(absl::Seconds(2));
  done.store(true);
  writer.join();
  watcher.join();
  load.Stop();

  std::vector<double> lags;
  int unseen = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const Probe& p : probes) {
      if (p.written > absl::Now() - absl::Seconds(3)) continue;  // too late
      if (p.seen == absl::InfinitePast()) {
        ++unseen;
        lags.push_back(1e9);
      } else {
        lags.push_back(absl::ToDoubleSeconds(p.seen - p.written));
      }
    }
  }
  ASSERT_GT(lags.size(), 100u);
  std::sort(lags.begin(), lags.end());
  const double p50 = lags[lags.size() / 2];
  const double p99 = lags[lags.size() * 99 / 100];
  const double max = lags.back();
  RecordProperty("probe_lag_p50_s", absl::StrCat(p50));
  RecordProperty("probe_lag_p99_s", absl::StrCat(p99));
  std::cout << "A->C probe lag over " << lags.size() << " probes: p50 " << p50
            << " s, p99 " << p99 << " s, max " << max << " s (" << unseen
            << " unseen); application steps " << hot_steps << std::endl;
  // Before the fix 132 of 133 probes had not reached C two seconds after
  // the 15 s load (the publisher re-reading hot rows a second per window:
  // the lag only grows). With it, in two runs, p50 1.4 and 2.8 s, p99 2.3
  // and 3.4 s, on a shared 2-core machine where three servers, three
  // nodes and 3,000-5,000 transactions a second compete: the bounds leave
  // room for that, not for a lag that grows with the load's length.
  EXPECT_EQ(unseen, 0);
  EXPECT_LT(p50, 5.0) << side[0]->Log();
  EXPECT_LT(p99, 8.0) << side[0]->Log();
  EXPECT_GT(hot_steps, 2000u);

  // Once the writes stop, the chain ends equal with no session: the hot
  // rows' last writes went through too.
  EXPECT_TRUE(WaitFor(
      [&] {
        const std::string md5 = TableMd5(*pg[0], "t");
        return TableMd5(*pg[1], "t") == md5 && TableMd5(*pg[2], "t") == md5;
      },
      absl::Seconds(20)))
      << side[0]->Log() << side[1]->Log() << side[2]->Log();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(side[i]->Stop(), 0);
}

}  // namespace
}  // namespace tally
