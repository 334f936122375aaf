// The version timestamps of the transactions a MariaDB binary log holds.
//
// Last writer wins orders rows by when they were written. MariaDB records
// a transaction's commit time in whole seconds only (the GTID event's
// header; no finer time is logged), and its binary log is in commit order.
// So a transaction's HLC timestamp is its commit second (its milliseconds
// as the physical part) and, within that second, its place in the binary
// log (the counter): the stamps strictly increase in log order, and the
// same log always gives the same stamps (a replay after a crash indexes
// rows with the versions they had). The resolution this gives against
// other engines' writes is the second: a MariaDB commit counts as made at
// the start of its second, so a PostgreSQL write made later within the
// same second wins over it, one made earlier within it loses.
//
//   BinlogCommitStamps stamps;            // or stamps.Resume(last)
//   tree::HlcTimestamp t = stamps.Next(gtid_event.timestamp);
//
// Thread-compatible.
#ifndef TALLY_MARIADB_CAPTURE_COMMIT_STAMPS_H_
#define TALLY_MARIADB_CAPTURE_COMMIT_STAMPS_H_

#include <cstdint>

#include "tree/hlc.h"

namespace tally {
namespace mariadb {

class BinlogCommitStamps {
 public:
  // The stamp of the next transaction in log order, committed in the Unix
  // second `commit_second`: that second's first millisecond with the
  // counter at 0, or, when that does not order after the previous stamp
  // (the same second, or a clock that went back), the previous stamp plus
  // one (the counter carries into the milliseconds when full).
  tree::HlcTimestamp Next(uint32_t commit_second);

  // Continues after `last` (the last stamp given before a restart).
  void Resume(tree::HlcTimestamp last) { last_ = last; }
  tree::HlcTimestamp last() const { return last_; }

 private:
  tree::HlcTimestamp last_;
};

}  // namespace mariadb
}  // namespace tally

#endif  // TALLY_MARIADB_CAPTURE_COMMIT_STAMPS_H_
