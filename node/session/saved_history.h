// SavedHistory: the peers' last sessions (node/session/session_history.h)
// and where they found differences (node/sync/repair_heat.h), kept in the
// file `session-history` of the node's data directory so that `tally
// status` and the status page's heat map still show them after a restart
// (a node restarted to investigate a failing peer used to forget exactly
// what was to be looked at).
//
// The file is a tally.v1.StatusResponse holding only `peers`, each with its
// address and `history` (newest first; the records of the sessions the
// heat map adds up carry their counts in SessionRecord.heat), in
// protobuf's binary form. It is
// replaced whole (a temporary file, renamed) after every session; it is not
// synced: a history lost to a power cut is not a loss of data.
//
//   absl::StatusOr<std::map<std::string, SavedPeer>> saved =
//       ReadSavedHistory(dir);
//   absl::Status written = WriteSavedHistory(dir, by_peer);
//
// Thread-compatible: the caller serialises writes.
#ifndef TALLY_NODE_SESSION_SAVED_HISTORY_H_
#define TALLY_NODE_SESSION_SAVED_HISTORY_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "node/session/session_history.h"
#include "node/sync/repair_heat.h"

namespace tally {
namespace node {

// The file's name inside the data directory.
inline constexpr char kSavedHistoryFile[] = "session-history";

// One peer's saved sessions, newest first: their records, and the counts
// of the most recent ones (RepairHeatHistory::NewestFirst); heat[i] is
// records[i]'s, and there may be fewer counts than records (not more).
struct SavedPeer {
  std::vector<SessionRecord> records;
  std::vector<std::map<std::string, SegmentCounts>> heat;
};

// The saved sessions per peer address; empty when the file does not
// exist. kDataLoss (naming the file) when it does not parse, kUnavailable
// when it cannot be read.
absl::StatusOr<std::map<std::string, SavedPeer>> ReadSavedHistory(
    const std::string& data_dir);

// Replaces the file with `by_peer`. kUnavailable naming the file when it
// cannot be written.
absl::Status WriteSavedHistory(const std::string& data_dir,
                               const std::map<std::string, SavedPeer>& by_peer);

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_SESSION_SAVED_HISTORY_H_
