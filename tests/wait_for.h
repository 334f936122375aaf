// WaitFor: polls a condition of a running system (a node's status, a
// scrape, a log) until it holds or a deadline passes, for the
// multi-process tests.
//
//   ASSERT_TRUE(WaitFor([&] { return Rows(b->address()) == 3000; }))
//       << b->Log();
//
// Thread-compatible: the condition runs on the caller's thread.
#ifndef TALLY_TESTS_WAIT_FOR_H_
#define TALLY_TESTS_WAIT_FOR_H_

#include <functional>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tally {
namespace testing {

// True as soon as `done` returns true, checked every 100 ms; false when it
// still does not after `timeout`.
inline bool WaitFor(const std::function<bool()>& done,
                    absl::Duration timeout = absl::Seconds(30)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return true;
}

}  // namespace testing
}  // namespace tally

#endif  // TALLY_TESTS_WAIT_FOR_H_
