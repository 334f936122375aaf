#include "pg/sidecar/commit_stamp.h"

#include "absl/time/time.h"
#include "pg/wire/replication_messages.h"

namespace tally {
namespace pg {

tree::HlcTimestamp CommitStampOf(int64_t pg_commit_time_us) {
  const int64_t us = absl::ToUnixMicros(FromPgTimestamp(pg_commit_time_us));
  if (us <= 0) return tree::HlcTimestamp::FromRaw(1);
  return tree::HlcTimestamp::FromParts(static_cast<uint64_t>(us / 1000),
                                       static_cast<uint64_t>(us % 1000));
}

tree::HlcTimestamp CommitStamps::Next(int64_t pg_commit_time_us) {
  const tree::HlcTimestamp commit = CommitStampOf(pg_commit_time_us);
  if (last_ < commit) {
    last_ = commit;
    return last_;
  }
  return Bump();
}

void CommitStamps::After(tree::HlcTimestamp t) {
  if (last_ < t) last_ = t;
}

tree::HlcTimestamp CommitStamps::Bump() {
  last_ = tree::HlcTimestamp::FromRaw(last_.raw() + 1);
  return last_;
}

}  // namespace pg
}  // namespace tally
