// Session: one anti-entropy session with one peer, written as the steps it
// takes, with the step it is in recorded so that status, metrics and logs
// can say what a running session is doing (Scylla's row-level repair keeps
// such a state per node for the same reason).
//
// The steps, in order; each is a method below, documented above it:
//
//   1. Handshake: the peer's name, clock and keyspaces. The owner checks
//      the name and records the clock (SessionOptions::on_handshake); a
//      peer that has this node's own name is refused.
//   Then for every keyspace either side has, in name order, but one
//   dropped on either side (storage::Store::DropKeyspace, the peer's
//   HandshakeResponse.dropped_keyspaces): its rows move neither way, and
//   a side that still holds it is reported as the keyspace's trouble
//   (kTroubleDropped) until it is dropped there too:
//   2. Diff: compare the two Merkle trees for the differing keys
//      (node/sync/sync.h, tree/diff/diff.h);
//   3. Repair: fetch and write a batch of them.
//      The diff hands its differences to the repair a batch at a time as it
//      finds them (so memory stays bounded), so a keyspace with many
//      differences goes diff, repair, diff, repair, ...: the phase says which
//      one is running. A keyspace that fails (this node may not create it,
//      its schema differs, this node's backend rejects its rows) fails on
//      its own and the next keyspaces are synced all the same; only a stop
//      or the deadline ends the session early.
//   4. Compare (a requested session only, SessionOptions::compare_roots_after):
//      each synced keyspace's root here and on the peer, so that the
//      operator who asked learns whether the nodes are equal now.
//   5. Finish: the outcome, done or failed (with the phase and keyspace it
//      failed in).
//
// A session may be limited to one keyspace (SessionOptions::only_keyspace,
// `tally sync --keyspace`); one that neither side has fails in the
// handshake with kNotFound, naming the keyspaces there are.
//
//   idle ──► handshake ──► diff ⇄ repair (per keyspace) ──► done
//                 │            │      │
//                 └────────────┴──────┴──────────────────► failed
//
//   Session session(store, client, options);
//   SessionResult result = session.Run();    // on a pool thread
//   SessionProgress now = session.progress();  // any thread, at any time
//
// Each keyspace's sync is logged on one line, and a session refused at the
// handshake on one more.
//
// Thread-safe: Run() is called once, from one thread; progress() may be
// called from any thread, while Run() runs and after it returned. The
// session's lock is never held while it calls out (the RPCs, the store,
// on_handshake, on_phase), so a caller may hold its own lock around
// progress() (SessionScheduler::FillStatus does).
#ifndef TALLY_NODE_SESSION_SESSION_H_
#define TALLY_NODE_SESSION_SESSION_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "node/client/client.h"
#include "node/client/replica.h"
#include "node/feed/keyspace_trouble.h"
#include "node/feed/peer_outage_log.h"
#include "node/observe/session_phase.h"
#include "node/session/quiet_session_log.h"
#include "node/sync/repair_heat.h"
#include "node/sync/sync.h"
#include "storage/store.h"
#include "tally/v1/tally.pb.h"
#include "tree/progress_meter.h"

