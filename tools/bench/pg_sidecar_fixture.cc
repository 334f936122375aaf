#include "tools/bench/pg_sidecar_fixture.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <regex>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace tally {
namespace bench {

using testing::CommandResult;
using testing::NodeProcess;
using testing::PgCluster;

namespace {

std::vector<double> Sorted(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// The last `bytes` of a log, for an error message.
std::string Tail(const std::string& log, size_t bytes = 1500) {
  return log.size() <= bytes ? log : log.substr(log.size() - bytes);
}

}  // namespace

double Samples::Min() const { return Sorted(values_).front(); }
double Samples::Max() const { return Sorted(values_).back(); }
double Samples::Median() const {
  const std::vector<double> v = Sorted(values_);
  return v[v.size() / 2];
}

double Samples::Quantile(double fraction) const {
  const std::vector<double> v = Sorted(values_);
  const double rank = std::ceil(fraction * static_cast<double>(v.size()));
  const size_t i = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return v[std::min(i, v.size() - 1)];
}

std::string Samples::Text(const char* format) const {
  if (values_.empty()) return "-";
  auto one = [format](double v) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), format, v);
    return std::string(buf);
  };
  return absl::StrCat(one(Min()), " / ", one(Median()), " / ", one(Max()));
}

absl::Status ExecSql(PgCluster& pg, const std::string& sql) {
  return pg.Execute(sql).status();
}

absl::Status FillTable(PgCluster& pg, uint64_t rows) {
  return ExecSql(
      pg, absl::StrCat(
              "CREATE EXTENSION IF NOT EXISTS pgcmp; DROP TABLE IF EXISTS t; "
              "CREATE TABLE t (id bigint PRIMARY KEY, a int, b text, c "
              "timestamptz); INSERT INTO t SELECT g, g, md5(g::text), "
              "timestamptz '2026-01-01 00:00:00+00' + g * interval '1 s' "
              "FROM generate_series(1, ",
              rows, ") g"));
}

namespace {

// The CPU time /proc/stat counts so far: busy and idle (idle + iowait), in
// clock ticks over all CPUs.
struct CpuTimes {
  uint64_t busy = 0;
  uint64_t idle = 0;
};

CpuTimes ReadCpuTimes() {
  CpuTimes t;
  std::FILE* f = std::fopen("/proc/stat", "r");
  if (f == nullptr) return t;
  unsigned long long v[8] = {0};
  // "cpu  user nice system idle iowait irq softirq steal ..."
  if (std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0],
                  &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) == 8) {
    t.busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    t.idle = v[3] + v[4];
  }
  std::fclose(f);
  return t;
}

}  // namespace

absl::Duration WaitForIdleCpu() {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + absl::Seconds(3);
  CpuTimes before = ReadCpuTimes();
  while (absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
    const CpuTimes after = ReadCpuTimes();
    const uint64_t busy = after.busy - before.busy;
    const uint64_t total = busy + (after.idle - before.idle);
    before = after;
    if (total > 0 && busy * 10 <= total) break;
  }
  return absl::Now() - start;
}

absl::Status SettleTable(PgCluster& pg) {
  absl::Status s = ExecSql(pg, "VACUUM (FREEZE, ANALYZE) t");
  return s.ok() ? ExecSql(pg, "CHECKPOINT") : s;
}

absl::Status FillDiffering(PgCluster& a, PgCluster& b, uint64_t rows) {
  absl::Status s = FillTable(a, rows);
  if (s.ok()) s = FillTable(b, rows);
  if (s.ok()) s = MakeDifferences(b, rows);
  if (s.ok()) s = SettleTable(a);
  if (s.ok()) s = SettleTable(b);
  return s;
}

absl::StatusOr<double> TimeColdTallyDiff(const std::string& url_a,
                                         const std::string& url_b) {
  const absl::Time start = absl::Now();
  const testing::CommandResult r = testing::RunTally(
      {"diff", "--timeout=600", url_a, url_b}, absl::Minutes(10));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (r.exit_code != 1 || !absl::StrContains(r.out, "100 keys differ")) {
    return absl::InternalError(absl::StrCat("tally diff exited ", r.exit_code,
                                            " without 100 differences: ", r.err,
                                            r.out.substr(0, 500)));
  }
  return seconds;
}

