// RepairHeat: where in a keyspace's token space the anti-entropy sessions
// with a peer found differences and repaired rows — what the status page's
// heat map draws (node/observe/status_page.h), sent as PeerStatus.heat.
//
// The 64-bit token space (tree/token.h) is cut into kHeatSegments equal
// ranges, the nodes of level kHeatLevel of the token tree: segment i is
// NodeRef{kHeatLevel, i}, the tokens whose top kHeatLevel bits are i. For
// each keyspace and segment two counts are kept: the differing keys the diff
// found there, and of them the rows the repair wrote or erased.
//
// A session fills a SessionHeat as it runs (node/session/session.h); the
// scheduler keeps each peer's last kHeatWindow sessions in a RepairHeatHistory
// and reports the last one and their sum:
//
//   SessionHeat heat;                                    // one session
//   heat.AddDifference("users", tree::TokenOf(key), /*moves_row=*/true);
//   heat.CommitRepairs();      // the batch with that key was written
//   history.AddSession(heat);  // when the session ends
//   history.ToProto(&peer_status);
//
// A repaired row counts when its batch was written (CommitRepairs): the
// rows of a batch a failed session never wrote count as differences only.
// A row the target had already replaced with a newer one by the time the
// batch arrived (a concurrent write) still counts as repaired.
//
// The status message stays small: only keyspaces and segments with a count
// are sent, at most 2 * kHeatSegments entries per keyspace and peer, and at
// most kHeatKeyspaces keyspaces per peer (those with the most differences).
// At worst about 40 kB per peer; a peer in sync sends nothing.
//
// Thread-compatible: a SessionHeat is used by its session's thread; the
// scheduler guards each RepairHeatHistory with its own lock.
#ifndef TALLY_NODE_SYNC_REPAIR_HEAT_H_
#define TALLY_NODE_SYNC_REPAIR_HEAT_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "tally/v1/tally.pb.h"
#include "tree/token.h"

namespace tally {
namespace node {

// 64 segments: fine enough to tell a hot range from a cold one at a glance,
// small enough to send with every Admin.Status.
inline constexpr int kHeatLevel = 6;
inline constexpr int kHeatSegments = 1 << kHeatLevel;
// Sessions a history adds up.
inline constexpr size_t kHeatWindow = 10;
// Keyspaces a peer's status lists at most.
inline constexpr size_t kHeatKeyspaces = 32;

// The segment that holds `token`, in [0, kHeatSegments).
inline int HeatSegmentOf(tree::Token token) {
  return static_cast<int>(tree::NodeIndexOf(token, kHeatLevel));
}

// One keyspace's counts, by segment.
struct SegmentCounts {
  std::array<uint64_t, kHeatSegments> differences{};
  std::array<uint64_t, kHeatSegments> rows_repaired{};

  bool empty() const;
  void Add(const SegmentCounts& other);
};

// What one session found, by keyspace.
class SessionHeat {
 public:
  // A differing key of `keyspace` at `token`; `moves_row` when the repair
  // writes or erases a row for it (not for a conflict it leaves alone).
  // Repairs of an earlier keyspace that were never committed are dropped.
  void AddDifference(const std::string& keyspace, tree::Token token,
                     bool moves_row);
  // The repairs added since the last commit were written.
  void CommitRepairs();

  // Keyspaces with a count, by name.
  const std::map<std::string, SegmentCounts>& keyspaces() const {
    return keyspaces_;
  }

 private:
  std::map<std::string, SegmentCounts> keyspaces_;
  // Repairs added but not yet written, of keyspace pending_keyspace_.
  std::string pending_keyspace_;
  std::array<uint64_t, kHeatSegments> pending_{};
  bool has_pending_ = false;
};

// A peer's last `window` sessions.
class RepairHeatHistory {
 public:
  explicit RepairHeatHistory(size_t window = kHeatWindow);

  // Adds a session that ended (whatever its outcome); the oldest beyond the
  // window is forgotten.
  void AddSession(const SessionHeat& session);

  // Adds a session as its counts by keyspace (a saved one, at start).
  void AddSessionCounts(std::map<std::string, SegmentCounts> session);

  // Sessions kept (at most the window).
  size_t sessions() const { return sessions_.size(); }
  // Their counts by keyspace, newest first (to save them).
  std::vector<std::map<std::string, SegmentCounts>> NewestFirst() const;

  // Sets peer->heat (keyspaces with a count in any kept session, by name;
  // the `max_keyspaces` with the most differences if there are more),
  // peer->heat_sessions and peer->heat_keyspaces_left_out.
  void ToProto(::tally::v1::PeerStatus* peer,
               size_t max_keyspaces = kHeatKeyspaces) const;

 private:
  const size_t window_;
  std::deque<std::map<std::string, SegmentCounts>> sessions_;  // newest last
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_SYNC_REPAIR_HEAT_H_
