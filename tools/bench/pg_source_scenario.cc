// Scenario "pg-source": a sidecar kept equal to a master it may only query
// (`--peer postgresql://...,role=source`), the master behind a long,
// narrow link, against pg_comparator over the same link.
//
// Two throwaway PostgreSQL 15 servers: the master, reached through a
// loopback proxy (support/tcp_proxy.h) holding every byte --pg_wan_delay_ms
// in each direction at --pg_wan_mbit Mbit/s, and the replica, local to its
// sidecar. Both hold the "pg" scenario's table (tools/bench/
// pg_sidecar_fixture.h); the sidecar's first sessions make them equal.
// Then, --pg_runs times: the master changes 100 rows; pg_comparator
// (the baseline) compares the master through the link with the replica
// and must find exactly 100 differences; then the sidecar, stopped
// meanwhile, starts again, and its first session with the master finds and
// copies them (it must report 100 differences). Per contender: the time
// (the session's own, from status) and the bytes that crossed the link
// (the proxy's count), beside the table's size.
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "support/pg_cluster.h"
#include "support/process.h"
#include "support/tcp_proxy.h"
#include "tools/bench/pg_sidecar_fixture.h"
#include "tools/bench/scenario.h"

ABSL_DECLARE_FLAG(int, pg_wan_delay_ms);
ABSL_DECLARE_FLAG(double, pg_wan_mbit);