absl::Status MakeDifferences(PgCluster& pg, uint64_t rows) {
  const uint64_t step = rows / 100;
  return ExecSql(
      pg, absl::StrCat(
              "UPDATE t SET a = -a WHERE id IN (SELECT 1 + g * ", step,
              " FROM generate_series(0, 39) g); DELETE FROM t WHERE id IN "
              "(SELECT 2 + g * ",
              step, " FROM generate_series(40, 69) g); INSERT INTO t SELECT ",
              rows, " + g, 0, 'new', now() FROM generate_series(1, 30) g"));
}

absl::StatusOr<pg::Lsn> CurrentLsn(PgCluster& pg) {
  absl::StatusOr<std::string> text = pg.Execute("SELECT pg_current_wal_lsn()");
  if (!text.ok()) return text.status();
  return pg::ParseLsn(absl::StripAsciiWhitespace(*text));
}

absl::StatusOr<std::vector<uint64_t>> PgTableSizes() {
  std::vector<uint64_t> sizes;
  for (absl::string_view s :
       absl::StrSplit(absl::GetFlag(FLAGS_pg_rows), ',', absl::SkipEmpty())) {
    uint64_t n = 0;
    if (!absl::SimpleAtoi(s, &n) || n < 1000) {
      return absl::InvalidArgumentError(
          absl::StrCat("--pg_rows: '", s, "' is not a size of 1000 or more"));
    }
    sizes.push_back(n);
  }
  return sizes;
}

absl::StatusOr<double> TimePgComparator(const PgCluster& a, const PgCluster& b,
                                        const std::string& program,
                                        int expected) {
  return TimePgComparatorAt(a.port(), b.port(), program, expected);
}

int PortOf(const std::string& address) {
  int port = 0;
  (void)absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port);
  return port;
}

absl::StatusOr<double> TimePgComparatorAt(int port_a, int port_b,
                                          const std::string& program,
                                          int expected) {
  const std::string url_a = absl::StrCat("pgsql://postgres@127.0.0.1:", port_a,
                                         "/postgres/public.t?id:a,b,c");
  const std::string url_b =
      absl::StrCat("pgsql://postgres@127.0.0.1:", port_b, "/postgres/public.t");
  const absl::Time start = absl::Now();
  const CommandResult r = testing::RunCommand(
      {"/usr/bin/env", "PGTZ=UTC", program, url_a, url_b}, absl::Minutes(10));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  int found = 0;
  for (absl::string_view line :
       absl::StrSplit(r.out, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "INSERT ") ||
        absl::StartsWith(line, "UPDATE ") ||
        absl::StartsWith(line, "DELETE ")) {
      ++found;
    }
  }
  if (r.exit_code != 0 || found != expected) {
    return absl::InternalError(
        absl::StrCat("pg_comparator exited ", r.exit_code, " with ", found,
                     " differences (expected ", expected, "): ", r.err));
  }
  return seconds;
}

absl::StatusOr<std::unique_ptr<Sidecar>> Sidecar::Start(
    const std::string& name, PgCluster& pg, const std::string& listen,
    const std::vector<std::string>& peers,
    const std::vector<std::string>& extra,
    const std::vector<std::string>& tables) {
  std::vector<std::string> flags = {"--postgres", pg.Uri()};
  for (const std::string& table : tables) {
    flags.push_back("--table");
    flags.push_back(table);
  }
  return StartWith(name, std::move(flags), listen, peers, extra);
}

absl::StatusOr<std::unique_ptr<Sidecar>> Sidecar::StartWith(
    const std::string& name, std::vector<std::string> database_flags,
    const std::string& listen, const std::vector<std::string>& peers,
    const std::vector<std::string>& extra) {
  std::unique_ptr<Sidecar> s(new Sidecar());
  s->name_ = name;
  s->listen_ = listen;
  s->flags_ = std::move(database_flags);
  for (const std::string& peer : peers) {
    s->flags_.push_back("--peer");
    s->flags_.push_back(peer);
  }
  s->flags_.insert(s->flags_.end(), extra.begin(), extra.end());
  absl::Status launched = s->Launch();
  if (!launched.ok()) return launched;
  // A restart must come back where its peers know it.
  s->listen_ = s->process_->address();
  return s;
}

absl::Status Sidecar::Launch() {
  client_.reset();
  absl::StatusOr<std::unique_ptr<NodeProcess>> p =
      NodeProcess::Start(name_, dir_.path() + "/data", flags_, listen_);
  if (!p.ok()) return p.status();
  process_ = *std::move(p);
  node::ClientOptions options;
  options.rpc_timeout = absl::Seconds(10);
  absl::StatusOr<std::unique_ptr<node::NodeClient>> c =
      node::NodeClient::Connect(process_->address(), options);
  if (!c.ok()) return c.status();
  client_ = *std::move(c);
  return absl::OkStatus();
}

