// DiffRun: one diff or repair of this node (A) against another node (B),
// run at a tool's request (Admin.RunDiff: `tally diff A B`, `tally repair
// A B`). The node dials B itself, with the settings its sessions use (its
// name, epoch and TLS client credentials), so the diff's traffic is one
// answer per exchange, a session's, instead of two through a third party.
//
// The steps, in order:
//
//   1. Connect: dial B and wait for the connection (at most kConnectWait),
//      so that its set-up is paid before the diff is timed.
//   2. Handshake: B's name and its summary of the keyspace. A B that does
//      not answer fails with kUnavailable marked PeerUnreachable (the tool
//      then diffs from where it is); a B with this node's own name is this
//      node (kInvalidArgument). The keyspace's schemas must match
//      (node/sync/schema_check.h).
//   3. Sync: the diff, or the diff and the repair batch by batch
//      (node/sync/sync.h), each differing key and the repair's progress handed
//      to `events` as they come. A dry run and a diff change nothing.
//   4. Roots: after a real repair, both roots read again (the proof the
//      tool shows); for a run limited to a range or keys, the roots of that
//      part only (tree/diff/diff_scope.h), which are all it made equal.
//   5. Summary: the counts, returned.
//
// A keyspace absent on both nodes is not an error here: the summary says
// so (a_has_keyspace and b_has_keyspace false) and the tool reports it as
// it reports it for a diff it runs itself.
//
//   DiffRunOptions options{peer_client_options, "10.0.0.1:7400", &stop,
//                          deadline};
//   absl::StatusOr<v1::RunDiffSummary> s =
//       RunDiffAgainstPeer(store, request, options, &events);
//
// Thread-compatible: RunDiffAgainstPeer blocks (it calls B) and runs on a
// thread of its own (node/rpc/diff_runner.h); `events` is called on it.
#ifndef TALLY_NODE_SYNC_DIFF_RUN_H_
#define TALLY_NODE_SYNC_DIFF_RUN_H_

#include <atomic>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "node/client/client.h"
#include "node/sync/bandwidth_limiter.h"
#include "storage/store.h"
#include "tally/v1/tally.pb.h"
#include "tree/diff/diff_scope.h"

namespace tally {
namespace node {

// The longest a run waits for its connection to B before the first call
// (which then says why B cannot be reached).
inline constexpr absl::Duration kConnectWait = absl::Seconds(3);

// The longest peer address a request may name.
inline constexpr size_t kMaxPeerAddressBytes = 1024;

// A request's key list (RunDiffRequest.keys): at most this many keys, of at
// most this many bytes each and in all, so that a request stays well under
// gRPC's 4 MB message limit. `tally --keys-from` sends a longer list in
// several requests.
inline constexpr size_t kMaxRunDiffKeys = 10'000;
inline constexpr size_t kMaxRunDiffKeyBytes = 64 << 10;
inline constexpr size_t kMaxRunDiffKeyListBytes = 2 << 20;

// Where a run's differences and progress go. Each call returns an error
// (kCancelled) when the tool went away; the run then stops with it.
class DiffRunEvents {
 public:
  virtual ~DiffRunEvents() = default;
  virtual absl::Status Difference(v1::DiffDifference difference) = 0;
  virtual absl::Status Progress(const v1::RunDiffProgress& progress) = 0;
};

struct DiffRunOptions {
  // How this node dials its peers (node name, epoch, credentials, call
  // deadline).
  ClientOptions peer_client;
  // This node's listen address with its port: a request naming it is
  // refused before B is dialled.
  std::string self_address;
  // When set and true, the run stops at its next step with kCancelled.
  const std::atomic<bool>* cancelled = nullptr;
  // The run gives up (kDeadlineExceeded) after this time: the tool's
  // deadline.
  absl::Time deadline = absl::InfiniteFuture();
  // The node's limit over all repairs (node-bandwidth); null: none.
  BandwidthLimiter* node_bandwidth = nullptr;
};

// kInvalidArgument naming the field for a request that cannot run: a bad
// or over-long peer address, this node's own address, a bad keyspace
// name, an unknown mode, a dry run of a diff, a range whose first token is
// after its last, a range and keys together, an empty or over-long key, or
// a key list past the limits above.
absl::Status ValidateRunDiffRequest(const v1::RunDiffRequest& request,
                                    absl::string_view self_address);

// The part of the keyspace `request` covers (range, keys or all of it).
// REQUIRES: ValidateRunDiffRequest(request) is OK.
tree::DiffScope ScopeOf(const v1::RunDiffRequest& request);

// Runs `request` (steps above) and returns its summary, or the first error:
// ValidateRunDiffRequest's, kUnavailable marked PeerUnreachable when B
// cannot be reached, kInvalidArgument when B is this node,
// kFailedPrecondition when the schemas differ, the sync's errors
// (kCancelled, kDeadlineExceeded, B's failures), or `events`' error.
// REQUIRES: store != nullptr, events != nullptr.
absl::StatusOr<v1::RunDiffSummary> RunDiffAgainstPeer(
    storage::Store* store, const v1::RunDiffRequest& request,
    const DiffRunOptions& options, DiffRunEvents* events);

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_SYNC_DIFF_RUN_H_
