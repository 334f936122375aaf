// NodeClient: a connection to one tallyd, for tools and for peers.
//
// Wraps one gRPC channel and the Peer and Admin stubs. Every call has a
// deadline; streams are read and written in bounded messages. The client
// counts the serialized payload of every request and response, so that
// `tally diff` and sessions report the bytes they really moved.
//
//   absl::StatusOr<std::unique_ptr<NodeClient>> c =
//       NodeClient::Connect("127.0.0.1:7400", ClientOptions{});
//   absl::StatusOr<v1::PutResponse> r = (*c)->Put("default", "k", "v");
//   std::unique_ptr<tree::TreeView> view = (*c)->NewTreeView("default");
//
// Thread-safe: calls may run concurrently; the views it makes are used by
// one diff at a time.
#ifndef TALLY_NODE_CLIENT_CLIENT_H_
#define TALLY_NODE_CLIENT_CLIENT_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "tally/v1/tally.pb.h"
#include "tree/tree_view.h"

namespace grpc {
class Channel;
class Status;
class ChannelCredentials;
class ClientContext;
}  // namespace grpc

namespace tally {
namespace node {

namespace v1 = ::tally::v1;

// Every channel pings its node every kKeepaliveTime while calls are open
// and drops the connection when a ping is not answered within
// kKeepaliveTimeout: a silently dead link fails its calls (and a feed
// subscription notices) within about 10 s.
inline constexpr absl::Duration kKeepaliveTime = absl::Seconds(5);
inline constexpr absl::Duration kKeepaliveTimeout = absl::Seconds(5);

// Lets another thread end a call that may be waiting for a message that
// never comes (a silently dead link): Cancel() cancels the call in progress
// at once and makes any later call with this handle end before it starts.
//
//   StreamCanceller canceller;
//   std::thread t([&] { client->Subscribe(request, sink, stop, &canceller); });
//   canceller.Cancel();  // Subscribe returns kCancelled promptly
//   t.join();
//
// Thread-safe. One call at a time uses a handle; it must outlive the call.
class StreamCanceller {
 public:
  StreamCanceller() = default;
  StreamCanceller(const StreamCanceller&) = delete;
  StreamCanceller& operator=(const StreamCanceller&) = delete;

  void Cancel() ABSL_LOCKS_EXCLUDED(mu_);
  bool cancelled() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class NodeClient;
  // For the call: registers its context; false when already cancelled (the
  // call must not start). Detach() before the context goes away.
  bool Attach(grpc::ClientContext* context) ABSL_LOCKS_EXCLUDED(mu_);
  void Detach() ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
};

struct ClientOptions {
  // Deadline of each unary call and of each message of a stream.
  absl::Duration rpc_timeout = absl::Seconds(30);
  // Deadline of a whole stream (scans and fetches of many rows).
  absl::Duration stream_timeout = absl::Minutes(30);
  // This node's name and epoch, sent in handshakes; empty for a tool.
  std::string node_name;
  uint64_t epoch = 0;
  // Set by a node's session scheduler on its peers' clients: handshakes
  // then say they open scheduled sessions (HandshakeRequest.scheduled),
  // which tells the peer the link exists (a diff or repair run does not).
  bool scheduled_sessions = false;
  // How to secure the channel (node/client/tls.h MakeChannelCredentials); null
  // is plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
};

// Admin.RunDiff's answer when the node that runs the diff cannot reach its
// peer carries this trailing metadata key (the peer's address), so that a
// tool tells "A cannot reach B" from "the tool cannot reach A" (both are
// UNAVAILABLE) and may diff from where it is instead.
inline constexpr char kUnreachablePeerMetadata[] = "tally-unreachable-peer";

// `status` with a payload naming `peer` as the node that could not be
// reached; UnreachablePeer() reads it back (nullopt when there is none).
// The server sends it as kUnreachablePeerMetadata; NodeClient::RunDiff
// restores it.
absl::Status MarkPeerUnreachable(absl::Status status, absl::string_view peer);
std::optional<std::string> UnreachablePeer(const absl::Status& status);

// Admin.RunDiff's refusal of a peer that is the node itself (by address or
// by name) carries this trailing metadata key, so that a tool compares the
// node with itself from where it is (equal) without reading the message.
inline constexpr char kPeerIsSelfMetadata[] = "tally-peer-is-self";

// `status` marked as the refusal of a peer that is the node itself;
// PeerIsSelf() reads the mark back. The server sends it as
// kPeerIsSelfMetadata; NodeClient::RunDiff restores it.
absl::Status MarkPeerIsSelf(absl::Status status);
bool PeerIsSelf(const absl::Status& status);

// Splits and checks "HOST:PORT". Returns kInvalidArgument naming the
// problem (no port, port out of range, empty host).
absl::Status ValidateAddress(absl::string_view address);

class NodeClient {
 public:
  // Creates the channel (connection is lazy) after validating `address`.
  static absl::StatusOr<std::unique_ptr<NodeClient>> Connect(
      const std::string& address, ClientOptions options);
  ~NodeClient();
  NodeClient(const NodeClient&) = delete;
  NodeClient& operator=(const NodeClient&) = delete;

  const std::string& address() const { return address_; }

  // Starts connecting the channel now rather than at the first call, and
  // returns at once: clients that will be used together (the two nodes of
  // `tally diff`) connect at the same time.
  void StartConnecting();
  // Connects (if not yet) and waits while the channel is connecting, at most
  // `timeout`. Returns true when it is ready; false when it failed or is
  // still connecting: the next call then says why, exactly as without
  // this wait (a dead node still fails fast). Used so that the set-up of a
  // connection is paid before a diff's first round, not within it.
  bool AwaitConnection(absl::Duration timeout);