namespace tally {
namespace node {

// What a session has done so far, as status shows it.
struct SessionProgress {
  SessionPhase phase = SessionPhase::kIdle;
  // For kFailed: the phase the error came in (kHandshake, kDiff, kRepair).
  SessionPhase failed_in = SessionPhase::kIdle;
  // The keyspace being diffed or repaired (for kFailed: the one it failed
  // in); empty in the other phases.
  std::string keyspace;
  absl::Time started = absl::InfinitePast();
  absl::Time phase_since = absl::InfinitePast();
  // Keyspaces either side has (known once the handshake is answered) and
  // those synced so far (failed ones included).
  uint32_t keyspaces = 0;
  uint32_t keyspaces_done = 0;
  // Over every keyspace so far. The running keyspace's share is updated
  // after each repair batch.
  uint64_t differences = 0;
  uint64_t rows_received = 0;
  uint64_t rows_sent = 0;
  // Rows the session will move (received + sent), when both sides' row
  // counts at the handshake give a total (node/sync/rows_to_move.h: one side
  // empty or far behind, as in a bootstrap); nullopt otherwise.
  std::optional<uint64_t> rows_expected;
  // While the session runs (handshake, diff, repair): rows moved per second
  // over the last 10 s, and the time left at that rate when rows_expected
  // is known (tree/progress_meter.h). 0 and nullopt once it ended.
  double rows_per_second = 0;
  std::optional<absl::Duration> remaining;
};

// `progress` as status and Admin.Sync show it, as of `now`.
void SessionProgressToProto(const SessionProgress& progress, absl::Time now,
                            ::tally::v1::SessionProgress* out);

// The counters a finished session adds to its peer's totals. They count
// what was done even when the session failed half way: rows of the batches
// it applied were moved all the same.
struct SessionResult {
  absl::Status status;
  // When the session started, by this node's wall clock and by the store's
  // clock (Unix ms): the store's is what the tombstone purge compares with
  // the arrival of its tombstones (SessionScheduler::PeersSyncedSince).
  absl::Time start = absl::InfinitePast();
  uint64_t clock_start_ms = 0;
  uint64_t rows_received = 0;
  uint64_t rows_sent = 0;
  uint64_t bytes_repaired = 0;
  uint64_t rows_erased = 0;
  uint64_t conflicts = 0;
  // Rows not moved because an application changed them (in a sidecar's
  // table, on either node) while the session read them: left to the
  // capture, which indexes the newer write (SyncStats::rows_changed).
  uint64_t rows_changed_during_session = 0;
  // Where in each keyspace's token space the differences were, and the
  // rows repaired there (node/sync/repair_heat.h).
  SessionHeat heat;
  // With compare_roots_after, and the session ok: the keyspaces synced
  // whose roots (or row counts) still differ between the nodes.
  std::vector<std::string> differing_after = {};
};

struct SessionOptions {
  // One-way: the peer is this node's source and this node becomes its copy.
  bool from_source = false;
  // The whole session gives up (kDeadlineExceeded) after this long.
  absl::Duration timeout = absl::InfiniteDuration();
  // When set and true, the session stops at its next step with kCancelled.
  const std::atomic<bool>* cancelled = nullptr;
  // Repair traffic limit in bytes per second; 0 is unlimited.
  double bandwidth_bytes_per_second = 0;
  // The node's limit over all repairs (node-bandwidth); null: none.
  BandwidthLimiter* node_bandwidth = nullptr;
  // Rows fetched and written per repair batch.
  size_t batch_rows = SyncOptions{}.batch_rows;
  // Only this keyspace; empty for every keyspace either side has.
  std::string only_keyspace;
  // After a successful sync, compare each keyspace's roots (step 4).
  bool compare_roots_after = false;
  // Called with the peer's answer to the handshake, which was sent at
  // `sent_ms` and answered by `received_ms` (the store's clock, Unix ms),
  // before any keyspace is synced. An error refuses the peer: the session
  // fails in kHandshake with it. Optional.
  std::function<absl::Status(const ::tally::v1::HandshakeResponse& answer,
                             uint64_t sent_ms, uint64_t received_ms)>
      on_handshake;
  // Called each time the phase changes, with the progress as of the change,
  // before the new phase's work starts (no lock held). Optional.
  std::function<void(const SessionProgress&)> on_phase;
  // The peer's outage log (the scheduler keeps one per peer, so that a
  // peer that stays down logs once, not at every session): a session
  // refused before any keyspace (the peer unreachable, or refusing the
  // handshake) is a failure, any other outcome a success. Null: a refused
  // session logs a warning each time. Must outlive the session.
  PeerOutageLog* outage_log = nullptr;
  // The peer's log of quiet syncs (kept per peer by the scheduler): a
  // keyspace sync that changed nothing is summed up there instead of
  // logged at INFO. Null: every sync logs its line at INFO. Must outlive
  // the session.
  QuietSessionLog* quiet_log = nullptr;
  // Where a keyspace refused for its schema is reported, and a keyspace
  // synced is said to flow again (node/feed/keyspace_trouble.h). Null: none.
  // Must outlive the session.
  KeyspaceTrouble* trouble = nullptr;
};

class Session {
 public:
  // `store` and `client` must outlive the session.
  Session(storage::Store* store, NodeClient* client, SessionOptions options);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Runs every step and returns the outcome. REQUIRES: called once.
  SessionResult Run() ABSL_LOCKS_EXCLUDED(mu_);

