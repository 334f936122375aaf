// SessionHistory: the last few sessions with one peer, newest first, for
// status (`tally status`, its --json) — what a single "last outcome" cannot
// show: a peer that fails one session in three, sessions that get slower, a
// copy whose erased count rises every time.
//
// A fixed-size ring: recording a session past the capacity forgets the
// oldest one. It lives in memory; the scheduler saves it in the data
// directory after every session (node/session/saved_history.h), so that a
// restarted node shows it again.
//
//   SessionHistory history(/*capacity=*/16);
//   history.Record(record);                  // when a session ends
//   for (const SessionRecord& r : history.Newest()) ...
//
// Thread-compatible: the owner (SessionScheduler) guards it with its lock.
#ifndef TALLY_NODE_SESSION_SESSION_HISTORY_H_
#define TALLY_NODE_SESSION_SESSION_HISTORY_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tally/v1/tally.pb.h"

namespace tally {
namespace node {

// The sessions kept per peer unless configured otherwise.
inline constexpr size_t kDefaultSessionHistory = 16;

// Why a session ran.
enum class SessionTrigger {
  kScheduled,  // the sync interval, or the feed asking for one
  kRequested,  // an operator's `tally sync` (Admin.Sync)
};

// "scheduled" or "requested", as status shows it.
const char* SessionTriggerName(SessionTrigger trigger);

// One finished session with a peer, as status shows it.
struct SessionRecord {
  absl::Time start = absl::InfinitePast();
  absl::Duration duration;
  SessionTrigger trigger = SessionTrigger::kScheduled;
  // "ok", or the error that ended it ("UNAVAILABLE: ...").
  std::string outcome;
  // Keyspaces synced (failed ones included) and differences found.
  uint32_t keyspaces = 0;
  uint64_t differences = 0;
  // Rows written here / there, erased here (a source lacked them), keys
  // with equal versions and different content, key and value bytes moved.
  // A session that failed half way counts what it did before.
  uint64_t rows_received = 0;
  uint64_t rows_sent = 0;
  uint64_t rows_erased = 0;
  uint64_t conflicts = 0;
  uint64_t bytes_repaired = 0;
  // Rows an application changed while the session read them, left to the
  // capture (SessionResult::rows_changed_during_session).
  uint64_t rows_changed_during_session = 0;
};

// `record` as the StatusResponse carries it.
void SessionRecordToProto(const SessionRecord& record,
                          ::tally::v1::SessionRecord* out);

class SessionHistory {
 public:
  // REQUIRES: capacity >= 1.
  explicit SessionHistory(size_t capacity = kDefaultSessionHistory);

  // Adds a finished session; forgets the oldest one beyond the capacity.
  void Record(SessionRecord record);

  // The sessions kept, newest first.
  std::vector<SessionRecord> Newest() const;

  size_t size() const { return size_; }
  size_t capacity() const { return ring_.size(); }

 private:
  std::vector<SessionRecord> ring_;  // capacity() slots
  size_t next_ = 0;                  // the slot the next record goes to
  size_t size_ = 0;                  // slots in use
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_SESSION_SESSION_HISTORY_H_