namespace tally {
namespace bench {
namespace {

using testing::PgCluster;
using testing::TcpProxy;

uint64_t Crossed(const TcpProxy& link) {
  return link.bytes_up() + link.bytes_down();
}

// Waits until the source has had a session that started after `after`
// and found no error; returns its status.
absl::StatusOr<v1::DatabaseSourceStatus> AwaitSession(Sidecar& sidecar,
                                                      int64_t after_unix_ms,
                                                      absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<v1::DatabaseSourceStatus> s;
  while (absl::Now() < deadline) {
    s = sidecar.SourceStatus();
    if (s.ok() && s->last_success_unix_ms() > after_unix_ms &&
        s->last_session_start_unix_ms() == s->last_success_unix_ms() &&
        s->state() == "waiting") {
      return s;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "no session with the source ended well in time; last status: ",
      s.ok() ? s->DebugString() : std::string(s.status().message())));
}

absl::Status RunPgSource(std::ostream& out) {
  absl::StatusOr<std::vector<uint64_t>> sizes = PgTableSizes();
  if (!sizes.ok()) return sizes.status();
  const int runs = std::max(1, absl::GetFlag(FLAGS_pg_runs));
  const absl::Duration delay =
      absl::Milliseconds(absl::GetFlag(FLAGS_pg_wan_delay_ms));
  const double bytes_per_second = absl::GetFlag(FLAGS_pg_wan_mbit) * 1e6 / 8;
  absl::StatusOr<std::unique_ptr<PgCluster>> master = PgCluster::Start();
  if (!master.ok()) return master.status();
  absl::StatusOr<std::unique_ptr<PgCluster>> replica = PgCluster::Start();
  if (!replica.ok()) return replica.status();
  absl::StatusOr<std::unique_ptr<TcpProxy>> link = TcpProxy::Start(
      absl::StrCat("127.0.0.1:", (*master)->port()), delay, bytes_per_second);
  if (!link.ok()) return link.status();
  const int link_port = PortOf((*link)->address());
  const std::string source = absl::StrCat(
      "postgresql://postgres@", (*link)->address(), "/postgres,role=source");
  out << absl::StrFormat(
      "pg-source: a sidecar copying a master it may only query, the master "
      "behind %d ms one way and %.0f Mbit/s; 100 rows changed on the "
      "master per run, %d runs, alternated with pg_comparator\n",
      absl::GetFlag(FLAGS_pg_wan_delay_ms), absl::GetFlag(FLAGS_pg_wan_mbit),
      runs);
  out << absl::StrFormat("%-9s %-9s %-26s %-12s %-26s %-12s %s\n", "rows",
                         "table", "tally session s", "bytes", "pg_comparator s",
                         "bytes", "tally vs pg_comparator");
  for (uint64_t rows : *sizes) {
    if (absl::Status s = FillDiffering(**master, **replica, rows); !s.ok()) {
      return s;
    }
    absl::StatusOr<std::string> size =
        (*master)->Execute("SELECT pg_total_relation_size('public.t')");
    uint64_t table_bytes = 0;
    if (size.ok()) (void)absl::SimpleAtoi(*size, &table_bytes);
    absl::StatusOr<std::unique_ptr<Sidecar>> sidecar =
        Sidecar::Start("copy", **replica, testing::FreeLoopbackAddress(),
                       {source}, {"--sync-interval", "2s"});
    if (!sidecar.ok()) return sidecar.status();
    if (absl::Status s = (*sidecar)->AwaitFollowing(absl::Minutes(20));
        !s.ok()) {
      return s;
    }
    // The first session copies the fill's 100 differences; the one after
    // it finds none.
    absl::StatusOr<v1::DatabaseSourceStatus> settled =
        AwaitSession(**sidecar, 0, absl::Minutes(10));
    if (!settled.ok()) return settled.status();
    settled = AwaitSession(**sidecar, settled->last_success_unix_ms(),
                           absl::Minutes(10));
    if (!settled.ok()) return settled.status();
    if (settled->last_differences() != 0) {
      return absl::InternalError(
          absl::StrCat("the replica still differs after a session: ",
                       settled->last_differences(), " keys"));
    }
    if (absl::Status s = (*sidecar)->Stop(); !s.ok()) return s;
    Samples tally_time, tally_bytes, baseline, baseline_bytes;
    for (int i = 0; i < runs; ++i) {
      const uint64_t step = rows / 100;
      if (absl::Status s = ExecSql(
              **master,
              absl::StrCat("UPDATE t SET a = a + 1 WHERE id IN (SELECT ", 3 + i,
                           " + g * ", step, " FROM generate_series(0, 99) g)"));
          !s.ok()) {
        return s;
      }
      (void)WaitForIdleCpu();
      uint64_t before = Crossed(**link);
      absl::StatusOr<double> t =
          TimePgComparatorAt(link_port, (*replica)->port(),
                             absl::GetFlag(FLAGS_pg_comparator), 100);
      if (!t.ok()) return t.status();
      baseline.Add(*t);
      baseline_bytes.Add(static_cast<double>(Crossed(**link) - before));

      (void)WaitForIdleCpu();
      before = Crossed(**link);
      const int64_t started = absl::ToUnixMillis(absl::Now());
      if (absl::Status s = (*sidecar)->Restart(); !s.ok()) return s;
      absl::StatusOr<v1::DatabaseSourceStatus> session =
          AwaitSession(**sidecar, started, absl::Minutes(10));
      if (!session.ok()) return session.status();
      const uint64_t crossed = Crossed(**link) - before;
      if (absl::Status s = (*sidecar)->Stop(); !s.ok()) return s;
      if (session->last_differences() != 100) {
        return absl::InternalError(absl::StrCat("the session found ",
                                                session->last_differences(),
                                                " differences, not 100"));
      }
      tally_time.Add(session->last_session_seconds());
      tally_bytes.Add(static_cast<double>(crossed));
    }
    auto mb = [](const Samples& s) {
      return absl::StrFormat("%.2f MB", s.Median() / 1e6);
    };
    out << absl::StrFormat(
        "%-9d %-9s %-26s %-12s %-26s %-12s %.1fx time, %.2f%% of the "
        "table's bytes\n",
        rows, absl::StrFormat("%.0f MB", table_bytes / 1e6), tally_time.Text(),
        mb(tally_bytes), baseline.Text(), mb(baseline_bytes),
        baseline.Median() / tally_time.Median(),
        100.0 * tally_bytes.Median() / static_cast<double>(table_bytes));
  }
  return absl::OkStatus();
}

}  // namespace

Scenario PgSourceScenario() {
  return {"pg-source",
          "a sidecar copying a PostgreSQL master it may only query, over a "
          "slow link, vs pg_comparator",
          &RunPgSource};
}

}  // namespace bench
}  // namespace tally
