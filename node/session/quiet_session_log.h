// QuietSessionLog: what a node logs about the sessions with one peer that
// find nothing to do. Every session logged a line per keyspace, so a quiet
// mesh logged hundreds of lines an hour that said nothing (418 in 22
// minutes with three peers). Now a keyspace sync that moved, erased and
// resolved nothing is a DEBUG line, and the quiet syncs of a peer are
// summed up at INFO once per summary_interval:
//
//   INFO sessions quiet peer=10.0.0.2:7400 name=eu/db-2 syncs=96
//        keyspaces=orders,users over=10m0.2s
//
// An eventful sync (rows moved, erased, conflicts, a failure) is logged as
// before, right after the summary of the quiet ones before it (if any), so
// the log keeps their order.
//
//   QuietSessionLog quiet("10.0.0.2:7400");
//   quiet.Quiet(absl::Now(), "eu/db-2", "users");   // a summary when due
//   quiet.Eventful(absl::Now(), "eu/db-2");          // flushes the count
//
// Thread-safe.
#ifndef TALLY_NODE_SESSION_QUIET_SESSION_LOG_H_
#define TALLY_NODE_SESSION_QUIET_SESSION_LOG_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tally {
namespace node {

class QuietSessionLog {
 public:
  static constexpr absl::Duration kDefaultSummaryInterval = absl::Minutes(10);

  explicit QuietSessionLog(std::string peer, absl::Duration summary_interval =
                                                 kDefaultSummaryInterval);

  struct Summary {
    uint64_t syncs = 0;               // quiet keyspace syncs summed up
    std::set<std::string> keyspaces;  // their keyspaces
    absl::Duration over;              // from the first of them to now
  };

  // The decisions alone, without logging: for tests. OnQuiet counts one
  // quiet sync and returns the summary when one is due; OnEventful returns
  // the summary of the quiet syncs not yet summed up, if any.
  std::optional<Summary> OnQuiet(absl::Time now, absl::string_view keyspace)
      ABSL_LOCKS_EXCLUDED(mu_);
  std::optional<Summary> OnEventful(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

  // The decisions, logged (`name`: the peer's node name).
  void Quiet(absl::Time now, absl::string_view name, absl::string_view keyspace)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Eventful(absl::Time now, absl::string_view name)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  std::optional<Summary> TakeLocked(absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Log(absl::string_view name, const Summary& summary) const;

  const std::string peer_;
  const absl::Duration summary_interval_;
  absl::Mutex mu_;
  uint64_t syncs_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<std::string> keyspaces_ ABSL_GUARDED_BY(mu_);
  absl::Time first_ ABSL_GUARDED_BY(mu_);
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_SESSION_QUIET_SESSION_LOG_H_
