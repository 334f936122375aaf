// StreamLimiter: the bulk streams a node serves (Scan, FetchRows, PushRows,
// Load), counted per client, with an idle deadline for the ones whose
// reader stops reading.
//
// A bulk stream costs the node memory for as long as it is open (a message
// of up to a few MB waiting for its reader, the request, a store snapshot
// between messages), and it is opened by any client with one small
// request. So a client host — a peer's or a tool's IP address, whatever its
// port — has at most `max_per_client` bulk streams open at once; more are
// refused with RESOURCE_EXHAUSTED. And a stream whose message has waited
// longer than `idle_timeout` for its reader is cancelled, so a client that
// opens streams and never reads cannot keep them. (Streams never hold a
// worker thread while they wait: see node/rpc/peer_service.cc.)
//
//   StreamLimiter limiter(StreamLimits{});
//   absl::StatusOr<std::unique_ptr<StreamTicket>> ticket =
//       limiter.Admit(context, "scan");
//   if (!ticket.ok()) { Finish(ToGrpcStatus(ticket.status())); return; }
//   (*ticket)->WriteStarted();  StartWrite(&message);
//   ... OnWriteDone: (*ticket)->WriteDone();
//
// Thread-safe. The limiter must outlive every ticket it gave out; a ticket
// must be destroyed before its call's context (in the reactor's OnDone, as
// the reactor is deleted, is right).
#ifndef TALLY_NODE_RPC_STREAM_LIMITER_H_
#define TALLY_NODE_RPC_STREAM_LIMITER_H_

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tally {
namespace node {

struct StreamLimits {
  // Bulk streams open at once per client host.
  int max_per_client = 32;
  // A stream whose write waited this long for its reader is cancelled.
  absl::Duration idle_timeout = absl::Seconds(60);
};

class StreamLimiter;

// One admitted stream; destroying it ends the stream's registration.
class StreamTicket {
 public:
  ~StreamTicket();
  StreamTicket(const StreamTicket&) = delete;
  StreamTicket& operator=(const StreamTicket&) = delete;

  // A message was handed to gRPC and waits for the reader; the idle clock
  // runs until WriteDone().
  void WriteStarted();
  void WriteDone();

 private:
  friend class StreamLimiter;
  StreamTicket(StreamLimiter* limiter, int id) : limiter_(limiter), id_(id) {}

  StreamLimiter* const limiter_;
  const int id_;
};

class StreamLimiter {
 public:
  // REQUIRES: limits.max_per_client >= 1, limits.idle_timeout > 0.
  explicit StreamLimiter(StreamLimits limits);
  // Stops the watchdog. REQUIRES: every ticket was destroyed.
  ~StreamLimiter();
  StreamLimiter(const StreamLimiter&) = delete;
  StreamLimiter& operator=(const StreamLimiter&) = delete;

  // Admits a stream of `context`'s client, or returns kResourceExhausted
  // naming the client and the limit. `what` names the stream in messages
  // and logs ("scan").
  absl::StatusOr<std::unique_ptr<StreamTicket>> Admit(
      grpc::CallbackServerContext* context, absl::string_view what)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Streams open now, over all clients.
  int open_streams() const ABSL_LOCKS_EXCLUDED(mu_);
  // Streams cancelled by the idle deadline since start.
  uint64_t idle_cancels() const ABSL_LOCKS_EXCLUDED(mu_);

  // The client host of a gRPC peer string: "ipv4:10.0.0.2:51234" and
  // "ipv6:[::1]:51234" give "10.0.0.2" and "::1".
  static std::string ClientHost(absl::string_view peer);

 private:
  friend class StreamTicket;

  struct Stream {
    std::string client;
    std::string what;
    grpc::CallbackServerContext* context = nullptr;
    // When the pending write started; InfiniteFuture when none is pending.
    absl::Time write_started = absl::InfiniteFuture();
    // The watchdog is cancelling it (outside mu_): the ticket waits.
    bool cancelling = false;
    bool cancelled = false;
  };

  void Release(int id) ABSL_LOCKS_EXCLUDED(mu_);
  void SetWriteStarted(int id, absl::Time when) ABSL_LOCKS_EXCLUDED(mu_);
  // The watchdog thread: cancels streams idle past the deadline.
  void Watch() ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  const StreamLimits limits_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<int, Stream> streams_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int> per_client_ ABSL_GUARDED_BY(mu_);
  uint64_t idle_cancels_ ABSL_GUARDED_BY(mu_) = 0;

  // Started last in the constructor.
  std::thread watchdog_;
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_RPC_STREAM_LIMITER_H_
