// Benchmark scenarios of tally-bench.
//
// A scenario measures one thing (the diff over in-memory views, ingest into a
// store, opening a store) and prints a table of what it saw. Each lives in its
// own file in tools/bench/, takes its parameters from flags (shared ones are
// declared below), and is registered with one line in tools/tally_bench.cc:
//
//   // tools/bench/diff_mem_scenario.cc
//   Scenario DiffMemScenario() {
//     return {"diff-mem", "DiffViews between two in-memory views",
//     &RunDiffMem};
//   }
//
// Thread-safety: scenarios run one at a time, from main.
#ifndef TALLY_TOOLS_BENCH_SCENARIO_H_
#define TALLY_TOOLS_BENCH_SCENARIO_H_

#include <cstdint>
#include <ostream>

#include "absl/flags/declare.h"
#include "absl/status/status.h"

// Flags several scenarios share; defined in tally_bench.cc.
ABSL_DECLARE_FLAG(uint64_t, rows);
ABSL_DECLARE_FLAG(uint64_t, seed);

namespace tally {
namespace bench {

struct Scenario {
  // What --scenario names; lower-case words joined by '-'.
  const char* name;
  // One line for --list.
  const char* description;
  // Runs the scenario and prints its results to `out`. Returns an error when
  // the scenario could not run or what it measured is wrong (a benchmark
  // that reports the wrong answer fast is no benchmark).
  absl::Status (*run)(std::ostream& out);
};

// The scenarios, one factory per file in tools/bench/. A new scenario adds
// its factory here and one line to the table in tally_bench.cc.
Scenario DiffMemScenario();
Scenario IngestScenario();
Scenario OpenScenario();
Scenario NodeDiffScenario();
Scenario WanScenario();
Scenario BootstrapScenario();
Scenario FeedScenario();
Scenario PgScenario();
Scenario PgWarmScenario();
Scenario PgWanScenario();
Scenario PgSourceScenario();
Scenario PgCaptureScenario();
Scenario PgLatencyScenario();
Scenario PgApplyScenario();
Scenario PgBuildScenario();
Scenario PgPgbenchChainScenario();
Scenario MariaDbScenario();
Scenario MariaDbSidecarScenario();
Scenario MariaDbLatencyScenario();
Scenario MariaDbWarmScenario();

}  // namespace bench
}  // namespace tally

#endif  // TALLY_TOOLS_BENCH_SCENARIO_H_
