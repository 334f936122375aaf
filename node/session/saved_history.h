// SavedHistory: the peers' last sessions (node/session/session_history.h),
// kept in the file `session-history` of the node's data directory so that
// `tally status` still shows them after a restart (a node restarted to
// investigate a failing peer used to forget exactly what was to be looked
// at).
//
// The file is a tally.v1.StatusResponse holding only `peers`, each with its
// address and `history` (newest first), in protobuf's binary form. It is
// replaced whole (a temporary file, renamed) after every session; it is not
// synced: a history lost to a power cut is not a loss of data.
//
//   absl::StatusOr<std::map<std::string, std::vector<SessionRecord>>> saved =
//       ReadSavedHistory(dir);
//   absl::Status written = WriteSavedHistory(dir, histories);
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

namespace tally {
namespace node {

// The file's name inside the data directory.
inline constexpr char kSavedHistoryFile[] = "session-history";

// The records per peer address, newest first; empty when the file does
// not exist. kDataLoss (naming the file) when it does not parse,
// kUnavailable when it cannot be read.
absl::StatusOr<std::map<std::string, std::vector<SessionRecord>>>
ReadSavedHistory(const std::string& data_dir);

// Replaces the file with `by_peer` (records newest first). kUnavailable
// naming the file when it cannot be written.
absl::Status WriteSavedHistory(
    const std::string& data_dir,
    const std::map<std::string, std::vector<SessionRecord>>& by_peer);

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_SESSION_SAVED_HISTORY_H_
