// AcknowledgedBeforeSigkill: the crash tests' child process. A child runs
// `write`, which writes to a store and prints a line for each write the
// store acknowledged, forever; the parent kills it with SIGKILL after
// `run_for` and returns the complete lines it printed (a line cut by the
// kill is no acknowledgement). The caller then reopens the store and checks
// that every acknowledged write is there.
//
//   auto acknowledged = AcknowledgedBeforeSigkill([&](FILE* out) {
//     auto store = Store::Open(dir, options);
//     if (!store.ok()) _exit(3);
//     for (int i = 0;; ++i) { ...Write...; std::fprintf(out, "k%d\n", i);
//                             std::fflush(out); }
//   }, absl::Milliseconds(200));
//
// `write` runs in the forked child only: it must not return (if it does,
// the child exits with 5) and reports its own failures by _exit codes,
// which the parent returns as kInternal, as it does a child that ended
// before the kill.
#ifndef TALLY_TESTS_KILLED_CHILD_H_
#define TALLY_TESTS_KILLED_CHILD_H_

#include <cstdio>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tally {
namespace testing {

absl::StatusOr<std::vector<std::string>> AcknowledgedBeforeSigkill(
    absl::FunctionRef<void(FILE* out)> write, absl::Duration run_for);

}  // namespace testing
}  // namespace tally

#endif  // TALLY_TESTS_KILLED_CHILD_H_
