// Scenario "open": time to open a store, at two depths and two row counts.
// Open rebuilds trees from the persisted leaves, so the time follows the
// depth (2^depth leaves) and must not grow with the number of rows.
#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "storage/store.h"
#include "tools/bench/scenario.h"
#include "tools/bench/store_fixture.h"

namespace tally {
namespace bench {
namespace {

using Clock = std::chrono::steady_clock;

absl::Status Fill(const std::string& dir, int depth, uint64_t rows,
                  uint64_t seed) {
  storage::StoreOptions options;
  options.node_name = "bench";
  options.sync = false;
  auto store = storage::Store::Open(dir, options);
  if (!store.ok()) return store.status();
  absl::Status s = (*store)->CreateKeyspace("bench", depth);
  if (!s.ok()) return s;
  std::mt19937_64 rng(seed);
  for (uint64_t done = 0; done < rows;) {
    storage::WriteRequest request;
    for (int i = 0; i < 1000 && done < rows; ++i, ++done) {
      request.mutations.push_back(storage::Mutation::Put(
          "bench", RandomBytes(rng, 16), RandomBytes(rng, 100)));
    }
    auto r = (*store)->Write(std::move(request));
    if (!r.ok()) return r.status();
  }
  return absl::OkStatus();
}

// Median of several opens, in milliseconds.
absl::StatusOr<double> TimeOpen(const std::string& dir, uint64_t rows) {
  std::vector<double> ms;
  for (int i = 0; i < 5; ++i) {
    const auto start = Clock::now();
    auto store = storage::Store::Open(dir, storage::StoreOptions{});
    if (!store.ok()) return store.status();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start)
                     .count());
    auto info = (*store)->GetKeyspace("bench");
    if (!info.ok()) return info.status();
    if (info->row_count != rows) {
      return absl::InternalError(absl::StrFormat(
          "reopened store has %d rows, not %d", info->row_count, rows));
    }
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

absl::Status RunOpen(std::ostream& out) {
  const uint64_t rows = absl::GetFlag(FLAGS_rows);
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  if (rows < 10) return absl::InvalidArgumentError("--rows must be >= 10");
  out << "open: median of 5 opens of a closed store (ms)\n";
  out << absl::StrFormat("%-6s %12s %12s %8s\n", "depth",
                         absl::StrFormat("%d rows", rows / 10),
                         absl::StrFormat("%d rows", rows), "ratio");
  for (int depth : {16, 20}) {
    std::vector<double> times;
    for (uint64_t n : {rows / 10, rows}) {
      ScratchDir dir("open");
      absl::Status s = Fill(dir.path(), depth, n, seed);
      if (!s.ok()) return s;
      auto ms = TimeOpen(dir.path(), n);
      if (!ms.ok()) return ms.status();
      times.push_back(*ms);
    }
    out << absl::StrFormat("%-6d %12.1f %12.1f %8.2f\n", depth, times[0],
                           times[1], times[1] / times[0]);
  }
  out << "ratio = open time at 10x the rows / open time (1.0 = independent "
         "of the row count)\n";
  return absl::OkStatus();
}

}  // namespace

Scenario OpenScenario() {
  return {"open", "time to open a store at two depths and two row counts",
          &RunOpen};
}

}  // namespace bench
}  // namespace tally
