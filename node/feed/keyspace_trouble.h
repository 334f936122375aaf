// KeyspaceTrouble: the keyspaces whose rows this node could not take from a
// peer, why, and since when — so that one keyspace in trouble is isolated
// and seen, never a silent stall of every keyspace.
//
// A row from a peer (its change feed, or a session's repair) may be left
// out for reasons of its keyspace alone: this node's backend rejected it
// (a PostgreSQL table refused the row: a column of another type, a
// constraint, a dropped table), the keyspace takes no rows now (its index
// is being rebuilt), or the keyspace's schema fingerprint differs from the
// peer's (node/sync/schema_check.h). The feed then leaves such changes out and
// moves on with the others; sessions retry the keyspace and repair it once
// the cause is gone. This registry is where those parts report, and what
// status, metrics and the log show:
//
//   trouble.Rejected({"public.t1", kTroubleRejected, key, status, "node-b"});
//   trouble.Flowed("public.t1");  // a later apply or session of it worked
//
// Each keyspace's trouble is logged: a warning when it begins or its reason
// changes, then at most one line a minute while rows keep being left out
// (with how many since the last line, the last key and reason), and one
// line when it flows again. A keyspace stays listed (with its counts) after
// it recovered, so that metrics' counters keep their series.
//
// As a StatusSource it fills StatusResponse.keyspace_trouble and marks the
// PostgreSQL tables in trouble (PostgresTable.trouble): it must run after
// the sidecar's source.
//
// Thread-safe.
#ifndef TALLY_NODE_FEED_KEYSPACE_TROUBLE_H_
#define TALLY_NODE_FEED_KEYSPACE_TROUBLE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "node/observe/status_source.h"
#include "tally/v1/tally.pb.h"

namespace tally {
namespace node {

// The reasons (KeyspaceTroubleStatus.reason, the metrics' `reason` label).
// The backend's database refused the row (storage::RowOutcome::rejected).
inline constexpr absl::string_view kTroubleRejected = "rejected";
// The keyspace takes no rows now (storage::RowBackend::TakesRows).
inline constexpr absl::string_view kTroubleNotTaken = "not-taken";
// Its schema fingerprint differs from the peer's.
inline constexpr absl::string_view kTroubleSchema = "schema";
// Dropped on one side (storage::Store::DropKeyspace) and still held by the
// other: its rows do not move between them.
inline constexpr absl::string_view kTroubleDropped = "dropped";

// One report of rows left out.
struct TroubleReport {
  absl::string_view keyspace;
  absl::string_view reason;  // one of kTrouble*
  absl::string_view key;     // the last key left out (raw bytes); may be ""
  absl::Status error;        // why; never OK
  absl::string_view peer;    // whose rows (its node name)
  uint64_t rows = 1;         // how many left out (0: a session's refusal)
};

class KeyspaceTrouble : public StatusSource {
 public:
  // `now` is the clock (tests pass their own).
  explicit KeyspaceTrouble(std::function<absl::Time()> now = absl::Now);
  KeyspaceTrouble(const KeyspaceTrouble&) = delete;
  KeyspaceTrouble& operator=(const KeyspaceTrouble&) = delete;

  // Records rows of a keyspace left out; the keyspace is in trouble until
  // Flowed. Logs as the top of the file says.
  void Rejected(const TroubleReport& report) ABSL_LOCKS_EXCLUDED(mu_);

  // The keyspace's rows flow again (a change of it applied with none left
  // out, or a session synced it): its trouble, if any, ends (logged).
  void Flowed(absl::string_view keyspace) ABSL_LOCKS_EXCLUDED(mu_);

  // The cause `reason` last reported for `peer` is gone (the peer no
  // longer holds a keyspace dropped here, say): the keyspace's trouble
  // ends, as Flowed, if that is the trouble it is in; another reason, or
  // the same one from another peer, stays.
  void Resolved(absl::string_view keyspace, absl::string_view reason,
                absl::string_view peer) ABSL_LOCKS_EXCLUDED(mu_);

  bool InTrouble(absl::string_view keyspace) const ABSL_LOCKS_EXCLUDED(mu_);
  // The keyspaces in trouble now, in name order.
  std::vector<std::string> InTrouble() const ABSL_LOCKS_EXCLUDED(mu_);

  // StatusSource.
  void FillStatus(::tally::v1::StatusResponse* response) override
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct State {
    bool in_trouble = false;
    std::string reason;
    std::string last_error;
    std::string last_key;  // C-escaped
    std::string peer;
    absl::Time last = absl::InfinitePast();
    absl::Time since = absl::InfinitePast();
    std::map<std::string, uint64_t> rows_by_reason;
    // The log's rate limit: when the last line was written and the rows
    // left out since.
    absl::Time logged = absl::InfinitePast();
    std::string logged_reason;
    uint64_t rows_since_logged = 0;
  };

  const std::function<absl::Time()> now_;
  mutable absl::Mutex mu_;
  std::map<std::string, State, std::less<>> keyspaces_ ABSL_GUARDED_BY(mu_);
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_FEED_KEYSPACE_TROUBLE_H_