  // A copy of where the session is, its rate and time left as of now.
  // kIdle until Run() starts.
  SessionProgress progress() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Step 1: handshake. Asks the peer for its name, clock and keyspaces and
  // adds its keyspaces to keyspaces_. Returns the call's error, the
  // owner's refusal (on_handshake), or kFailedPrecondition when the peer
  // has this node's own name.
  absl::Status Handshake() ABSL_LOCKS_EXCLUDED(mu_);
  // Part of step 1: leaves out of keyspaces_ the keyspaces dropped here or
  // on the peer, reporting one that the other side still holds (and ending
  // that report once it no longer does).
  void LeaveOutDropped(const v1::HandshakeResponse& answer)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Part of step 1 for a session limited to options_.only_keyspace: keeps
  // it alone in keyspaces_, or kNotFound when neither side has it.
  absl::Status OnlyKeyspace() ABSL_LOCKS_EXCLUDED(mu_);

  // Steps 2 and 3: diff `keyspace` with the peer and repair what differs,
  // the two interleaved batch by batch (see the top of the file); the
  // phase follows the sync's steps. Adds what was moved to result_, even
  // on failure, and logs the keyspace's line.
  absl::Status SyncKeyspace(const std::string& keyspace)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Step 4: fills result_.differing_after from this node's roots and the
  // peer's (one more handshake). Returns the handshake's error.
  absl::Status CompareRoots() ABSL_LOCKS_EXCLUDED(mu_);

  // Step 5: record the outcome in the progress (done, or failed in the
  // phase the error came in) and log a session refused before any
  // keyspace was synced.
  void Finish(bool refused) ABSL_LOCKS_EXCLUDED(mu_);

  // Part of step 1: progress_.rows_expected from the row counts of the
  // keyspaces to sync, here (this node's store) and on the peer (the
  // handshake's summaries).
  void ExpectRows() ABSL_LOCKS_EXCLUDED(mu_);

  // Sets the running keyspace's rows so far (on top of `before`, the
  // counts of the keyspaces before it) and feeds the meter.
  void CountRows(const SessionProgress& before, uint64_t received,
                 uint64_t sent) ABSL_LOCKS_EXCLUDED(mu_);

  // Makes `phase` (and `keyspace`) current and tells on_phase.
  void EnterPhase(SessionPhase phase, const std::string& keyspace)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Makes `error` the session's outcome, with the phase and keyspace it
  // came in.
  void Fail(const absl::Status& error) ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  storage::Store* const store_;
  NodeClient* const client_;
  const SessionOptions options_;
  const std::unique_ptr<Replica> local_;
  const std::unique_ptr<Replica> remote_;

  // Used by Run()'s thread only.
  SessionResult result_;
  std::set<std::string> keyspaces_;  // either side's, in name order
  std::string peer_name_ = "?";      // the handshake's, for the log lines
  // Row counts (tombstones included) per keyspace, here and on the peer,
  // at the handshake.
  absl::flat_hash_map<std::string, uint64_t> local_rows_;
  absl::flat_hash_map<std::string, uint64_t> peer_rows_;
  // The peer's schema fingerprint per keyspace (node/sync/schema_check.h).
  absl::flat_hash_map<std::string, std::string> peer_schemas_;
  // ... and the texts they hash (the columns, named in refusals).
  absl::flat_hash_map<std::string, std::string> peer_schema_texts_;
  SessionPhase failed_in_ = SessionPhase::kIdle;  // where result_.status
  std::string failed_keyspace_;                   // came from

  mutable absl::Mutex mu_;
  SessionProgress progress_ ABSL_GUARDED_BY(mu_);
  // Rows moved (received + sent) over time: the rate and time left.
  tree::ProgressMeter meter_ ABSL_GUARDED_BY(mu_) =
      tree::ProgressMeter(absl::InfinitePast());
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_SESSION_SESSION_H_