absl::Status Sidecar::Stop() {
  client_.reset();
  const int code = process_->Stop();
  if (code != 0) {
    return absl::InternalError(
        absl::StrCat(name_, " exited ", code, ": ", Tail(process_->Log())));
  }
  return absl::OkStatus();
}

absl::Status Sidecar::Restart() { return Launch(); }

absl::StatusOr<v1::PostgresStatus> Sidecar::Status() {
  absl::StatusOr<v1::StatusResponse> r = client_->Status();
  if (!r.ok()) return r.status();
  if (!r->has_postgres()) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, " has no PostgreSQL sidecar"));
  }
  return r->postgres();
}

absl::StatusOr<v1::DatabaseSourceStatus> Sidecar::SourceStatus() {
  absl::StatusOr<v1::StatusResponse> r = client_->Status();
  if (!r.ok()) return r.status();
  if (!r->has_database_source()) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, " has no database source"));
  }
  return r->database_source();
}

absl::Status Sidecar::AwaitFollowing(absl::Duration timeout) {
  return Await("following", 0, timeout);
}

absl::Status Sidecar::AwaitConfirmed(pg::Lsn lsn, absl::Duration timeout) {
  return Await("confirmed", lsn, timeout);
}

absl::Status Sidecar::Await(const char* what, pg::Lsn lsn,
                            absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::string last = "no status yet";
  for (;;) {
    absl::StatusOr<v1::PostgresStatus> s = Status();
    if (s.ok()) {
      if (s->phase() == "failed") {
        return absl::FailedPreconditionError(
            absl::StrCat(name_, " failed: ", s->last_error()));
      }
      if (s->phase() == "following" && s->confirmed_lsn_bytes() >= lsn) {
        return absl::OkStatus();
      }
      last =
          absl::StrCat("phase ", s->phase(), ", confirmed ", s->confirmed_lsn(),
                       ", last error '", s->last_error(), "'");
    } else {
      last = s.status().ToString();
    }
    if (absl::Now() >= deadline) break;
    // Fine enough for figures of 100 ms and more, cheap for the node.
    absl::SleepFor(absl::Milliseconds(10));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      name_, " not ", what,
      lsn != 0 ? absl::StrCat(" ", pg::FormatLsn(lsn)) : "", " after ",
      absl::FormatDuration(timeout), ": ", last, "\n", Tail(process_->Log())));
}

absl::StatusOr<NodeDiff> TimeNodeDiff(Sidecar& a, Sidecar& b,
                                      const std::string& keyspace) {
  const absl::Time start = absl::Now();
  const testing::CommandResult r = testing::RunTally(
      {"--keyspace", keyspace, "--json", "diff", a.address(), b.address()},
      absl::Minutes(5));
  NodeDiff d;
  d.cli_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  // The last run's line in A's log.
  static const std::regex kRunMillis(R"re(run diff .* duration_ms=(\d+))re");
  const std::string log = a.process().Log();
  for (std::sregex_iterator it(log.begin(), log.end(), kRunMillis), end;
       it != end; ++it) {
    d.run_seconds = std::stod((*it)[1]) / 1000;
  }
  static const std::regex kDifferences(R"re("differences":(\d+))re");
  static const std::regex kSeconds(R"re("seconds":([0-9.eE+-]+))re");
  std::smatch m;
  int found = -1;
  if (std::regex_search(r.out, m, kDifferences)) found = std::stoi(m[1]);
  if (std::regex_search(r.out, m, kSeconds)) d.node_seconds = std::stod(m[1]);
  static const std::regex kRounds(R"re("rounds":(\d+))re");
  static const std::regex kSent(R"re("bytes_sent":(\d+))re");
  static const std::regex kReceived(R"re("bytes_received":(\d+))re");
  if (std::regex_search(r.out, m, kRounds)) d.rounds = std::stoll(m[1]);
  if (std::regex_search(r.out, m, kSent)) d.bytes += std::stoll(m[1]);
  if (std::regex_search(r.out, m, kReceived)) d.bytes += std::stoll(m[1]);
  if (r.exit_code != 1 || found != 100) {
    return absl::InternalError(absl::StrCat(
        "tally diff of the sidecars exited ", r.exit_code, " with ", found,
        " differences (expected 100): ", r.err,
        r.out.substr(r.out.size() > 500 ? r.out.size() - 500 : 0)));
  }
  return d;
}

}  // namespace bench
}  // namespace tally
