// One run of an end-to-end latency measurement, shared by the latency
// scenarios of both engines (pg_latency_scenario.cc,
// mariadb_latency_scenario.cc): how long a write on database A takes to be
// visible in database B.
//
// A writer thread issues `count` writes paced by the clock at `rate` per
// second (write i is sent at start + i / rate, or at once when late); write
// i sets key (i mod keys) + 1 to token base + i, unique and increasing. The
// calling thread polls B's rows back to back (~1 ms apart) and records when
// each token became visible: when its key first holds that token or a later
// one (a later write of the key replaces it, last writer wins, so seeing it
// counts). Latency = when the poll returned - the write's send time, so it
// includes A's commit and one poll. The run fails if a write has not become
// visible 5 min after the last was sent.
//
//   absl::StatusOr<LatencyFigures> f = MeasureLatency(
//       [&](int64_t token, int64_t key, absl::Time sent) {...},  // on A
//       [&]() -> absl::StatusOr<std::vector<KeyToken>> {...},   // on B
//       "t", keys, rate, count, base);
#ifndef TALLY_TOOLS_BENCH_LATENCY_RUN_H_
#define TALLY_TOOLS_BENCH_LATENCY_RUN_H_

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tally {
namespace bench {

struct LatencyFigures {
  double p50_ms = 0;
  double p99_ms = 0;
  double max_ms = 0;
  double rate = 0;  // writes per second the writer achieved
};

// A row as the poll reads it: its key and the token it holds.
struct KeyToken {
  int64_t key = 0;
  int64_t token = 0;
};

// Writes `token` to `key` on A; `sent` is the send time (a column may hold
// it). Called from the writer thread only.
using LatencyWrite =
    std::function<absl::Status(int64_t token, int64_t key, absl::Time sent)>;
// Reads every row of B. Called from the caller's thread only.
using LatencyPoll = std::function<absl::StatusOr<std::vector<KeyToken>>()>;

// One run; `what` names the path in errors.
absl::StatusOr<LatencyFigures> MeasureLatency(const LatencyWrite& write,
                                              const LatencyPoll& poll,
                                              absl::string_view what, int keys,
                                              int rate, int count,
                                              int64_t base);

// The writes of a run, rate x seconds, from the flags
// --PREFIX_rate, --PREFIX_seconds and --PREFIX_keys; kInvalidArgument naming
// them when one is not positive or a run would make a million writes or
// more (RunAlternated starts each run's tokens a million past the last's).
absl::StatusOr<int> LatencyRunWrites(absl::string_view prefix, int rate,
                                     int seconds, int keys);

// The runs of a latency scenario, whose two paths write two tables: "t"
// (tally) and "t2" (the baseline). First a warm-up of each path (200
// writes at 100/s, which must arrive: the replication's workers start,
// the feed subscriptions connect), then `runs` runs of each of `count`
// writes at `rate`/s, the paths alternated. `measure(table, rate, count,
// base)` makes one run (MeasureLatency with its write and poll).
struct LatencyRuns {
  std::vector<LatencyFigures> tally;
  std::vector<LatencyFigures> baseline;
};
using MeasureLatencyRun = std::function<absl::StatusOr<LatencyFigures>(
    const std::string& table, int rate, int count, int64_t base)>;
absl::StatusOr<LatencyRuns> RunAlternated(const MeasureLatencyRun& measure,
                                          int runs, int rate, int count);

// One line of a latency table: p50, p99, max and the rate reached, each
// as min / median / max over `runs`.
void PrintLatencyLine(std::ostream& out, absl::string_view name,
                      const std::vector<LatencyFigures>& runs);
// The table's header line.
void PrintLatencyHeader(std::ostream& out);

}  // namespace bench
}  // namespace tally

#endif  // TALLY_TOOLS_BENCH_LATENCY_RUN_H_
