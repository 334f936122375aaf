// SyncKeyspace: diff two replicas of a keyspace and repair what differs.
//
// This is the anti-entropy session's work, and `tally repair`'s:
//
//  1. Diff (tree/diff/diff.h): handshake, descent, sub-leaf ranges, row lists —
//     the exact set of differing keys with each side's version.
//  2. Repair, in batches as differences arrive (memory stays bounded):
//     - two-way (last writer wins): for each key the side with the higher
//       version wins; its row is fetched and written to the other side,
//       keeping its version and origin. In a range one side lacks (all of
//       it when a new replica bootstraps) the diff scans the other side's
//       rows with their values (TreeView::ScanWithValues), so those rows
//       are written as they come, with no fetch by key. Equal versions with
//       different content (a tie) are counted as conflicts, and the row with
//       the higher digest wins (the tie rule, storage::CompareRows), as the
//       store's own commit rules decide, so both sides converge.
//     - one-way from a source (`a_is_source`): b becomes equal to a. a's row
//       replaces b's whatever the versions; rows a lacks are erased from b.
//  3. Rows move under a bandwidth limit, if set.
//
// A replica that lacks the keyspace is treated as empty. Concurrent writes
// on either side are normal: a key that changed mid-sync may be repaired
// again next time.
#ifndef TALLY_NODE_SYNC_SYNC_H_
#define TALLY_NODE_SYNC_SYNC_H_

#include <atomic>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "node/client/replica.h"
#include "node/sync/bandwidth_limiter.h"
#include "tree/diff/diff.h"
#include "tree/diff/diff_scope.h"

namespace tally {
namespace node {

// One differing key, as the sync saw it.
struct KeyDifference {
  std::string key;
  const tree::RowEntry* in_a = nullptr;  // nullptr: absent on a
  const tree::RowEntry* in_b = nullptr;
  // What the repair does with it. kSkip: it would copy or erase, but the
  // sync's mode leaves the key alone (SyncOptions::changes).
  enum class Action {
    kCopyToB,
    kCopyToA,
    kEraseFromB,
    kConflict,
    kSkip
  } action;
};

// Which changes a repair makes: all of them (last writer wins, or an exact
// copy from the source), only rows a side lacks (kInsertOnly: no row that
// exists is overwritten, nothing is deleted or erased), or no deletes
// (kUpsertOnly: rows are copied and overwritten, but no tombstone is
// copied and nothing is erased).
enum class RepairChanges { kAll, kInsertOnly, kUpsertOnly };

struct SyncProgress {
  uint64_t differences = 0;
  uint64_t rows_to_a = 0;
  uint64_t rows_to_b = 0;
};

// The two steps a sync alternates between, for callers that show where it
// is: the repair of a batch runs as soon as the diff has found enough
// differences, and the diff resumes after it.
enum class SyncStep {
  kDiff,    // looking for differing keys
  kRepair,  // fetching and writing a batch of them
};

struct SyncOptions {
  std::string keyspace;
  // The part of the keyspace to sync: all of it (sessions), or a token
  // range or a list of keys (`tally repair --range`, `--keys-from`).
  tree::DiffScope scope;
  // One-way: b becomes an exact copy of a.
  bool a_is_source = false;
  // Find and report, but change nothing.
  bool dry_run = false;
  // Which changes to make; the others' keys are reported as kSkip.
  RepairChanges changes = RepairChanges::kAll;
  // At most this many rows changed (copied or erased; 0: no limit). The
  // difference that would change one more stops the sync with
  // kResourceExhausted, after the rows before it were written. A dry run
  // stops there too.
  uint64_t max_rows = 0;
  // Repair traffic limit in bytes per second; 0 is unlimited.
  double bandwidth_bytes_per_second = 0;
  // The node's limit over all its repairs (node-bandwidth), taken as well;
  // null: none. Must outlive the sync.
  BandwidthLimiter* node_bandwidth = nullptr;
  // Rows fetched and written per repair batch.
  size_t batch_rows = 1000;
  // Give up (kDeadlineExceeded) after this time.
  absl::Time deadline = absl::InfiniteFuture();
  // When set and true, stop at the next step with kCancelled (shutdown, a
  // paused peer, a tool gone).
  const std::atomic<bool>* cancelled = nullptr;
  tree::DiffOptions diff;
  // Called for every differing key (e.g. to print it). Optional.
  std::function<void(const KeyDifference&)> on_difference;
  // Called now and then while a long sync runs. Optional.
  std::function<void(const SyncProgress&)> on_progress;
  // Called when the sync moves to a step: kDiff as the diff starts and each
  // time it resumes after a batch, kRepair as a batch starts to move (never
  // in a dry run). Optional.
  std::function<void(SyncStep)> on_step;
};

struct SyncStats {
  tree::DiffStats diff;
  uint64_t rows_to_a = 0;
  uint64_t rows_to_b = 0;
  uint64_t erased_from_b = 0;
  uint64_t ignored = 0;       // repaired rows the target already had newer
  uint64_t conflicts = 0;     // equal versions, different content (ties)
  uint64_t skipped = 0;       // left alone by SyncOptions::changes
  uint64_t repair_bytes = 0;  // value and key bytes moved by the repair
  // Rows not moved because an application changed them in a replica's
  // backend (a sidecar's table) while the sync read them
  // (Replica::FetchRows): the replica's capture indexes the newer write,
  // and its feed or the next sync carries it.
  uint64_t rows_changed = 0;
  absl::Duration duration;
};

// Syncs `options.keyspace` of `a` and `b`. Fills `*stats` with what was
// done even when it fails: a sync that stops half way (an error, the
// deadline, a cancel) has still moved the rows of the batches it applied,
// and a session's counters must say so. Returns kNotFound when neither
// replica has the keyspace, or the first error of the diff or the repair.
// REQUIRES: stats != nullptr.
absl::Status SyncKeyspace(Replica& a, Replica& b, const SyncOptions& options,
                          SyncStats* stats);

// The same, for callers that need the counters only when it succeeds.
absl::StatusOr<SyncStats> SyncKeyspace(Replica& a, Replica& b,
                                       const SyncOptions& options);

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_SYNC_SYNC_H_
