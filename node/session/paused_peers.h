// PausedPeers: the peers an operator paused (`tally peer pause`), kept in
// the file `paused-peers` of the node's data directory so that a pause
// outlives a restart: a node restarted during maintenance does not resume
// the sessions it was told to hold.
//
// The file holds one peer address a line, as configured (`--peer`). It is
// replaced whole (written to a temporary file, synced, renamed) each time a
// peer is paused or resumed; a missing file means no peer is paused.
//
//   absl::StatusOr<std::set<std::string>> paused = ReadPausedPeers(dir);
//   absl::Status written = WritePausedPeers(dir, {"10.0.0.2:7400"});
//
// Thread-compatible: the caller serialises writes.
#ifndef TALLY_NODE_SESSION_PAUSED_PEERS_H_
#define TALLY_NODE_SESSION_PAUSED_PEERS_H_

#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tally {
namespace node {

// The file's name inside the data directory.
inline constexpr char kPausedPeersFile[] = "paused-peers";

// The addresses in `data_dir`'s file; empty when it does not exist.
// Returns kUnavailable (naming the file) when it cannot be read.
absl::StatusOr<std::set<std::string>> ReadPausedPeers(
    const std::string& data_dir);

// Replaces the file with `addresses` (removes it when empty). Returns
// kUnavailable naming the file when it cannot be written.
absl::Status WritePausedPeers(const std::string& data_dir,
                              const std::set<std::string>& addresses);

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_SESSION_PAUSED_PEERS_H_
