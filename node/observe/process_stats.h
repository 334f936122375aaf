// ProcessStats: what the kernel says about the tallyd process — CPU time,
// resident memory by kind, open file descriptors, threads, start time —
// for /metrics (process_* families) and `tally status`.
//
// Resident memory is split because a node's VmRSS misleads: LevelDB maps
// its table files, so at 10M rows VmRSS reads ~1.9 GB where the heap is
// ~150 MB; the file-backed part is page cache the kernel reclaims at will.
//
//   v1::ProcessStatus process;
//   absl::Status read = ReadProcessStats("/proc/self", &process);
//
// Linux only (/proc). Thread-safe: reads files, keeps nothing.
#ifndef TALLY_NODE_OBSERVE_PROCESS_STATS_H_
#define TALLY_NODE_OBSERVE_PROCESS_STATS_H_

#include <string>

#include "absl/status/status.h"
#include "tally/v1/tally.pb.h"

namespace tally {
namespace node {

// Fills `out` from `proc_dir` ("/proc/self", or another /proc/PID) and
// /proc/stat (for the boot time the start time counts from). Returns
// kUnavailable naming the file when one cannot be read or parsed; `out`
// then holds what was read before it.
absl::Status ReadProcessStats(const std::string& proc_dir,
                              ::tally::v1::ProcessStatus* out);

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_OBSERVE_PROCESS_STATS_H_
