// Scenario "pg-wan": `tally diff URL URL` of two PostgreSQL databases each
// behind a long, narrow link, against pg_comparator over the same links.
//
// Two throwaway PostgreSQL 15 servers with the "pg" scenario's table and
// its 100 differences (tools/bench/pg_sidecar_fixture.h), each reached
// through a loopback proxy (support/tcp_proxy.h) that holds every byte
// --pg_wan_delay_ms in each direction and passes at most --pg_wan_mbit
// Mbit/s each way, as a database in another site would be. In the same
// run, alternated, --pg_runs times each: tally with --transfer=hashes
// (block hashes in each database, then the rows of the differing buckets),
// tally with --transfer=rows (every row of both tables read here) and
// pg_comparator (the baseline; it too folds checksums in the databases).
// Each must report exactly 100 differences. Per contender: the wall time
// and the bytes that crossed both links (the proxies' counts), beside the
// table's size (pg_total_relation_size of both tables).
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "support/pg_cluster.h"
#include "support/process.h"
#include "support/tcp_proxy.h"
#include "tools/bench/pg_sidecar_fixture.h"
#include "tools/bench/scenario.h"

ABSL_FLAG(int, pg_wan_delay_ms, 10, "pg-wan: one-way delay of each link");
ABSL_FLAG(double, pg_wan_mbit, 100, "pg-wan: bandwidth of each link, Mbit/s");

namespace tally {
namespace bench {
namespace {

using testing::CommandResult;
using testing::PgCluster;
using testing::TcpProxy;

uint64_t Crossed(const TcpProxy& a, const TcpProxy& b) {
  return a.bytes_up() + a.bytes_down() + b.bytes_up() + b.bytes_down();
}

absl::StatusOr<double> TimeTallyDiff(const std::string& url_a,
                                     const std::string& url_b,
                                     const std::string& transfer) {
  const absl::Time start = absl::Now();
  const CommandResult r = testing::RunTally(
      {"diff", "--timeout=600", "--transfer=" + transfer, url_a, url_b},
      absl::Minutes(10));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (r.exit_code != 1 || !absl::StrContains(r.out, "100 keys differ")) {
    return absl::InternalError(absl::StrCat(
        "tally diff --transfer=", transfer, " exited ", r.exit_code,
        " without 100 differences: ", r.err, r.out.substr(0, 500)));
  }
  return seconds;
}

absl::Status RunPgWan(std::ostream& out) {
  absl::StatusOr<std::vector<uint64_t>> sizes = PgTableSizes();
  if (!sizes.ok()) return sizes.status();
  const int runs = std::max(1, absl::GetFlag(FLAGS_pg_runs));
  const absl::Duration delay =
      absl::Milliseconds(absl::GetFlag(FLAGS_pg_wan_delay_ms));
  const double bytes_per_second = absl::GetFlag(FLAGS_pg_wan_mbit) * 1e6 / 8;
  absl::StatusOr<std::unique_ptr<PgCluster>> a = PgCluster::Start();
  if (!a.ok()) return a.status();
  absl::StatusOr<std::unique_ptr<PgCluster>> b = PgCluster::Start();
  if (!b.ok()) return b.status();
  absl::StatusOr<std::unique_ptr<TcpProxy>> link_a = TcpProxy::Start(
      absl::StrCat("127.0.0.1:", (*a)->port()), delay, bytes_per_second);
  if (!link_a.ok()) return link_a.status();
  absl::StatusOr<std::unique_ptr<TcpProxy>> link_b = TcpProxy::Start(
      absl::StrCat("127.0.0.1:", (*b)->port()), delay, bytes_per_second);
  if (!link_b.ok()) return link_b.status();
  const std::string url_a =
      absl::StrCat("postgresql://postgres@", (*link_a)->address(),
                   "/postgres?table=public.t");
  const std::string url_b =
      absl::StrCat("postgresql://postgres@", (*link_b)->address(), "/postgres");
  out << absl::StrFormat(
      "pg-wan: ad-hoc diff, each database behind %d ms one way and %.0f "
      "Mbit/s, 100 differences, %d runs each, alternated\n",
      absl::GetFlag(FLAGS_pg_wan_delay_ms), absl::GetFlag(FLAGS_pg_wan_mbit),
      runs);
  out << absl::StrFormat("%-9s %-9s %-26s %-12s %-26s %-12s %-26s %-12s %s\n",
                         "rows", "tables", "tally hashes s", "bytes",
                         "tally rows s", "bytes", "pg_comparator s", "bytes",
                         "hashes vs pg_comparator");
  for (uint64_t rows : *sizes) {
    if (absl::Status s = FillDiffering(**a, **b, rows); !s.ok()) return s;
    uint64_t table_bytes = 0;
    for (PgCluster* pg : {a->get(), b->get()}) {
      absl::StatusOr<std::string> size =
          pg->Execute("SELECT pg_total_relation_size('public.t')");
      uint64_t n = 0;
      if (size.ok() && absl::SimpleAtoi(*size, &n)) table_bytes += n;
    }
    Samples hashes, hashes_bytes, full, full_bytes, baseline, baseline_bytes;
    for (int i = 0; i < runs; ++i) {
      struct Contender {
        Samples* time;
        Samples* bytes;
        std::function<absl::StatusOr<double>()> run;
      };
      const std::vector<Contender> contenders = {
          {&hashes, &hashes_bytes,
           [&] { return TimeTallyDiff(url_a, url_b, "hashes"); }},
          {&full, &full_bytes,
           [&] { return TimeTallyDiff(url_a, url_b, "rows"); }},
          {&baseline, &baseline_bytes, [&] {
             return TimePgComparatorAt(PortOf((*link_a)->address()),
                                       PortOf((*link_b)->address()),
                                       absl::GetFlag(FLAGS_pg_comparator), 100);
           }}};
      for (const Contender& c : contenders) {
        (void)WaitForIdleCpu();
        const uint64_t before = Crossed(**link_a, **link_b);
        absl::StatusOr<double> t = c.run();
        if (!t.ok()) return t.status();
        c.time->Add(*t);
        c.bytes->Add(static_cast<double>(Crossed(**link_a, **link_b) - before));
      }
    }
    auto mb = [](const Samples& s) {
      return absl::StrFormat("%.2f MB", s.Median() / 1e6);
    };
    out << absl::StrFormat(
        "%-9d %-9s %-26s %-12s %-26s %-12s %-26s %-12s %.1fx time, %.1f%% of "
        "the tables' bytes\n",
        rows, absl::StrFormat("%.0f MB", table_bytes / 1e6), hashes.Text(),
        mb(hashes_bytes), full.Text(), mb(full_bytes), baseline.Text(),
        mb(baseline_bytes), baseline.Median() / hashes.Median(),
        100.0 * hashes_bytes.Median() / static_cast<double>(table_bytes));
  }
  out << "goal: hashes >= 3x pg_comparator, <= 2% of the tables' bytes at "
         "1M rows\n";
  return absl::OkStatus();
}

}  // namespace

Scenario PgWanScenario() {
  return {"pg-wan",
          "tally diff of two PostgreSQL tables behind slow links (block "
          "hashes and full read) vs pg_comparator",
          &RunPgWan};
}

}  // namespace bench
}  // namespace tally
