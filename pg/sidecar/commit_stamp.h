// The version timestamp of a change a PostgreSQL transaction committed.
//
// Last writer wins orders rows by when they were written, and for a row an
// application wrote that is the transaction's commit time — not when the
// capture happened to read it (a capture that lags behind, or a sidecar
// that was down, would otherwise make an older write win over a newer one
// made elsewhere meanwhile). The commit time, to the microsecond, becomes
// an HLC timestamp: its milliseconds as the physical part and the
// remaining microseconds (0..999) as the counter, so that two commits a
// microsecond apart order as they committed and the counter still has
// room above 999 for ties (CommitStamps).
//
//   CommitStamps stamps;
//   tree::HlcTimestamp t = stamps.Next(begin.commit_time_us);
//
// Thread-safety: CommitStampOf is a pure function; CommitStamps is
// thread-compatible.
#ifndef TALLY_PG_SIDECAR_COMMIT_STAMP_H_
#define TALLY_PG_SIDECAR_COMMIT_STAMP_H_

#include <cstdint>

#include "tree/hlc.h"

namespace tally {
namespace pg {

// `pg_commit_time_us`: µs since 2000-01-01 UTC, as pgoutput's Begin and
// pg_xact_commit_timestamp report it. A time before the Unix epoch gives
// the smallest non-zero timestamp.
tree::HlcTimestamp CommitStampOf(int64_t pg_commit_time_us);

// Stamps transactions in the order they committed: each one at its commit
// time, or just after the previous stamp when the commit time does not
// order after it (commit times are not monotonic in commit order, and two
// transactions may commit in the same microsecond), so that the stamps
// strictly increase.
class CommitStamps {
 public:
  tree::HlcTimestamp Next(int64_t pg_commit_time_us);
  // Makes the next stamp order after `t` (a stamp stored before a restart).
  void After(tree::HlcTimestamp t);
  // A stamp just after the last one (for the rest of a transaction split
  // over several store writes).
  tree::HlcTimestamp Bump();

 private:
  tree::HlcTimestamp last_;
};

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_SIDECAR_COMMIT_STAMP_H_
