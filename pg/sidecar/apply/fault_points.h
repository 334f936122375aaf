// FaultPoints: named places in the sidecar where a crash test makes tallyd
// die at once (SIGKILL, by itself), so that nothing after that place runs —
// fault injection in the real binary, as LevelDB's and FoundationDB's tests
// do it. FOR TESTS ONLY: tallyd arms at most one point, from its hidden
// `--test-fault-point=NAME[:COUNT]` setting; a node without it arms none,
// and reaching a point then costs one comparison.
//
// The points are the same in both sidecars (PostgreSQL: the capture of
// pg/sidecar/capture.h and the apply of pg/sidecar/apply/pg_backend.h;
// MariaDB: mariadb/sidecar/sidecar.h and mariadb/sidecar/mariadb_backend.h).
// Where each is, and what a test that kills tallyd there and restarts it
// proves (tests/pg/pg_crash_test.cc, tests/mariadb_sidecar_test.cc):
//
//  capture-after-index-commit   in the capture, after a store write of
//      captured changes returned. PostgreSQL: the write holds the index
//      records and the stream position (one WriteBatch), and the position
//      is not yet confirmed to the slot; a replay from the slot's older
//      confirmed position must index nothing twice: the stored position,
//      not the slot's, says where to resume. MariaDB: the write holds the
//      rows and, at a transaction's end, the GTID state; a transaction
//      stored in parts is read again from its start after a restart, and
//      its parts already stored must not count twice.
//  apply-before-db-commit       in an apply, after the compare-and-swap
//      statements and the record naming the applied versions (PostgreSQL's
//      'tally.apply' message, MariaDB's tally.apply_log row) ran, before
//      the database's COMMIT. Proves that an apply the database never
//      committed leaves nothing behind: the peer's rows arrive again and
//      are applied once.
//  apply-after-db-commit        in an apply, after the database's COMMIT,
//      before the store's WriteBatch of those rows. Proves that the capture
//      indexes the committed rows from that record with the peer's
//      versions: nothing lost, nothing applied twice, nothing echoed back.
//  apply-after-store-commit     after the store committed an apply's rows
//      (its change-log notification), before the capture read that
//      transaction. Proves that the capture's replay of an apply the store
//      already holds is a no-op (same version and digest).
//
// COUNT (default 1) kills at the COUNT-th time the point is reached, so a
// test can let earlier batches through.
//
//   TALLY_ASSIGN_OR_RETURN(std::shared_ptr<FaultPoints> f,
//                          FaultPoints::Parse("apply-after-db-commit:2"));
//   ...
//   f->Reach(FaultPoint::kApplyAfterDbCommit);  // the 2nd time: killed
//
// Thread-safe: Reach may be called from any thread.
#ifndef TALLY_PG_SIDECAR_APPLY_FAULT_POINTS_H_
#define TALLY_PG_SIDECAR_APPLY_FAULT_POINTS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tally {
namespace pg {

enum class FaultPoint {
  kCaptureAfterIndexCommit,
  kApplyBeforeDbCommit,
  kApplyAfterDbCommit,
  kApplyAfterStoreCommit,
};

// The point's name as the setting spells it ("apply-after-db-commit").
absl::string_view FaultPointName(FaultPoint point);

class FaultPoints {
 public:
  // Parses "NAME" or "NAME:COUNT" (COUNT >= 1). An empty spec arms nothing.
  // kInvalidArgument naming the known points for an unknown name, and for
  // a COUNT that is not a positive integer.
  static absl::StatusOr<std::shared_ptr<FaultPoints>> Parse(
      absl::string_view spec);

  FaultPoints(const FaultPoints&) = delete;
  FaultPoints& operator=(const FaultPoints&) = delete;

  // When `point` is the armed one and this is its COUNT-th time, writes one
  // line to stderr ("tallyd: fault point NAME reached (time COUNT): killed")
  // and kills the process with SIGKILL: it does not return then.
  void Reach(FaultPoint point);

  // The armed point, if any (for a log line at start).
  std::optional<FaultPoint> armed() const { return armed_; }
  uint64_t count() const { return count_; }

 private:
  FaultPoints(std::optional<FaultPoint> armed, uint64_t count)
      : armed_(armed), count_(count) {}

  // Constant after construction.
  const std::optional<FaultPoint> armed_;
  const uint64_t count_;

  std::atomic<uint64_t> reached_{0};
};

// Reaches `point` on `faults` when it is not null (the options of the
// sidecar's parts hold a null one unless a test armed it).
inline void ReachFaultPoint(const std::shared_ptr<FaultPoints>& faults,
                            FaultPoint point) {
  if (faults != nullptr) faults->Reach(point);
}

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_SIDECAR_APPLY_FAULT_POINTS_H_
