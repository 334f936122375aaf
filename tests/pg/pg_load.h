// PgLoad: application writes for the sidecar's multi-process tests —
// threads, each on its own connection to a test server, running a step
// function over and over until Stop (tests/pg/pg_capture_race_test.cc,
// pg_hot_rows_test.cc).
//
//   PgLoad load;
//   load.Add(pg->Uri(), [](pg::Connection& c, uint64_t i) {
//     return c.Exec(absl::StrCat("UPDATE t SET a = a + 1 WHERE id = ", i % 10))
//         .status();
//   });
//   ...
//   load.Stop();  // joins; load.steps(), load.errors() count what ran
//
// A step's error is counted, not fatal: concurrent writers meet lock
// timeouts and conflicts as an application does. A connection that fails
// to open counts one error and ends its thread.
//
// Thread-safe: Add and Stop from the test's thread; the counters from any.
#ifndef TALLY_TESTS_PG_PG_LOAD_H_
#define TALLY_TESTS_PG_PG_LOAD_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "pg/wire/connection.h"

namespace tally {
namespace pgtest {

class PgLoad {
 public:
  // One step of a writer: `i` counts the thread's steps from 0.
  using Step = std::function<absl::Status(pg::Connection&, uint64_t i)>;

  PgLoad() = default;
  PgLoad(const PgLoad&) = delete;
  PgLoad& operator=(const PgLoad&) = delete;
  ~PgLoad() { Stop(); }

  // Starts a thread on `conninfo` running `step` until Stop, pausing
  // `pause` between steps.
  void Add(const std::string& conninfo, Step step,
           absl::Duration pause = absl::ZeroDuration()) {
    threads_.emplace_back([this, conninfo, step = std::move(step), pause] {
      pg::ConnectOptions options;
      options.application_name = "test load";
      absl::StatusOr<std::unique_ptr<pg::Connection>> c =
          pg::Connection::Open(conninfo, options);
      if (!c.ok()) {
        errors_.fetch_add(1);
        return;
      }
      for (uint64_t i = 0; !stopping_.load(); ++i) {
        if (step(**c, i).ok()) {
          steps_.fetch_add(1);
        } else {
          errors_.fetch_add(1);
        }
        if (pause > absl::ZeroDuration()) absl::SleepFor(pause);
      }
    });
  }

  // Ends every thread (after its current step) and joins them.
  void Stop() {
    stopping_.store(true);
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
    threads_.clear();
  }

  uint64_t steps() const { return steps_.load(); }
  uint64_t errors() const { return errors_.load(); }

 private:
  std::vector<std::thread> threads_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> steps_{0};
  std::atomic<uint64_t> errors_{0};
};

}  // namespace pgtest
}  // namespace tally

#endif  // TALLY_TESTS_PG_PG_LOAD_H_