  // ---- Peer service.
  absl::StatusOr<v1::HandshakeResponse> Handshake(
      const std::vector<std::string>& keyspaces, int top_levels);
  absl::StatusOr<v1::ExchangeResponse> Exchange(
      const v1::ExchangeRequest& request);
  // Calls `sink` for every message of the stream; stops at its first error.
  absl::Status Scan(
      const v1::ScanRequest& request,
      const std::function<absl::Status(const v1::ScanResponse&)>& sink);
  absl::Status FetchRows(
      const v1::FetchRowsRequest& request,
      const std::function<absl::Status(const v1::FetchRowsResponse&)>& sink);
  // Follows a change feed: calls `sink` for every batch until the sink
  // fails, `stop` becomes true (checked at every batch; publishers send a
  // heartbeat every second), `canceller` (if not null) is cancelled — at
  // once, even while waiting for a batch — or the stream ends. Returns the
  // sink's error, kCancelled when stopped, or the stream's status. No
  // stream deadline. The sink may move from the batch it is given.
  absl::Status Subscribe(
      const v1::SubscribeRequest& request,
      const std::function<absl::Status(v1::FeedBatch&)>& sink,
      const std::atomic<bool>& stop, StreamCanceller* canceller = nullptr);
  // Sends rows (and erases) in messages of at most kMaxRowsPerMessage.
  absl::StatusOr<v1::PushRowsResponse> PushRows(
      const std::string& keyspace, v1::ApplyMode mode,
      const std::vector<v1::Row>& rows, const std::vector<std::string>& erase);

  // ---- Admin service.
  // `key_values` also address the row, as a PostgreSQL table's primary key
  // as text (tally.proto PutRequest); the node uses the form its keyspace
  // takes.
  absl::StatusOr<v1::PutResponse> Put(
      const std::string& keyspace, const std::string& key,
      const std::string& value,
      const std::vector<std::string>& key_values = {});
  absl::StatusOr<v1::GetResponse> Get(
      const std::string& keyspace, const std::string& key,
      const std::vector<std::string>& key_values = {});
  absl::StatusOr<v1::DeleteResponse> Delete(
      const std::string& keyspace, const std::string& key,
      const std::vector<std::string>& key_values = {});
  // Streams rows produced by `next` (which returns false when done) to the
  // node, in messages of at most kMaxRowsPerMessage rows and ~1 MB.
  absl::StatusOr<v1::LoadResponse> Load(
      const std::string& keyspace,
      const std::function<bool(std::string* key, std::string* value)>& next);
  absl::StatusOr<v1::StatusResponse> Status();
  // Admin.PausePeer (`paused`) or Admin.ResumePeer of the node's `peer`.
  absl::StatusOr<v1::PeerControlResponse> SetPeerPaused(const std::string& peer,
                                                        bool paused);
  // Admin.DropKeyspace (`drop`) or Admin.UndropKeyspace of `keyspace`; a
  // drop erases every row, so the call has the stream deadline. Returns the
  // rows removed (0 for an undrop).
  absl::StatusOr<uint64_t> DropKeyspace(const std::string& keyspace, bool drop);
  // Admin.VerifyTables: a sidecar's index against its tables. Scans whole
  // tables, so the call has the stream deadline.
  absl::StatusOr<v1::VerifyTablesResponse> VerifyTables(
      const v1::VerifyTablesRequest& request);
  // Asks this node to diff (or repair) itself against request.peer and
  // calls `sink` for every event, the summary last; stops at the sink's
  // first error. A `canceller` can end the call from another thread
  // (kCancelled; the node then stops the diff). The whole call has the
  // stream deadline. An error saying the node could not reach the peer
  // carries UnreachablePeer().
  absl::Status RunDiff(
      const v1::RunDiffRequest& request,
      const std::function<absl::Status(v1::RunDiffEvent&)>& sink,
      StreamCanceller* canceller = nullptr);

  // Asks this node for a session now with its peer(s) (Admin.Sync) and
  // calls `sink` for every event until the sessions end; stops at the
  // sink's first error. A `canceller` ends the call from another thread
  // (kCancelled; the node then stops the sessions). The whole call has the
  // stream deadline.
  absl::Status Sync(const v1::SyncRequest& request,
                    const std::function<absl::Status(v1::SyncEvent&)>& sink,
                    StreamCanceller* canceller = nullptr);

  // A TreeView of `keyspace` on this node. Summary() answers kNotFound when
  // the node has no such keyspace.
  std::unique_ptr<tree::TreeView> NewTreeView(const std::string& keyspace);

  // Serialized payload moved by this client so far.
  tree::ViewTraffic traffic() const;

 private:
  NodeClient(std::string address, ClientOptions options,
             std::shared_ptr<grpc::Channel> channel);
  // Reads a server stream started by `start(context)` to its end, counting
  // its bytes and handing each message to `sink` (which may take it apart).
  // A `canceller`, when given, can end the stream from another thread.
  // `on_finish`, when given, sees the finished call's context (its trailing
  // metadata) and status, and may amend the status the call returns.
  template <typename Response, typename Start>
  absl::Status ReadStream(
      absl::string_view name, size_t request_bytes,
      const std::function<absl::Status(Response&)>& sink, const Start& start,
      absl::Duration timeout, StreamCanceller* canceller = nullptr,
      const std::function<void(const grpc::ClientContext&, const grpc::Status&,
                               absl::Status*)>& on_finish = nullptr);
  void CountSent(size_t bytes) { sent_ += bytes; }
  void CountReceived(size_t bytes) { received_ += bytes; }

  const std::string address_;
  const ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  struct Stubs;
  std::unique_ptr<Stubs> stubs_;
  std::atomic<uint64_t> sent_{0};
  std::atomic<uint64_t> received_{0};
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_CLIENT_CLIENT_H_
