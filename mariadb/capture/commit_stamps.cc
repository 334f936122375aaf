#include "mariadb/capture/commit_stamps.h"

namespace tally {
namespace mariadb {

tree::HlcTimestamp BinlogCommitStamps::Next(uint32_t commit_second) {
  const tree::HlcTimestamp at =
      tree::HlcTimestamp::FromParts(uint64_t{commit_second} * 1000, 0);
  // The raw form orders as (milliseconds, counter), and a full counter
  // plus one is the next millisecond's counter 0.
  last_ = last_ < at ? at : tree::HlcTimestamp::FromRaw(last_.raw() + 1);
  return last_;
}

}  // namespace mariadb
}  // namespace tally
