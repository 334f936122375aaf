// tally-bench: runs benchmark scenarios and prints their results as tables.
//
//   tally-bench --list
//   tally-bench --scenario=diff-mem --rows=1000000 --diffs=0,1,100,10000
//   tally-bench --scenario=all
//
// Every run prints the exact command first, so that a pasted table says how
// to reproduce it.
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "tools/bench/scenario.h"

ABSL_FLAG(std::string, scenario, "",
          "Scenario to run (see --list), or 'all' to run every scenario.");
ABSL_FLAG(bool, list, false, "List the scenarios and exit.");
ABSL_FLAG(uint64_t, rows, 1000000, "Rows per replica (N).");
ABSL_FLAG(uint64_t, seed, 42,
          "Seed of the random data; the same seed gives the same rows.");

namespace tally {
namespace bench {
namespace {

// The registry, in the order --scenario=all runs them.
std::vector<Scenario> AllScenarios() {
  return {
      DiffMemScenario(),        IngestScenario(),      OpenScenario(),
      NodeDiffScenario(),       WanScenario(),         BootstrapScenario(),
      FeedScenario(),           PgScenario(),          PgWarmScenario(),
      PgWanScenario(),          PgSourceScenario(),    PgCaptureScenario(),
      PgLatencyScenario(),      PgApplyScenario(),     PgBuildScenario(),
      PgPgbenchChainScenario(), MariaDbScenario(),     MariaDbSidecarScenario(),
      MariaDbLatencyScenario(), MariaDbWarmScenario(),
  };
}

// absl's --help lists the flags of files named after the program; ours is
// tally-bench with flags in tally_bench.cc and in the scenario files.
bool IsBenchFlagFile(absl::string_view file) {
  return absl::StrContains(file, "tally_bench.cc") ||
         absl::StrContains(file, "tools/bench/");
}

int Main(int argc, char** argv) {
  // As in tallyd: measure without Abseil's debug lock-cycle detection.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::FlagsUsageConfig usage_config;
  usage_config.contains_help_flags = &IsBenchFlagFile;
  usage_config.contains_helpshort_flags = &IsBenchFlagFile;
  absl::SetFlagsUsageConfig(usage_config);
  absl::SetProgramUsageMessage(
      "runs tally benchmark scenarios: tally-bench --scenario=NAME [flags]");
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() > 1) {
    std::fprintf(stderr, "unexpected argument '%s'; see --help\n", args[1]);
    return 2;
  }

  const std::vector<Scenario> scenarios = AllScenarios();
  if (absl::GetFlag(FLAGS_list)) {
    for (const Scenario& s : scenarios) {
      std::printf("%-12s %s\n", s.name, s.description);
    }
    return 0;
  }
  const std::string wanted = absl::GetFlag(FLAGS_scenario);
  std::vector<const Scenario*> to_run;
  for (const Scenario& s : scenarios) {
    if (wanted == "all" || wanted == s.name) to_run.push_back(&s);
  }
  if (to_run.empty()) {
    std::fprintf(stderr,
                 "no scenario named '%s'; choose one of --list or 'all'\n",
                 wanted.c_str());
    return 2;
  }

  std::cout << "command: "
            << absl::StrJoin(std::vector<std::string>(argv, argv + argc), " ")
            << "\n";
  int failures = 0;
  for (const Scenario* s : to_run) {
    std::cout << "\n== " << s->name << ": " << s->description << "\n";
    const absl::Status status = s->run(std::cout);
    std::cout.flush();
    if (!status.ok()) {
      std::fprintf(stderr, "scenario %s failed: %s\n", s->name,
                   status.ToString().c_str());
      ++failures;
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace bench
}  // namespace tally

int main(int argc, char** argv) { return tally::bench::Main(argc, argv); }
