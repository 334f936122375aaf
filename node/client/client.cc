#include "node/client/client.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "node/client/grpc_status.h"
#include "node/client/wire.h"
#include "tally/v1/tally.grpc.pb.h"
#include "tree/status_macros.h"

namespace tally {
namespace node {

struct NodeClient::Stubs {
  std::unique_ptr<v1::Peer::Stub> peer;
  std::unique_ptr<v1::Admin::Stub> admin;
};

namespace {

// Adds context to an RPC failure: which node, which call. UNAVAILABLE is
// said as "unavailable", not "unreachable": a node that was reached answers
// it too (a store that refuses writes after a full disk), and the message
// after the colon tells the two apart.
absl::Status CallError(const grpc::Status& s, const std::string& address,
                       absl::string_view call) {
  absl::Status status = ToAbslStatus(s);
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    return absl::Status(status.code(),
                        absl::StrFormat("node %s is unavailable (%s): %s",
                                        address, call, s.error_message()));
  }
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::Status(
        status.code(),
        absl::StrFormat("node %s did not answer in time (%s): %s", address,
                        call, s.error_message()));
  }
  return absl::Status(
      status.code(),
      absl::StrFormat("%s on %s: %s", call, address, s.error_message()));
}

// A TreeView of one keyspace on a remote node.
class RemoteTreeView : public tree::TreeView {
 public:
  RemoteTreeView(NodeClient* client, std::string keyspace)
      : client_(client), keyspace_(std::move(keyspace)) {}

  absl::StatusOr<tree::ViewSummary> Summary(int top_levels) override {
    TALLY_RETURN_IF_ERROR(tree::ValidateSummaryTopLevels(top_levels));
    TALLY_ASSIGN_OR_RETURN(v1::HandshakeResponse response,
                           client_->Handshake({keyspace_}, top_levels));
    // A node from before seeded exchanges does not say it answers them.
    seeded_ = response.seeded_exchange();
    for (const v1::KeyspaceSummary& ks : response.keyspaces()) {
      if (ks.name() == keyspace_) return SummaryFromProto(ks);
    }
    return absl::NotFoundError(
        absl::StrFormat("keyspace '%s' does not exist on node %s", keyspace_,
                        client_->address()));
  }

  absl::StatusOr<tree::ViewResponse> Exchange(
      const tree::ViewRequest& request) override {
    v1::ExchangeRequest proto;
    proto.set_keyspace(keyspace_);
    ToProto(request, &proto);
    TALLY_ASSIGN_OR_RETURN(v1::ExchangeResponse response,
                           client_->Exchange(proto));
    return FromProto(response);
  }

  absl::StatusOr<tree::SeededResponse> ExchangeSeeded(
      const tree::SeededRequest& request) override {
    if (!seeded_) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "node %s does not answer seeded exchanges", client_->address()));
    }
    TALLY_RETURN_IF_ERROR(tree::ValidateSeededRequest(request));
    v1::ExchangeRequest proto;
    proto.set_keyspace(keyspace_);
    ToProto(request, &proto);
    TALLY_ASSIGN_OR_RETURN(v1::ExchangeResponse response,
                           client_->Exchange(proto));
    return SeededFromProto(response, request);
  }

  bool AnswersSeeded() const override { return seeded_; }

  absl::Status Scan(absl::Span<const tree::NodeRef> ranges,
                    const tree::EntrySink& sink) override {
    return ScanRanges(ranges, /*with_values=*/false, sink);
  }

  // The node leaves out values over 256 KiB, and a node from before values
  // leaves out all: those entries come without one (RowEntry::value).
  absl::Status ScanWithValues(absl::Span<const tree::NodeRef> ranges,
                              const tree::EntrySink& sink) override {
    return ScanRanges(ranges, /*with_values=*/true, sink);
  }

  std::optional<tree::ViewTraffic> MeasuredTraffic() const override {
    return client_->traffic();
  }

 private:
  absl::Status ScanRanges(absl::Span<const tree::NodeRef> ranges,
                          bool with_values, const tree::EntrySink& sink) {
    // Ranges go in requests of at most kMaxScanRanges.
    for (size_t start = 0; start < ranges.size(); start += kMaxScanRanges) {
      v1::ScanRequest request;
      request.set_keyspace(keyspace_);
      request.set_with_values(with_values);
      for (size_t i = start;
           i < std::min(ranges.size(), start + kMaxScanRanges); ++i) {
        ToProto(ranges[i], request.add_ranges());
      }
      TALLY_RETURN_IF_ERROR(client_->Scan(
          request, [&](const v1::ScanResponse& response) -> absl::Status {
            for (const v1::RowEntry& e : response.entries()) {
              TALLY_ASSIGN_OR_RETURN(tree::RowEntry entry,
                                     FromProto(e, response.origins()));
              TALLY_RETURN_IF_ERROR(sink(entry));
            }
            return absl::OkStatus();
          }));
    }
    return absl::OkStatus();
  }

  NodeClient* const client_;
  const std::string keyspace_;
  // Whether the node said in its last handshake that it answers seeded
  // exchanges; until then, assume not.
  bool seeded_ = false;
};

}  // namespace

namespace {
constexpr char kUnreachablePeerPayload[] = "tally.v1/unreachable-peer";
constexpr char kPeerIsSelfPayload[] = "tally.v1/peer-is-self";
}  // namespace

absl::Status MarkPeerIsSelf(absl::Status status) {
  status.SetPayload(kPeerIsSelfPayload, absl::Cord("1"));
  return status;
}

bool PeerIsSelf(const absl::Status& status) {
  return status.GetPayload(kPeerIsSelfPayload).has_value();
}

absl::Status MarkPeerUnreachable(absl::Status status, absl::string_view peer) {
  status.SetPayload(kUnreachablePeerPayload, absl::Cord(peer));
  return status;
}

std::optional<std::string> UnreachablePeer(const absl::Status& status) {
  absl::optional<absl::Cord> peer = status.GetPayload(kUnreachablePeerPayload);
  if (!peer.has_value()) return std::nullopt;
  return std::string(*peer);
}

absl::Status ValidateAddress(absl::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrFormat("address '%s' has no port; use HOST:PORT", address));
  }
  const absl::string_view host = address.substr(0, colon);
  const absl::string_view port = address.substr(colon + 1);
  int port_number = 0;
  if (host.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("address '%s' has no host; use HOST:PORT", address));
  }
  if (!absl::SimpleAtoi(port, &port_number) || port_number < 0 ||
      port_number > 65535) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "address '%s' has an invalid port; ports are 0..65535", address));
  }
  return absl::OkStatus();
}

NodeClient::NodeClient(std::string address, ClientOptions options,
                       std::shared_ptr<grpc::Channel> channel)
    : address_(std::move(address)),
      options_(std::move(options)),
      channel_(std::move(channel)),
      stubs_(std::make_unique<Stubs>()) {
  stubs_->peer = v1::Peer::NewStub(channel_);
  stubs_->admin = v1::Admin::NewStub(channel_);
}

NodeClient::~NodeClient() = default;

absl::StatusOr<std::unique_ptr<NodeClient>> NodeClient::Connect(
    const std::string& address, ClientOptions options) {
  TALLY_RETURN_IF_ERROR(ValidateAddress(address));
  grpc::ChannelArguments args;
  // Fail calls to a dead node quickly instead of waiting out the deadline.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  // Keepalive pings while calls are open, so that a link that died
  // silently (a partition that drops packets without a reset, a NAT that
  // forgot the connection) fails its calls within kKeepaliveTime +
  // kKeepaliveTimeout. Without them a feed subscription, which only reads,
  // waits forever for its next heartbeat, and every later call reuses the
  // dead connection. A subscriber sends no data on its stream, so pings
  // must not wait for data frames. (Servers accept pings this often:
  // node_server.cc.)
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
              absl::ToInt64Milliseconds(kKeepaliveTime));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
              absl::ToInt64Milliseconds(kKeepaliveTimeout));
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  auto channel = grpc::CreateCustomChannel(
      address,
      options.credentials != nullptr ? options.credentials
                                     : grpc::InsecureChannelCredentials(),
      args);
  return std::unique_ptr<NodeClient>(
      new NodeClient(address, std::move(options), std::move(channel)));
}

void NodeClient::StartConnecting() {
  channel_->GetState(/*try_to_connect=*/true);
}

bool NodeClient::AwaitConnection(absl::Duration timeout) {
  const auto deadline = absl::ToChronoTime(absl::Now() + timeout);
  grpc_connectivity_state state = channel_->GetState(/*try_to_connect=*/true);
  while (state == GRPC_CHANNEL_IDLE || state == GRPC_CHANNEL_CONNECTING) {
    if (!channel_->WaitForStateChange(state, deadline)) return false;
    state = channel_->GetState(/*try_to_connect=*/true);
  }
  return state == GRPC_CHANNEL_READY;
}

tree::ViewTraffic NodeClient::traffic() const {
  return tree::ViewTraffic{sent_.load(), received_.load()};
}

std::unique_ptr<tree::TreeView> NodeClient::NewTreeView(
    const std::string& keyspace) {
  return std::make_unique<RemoteTreeView>(this, keyspace);
}

namespace {

void SetDeadline(grpc::ClientContext* context, absl::Duration timeout) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

// One unary call with a deadline; `call(context, response)` invokes the stub.
template <typename Response, typename Call>
absl::StatusOr<Response> CallUnary(absl::Duration timeout,
                                   const std::string& address,
                                   absl::string_view name, const Call& call) {
  Response response;
  grpc::ClientContext context;
  SetDeadline(&context, timeout);
  const grpc::Status s = call(&context, &response);
  if (!s.ok()) return CallError(s, address, name);
  return response;
}

}  // namespace

template <typename Response, typename Start>
absl::Status NodeClient::ReadStream(
    absl::string_view name, size_t request_bytes,
    const std::function<absl::Status(Response&)>& sink, const Start& start,
    absl::Duration timeout, StreamCanceller* canceller,
    const std::function<void(const grpc::ClientContext&, const grpc::Status&,
                             absl::Status*)>& on_finish) {
  grpc::ClientContext context;
  if (timeout != absl::InfiniteDuration()) SetDeadline(&context, timeout);
  if (canceller != nullptr && !canceller->Attach(&context)) {
    return absl::CancelledError(absl::StrCat(name, " cancelled"));
  }
  CountSent(request_bytes);
  std::unique_ptr<grpc::ClientReader<Response>> reader = start(&context);
  Response response;
  absl::Status sink_status;
  while (reader->Read(&response)) {
    CountReceived(response.ByteSizeLong());
    sink_status = sink(response);
    if (!sink_status.ok()) {
      // Stop the server too; the sink's error is the answer.
      context.TryCancel();
      break;
    }
  }
  const grpc::Status s = reader->Finish();
  if (canceller != nullptr) {
    canceller->Detach();
    if (sink_status.ok() && canceller->cancelled()) {
      return absl::CancelledError(absl::StrCat(name, " cancelled"));
    }
  }
  if (!sink_status.ok()) return sink_status;
  absl::Status status =
      s.ok() ? absl::OkStatus() : CallError(s, address_, name);
  if (on_finish) on_finish(context, s, &status);
  return status;
}

absl::StatusOr<v1::HandshakeResponse> NodeClient::Handshake(
    const std::vector<std::string>& keyspaces, int top_levels) {
  v1::HandshakeRequest request;
  request.set_protocol_version(kProtocolVersion);
  request.set_node_name(options_.node_name);
  request.set_epoch(options_.epoch);
  request.set_scheduled(options_.scheduled_sessions);
  for (const std::string& ks : keyspaces) request.add_keyspaces(ks);
  request.set_top_levels(static_cast<uint32_t>(top_levels));
  CountSent(request.ByteSizeLong());
  TALLY_ASSIGN_OR_RETURN(
      v1::HandshakeResponse response,
      CallUnary<v1::HandshakeResponse>(
          options_.rpc_timeout, address_, "Handshake",
          [&](grpc::ClientContext* c, v1::HandshakeResponse* r) {
            return stubs_->peer->Handshake(c, request, r);
          }));
  CountReceived(response.ByteSizeLong());
  if (response.protocol_version() != kProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "node %s speaks protocol %d; this build speaks %d", address_,
        response.protocol_version(), kProtocolVersion));
  }
  return response;
}

absl::StatusOr<v1::ExchangeResponse> NodeClient::Exchange(
    const v1::ExchangeRequest& request) {
  CountSent(request.ByteSizeLong());
  TALLY_ASSIGN_OR_RETURN(
      v1::ExchangeResponse response,
      CallUnary<v1::ExchangeResponse>(
          options_.rpc_timeout, address_, "Exchange",
          [&](grpc::ClientContext* c, v1::ExchangeResponse* r) {
            return stubs_->peer->Exchange(c, request, r);
          }));
  CountReceived(response.ByteSizeLong());
  return response;
}

absl::Status NodeClient::Scan(
    const v1::ScanRequest& request,
    const std::function<absl::Status(const v1::ScanResponse&)>& sink) {
  return ReadStream<v1::ScanResponse>(
      "Scan", request.ByteSizeLong(), sink,
      [&](grpc::ClientContext* c) { return stubs_->peer->Scan(c, request); },
      options_.stream_timeout);
}

absl::Status NodeClient::FetchRows(
    const v1::FetchRowsRequest& request,
    const std::function<absl::Status(const v1::FetchRowsResponse&)>& sink) {
  return ReadStream<v1::FetchRowsResponse>(
      "FetchRows", request.ByteSizeLong(), sink,
      [&](grpc::ClientContext* c) {
        return stubs_->peer->FetchRows(c, request);
      },
      options_.stream_timeout);
}

void StreamCanceller::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  if (context_ != nullptr) context_->TryCancel();
}

bool StreamCanceller::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

bool StreamCanceller::Attach(grpc::ClientContext* context) {
  absl::MutexLock lock(&mu_);
  if (cancelled_) return false;
  context_ = context;
  return true;
}

void StreamCanceller::Detach() {
  absl::MutexLock lock(&mu_);
  context_ = nullptr;
}

absl::Status NodeClient::Subscribe(
    const v1::SubscribeRequest& request,
    const std::function<absl::Status(v1::FeedBatch&)>& sink,
    const std::atomic<bool>& stop, StreamCanceller* canceller) {
  return ReadStream<v1::FeedBatch>(
      "Subscribe", request.ByteSizeLong(),
      [&](v1::FeedBatch& batch) {
        if (stop.load()) return absl::CancelledError("feed stopped");
        return sink(batch);
      },
      [&](grpc::ClientContext* c) {
        return stubs_->peer->Subscribe(c, request);
      },
      absl::InfiniteDuration(), canceller);
}

absl::StatusOr<v1::PushRowsResponse> NodeClient::PushRows(
    const std::string& keyspace, v1::ApplyMode mode,
    const std::vector<v1::Row>& rows, const std::vector<std::string>& erase) {
  grpc::ClientContext context;
  SetDeadline(&context, options_.stream_timeout);
  v1::PushRowsResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::PushRowsRequest>> writer(
      stubs_->peer->PushRows(&context, &response));
  v1::PushRowsRequest message;
  auto flush = [&]() -> bool {
    message.set_keyspace(keyspace);
    message.set_mode(mode);
    CountSent(message.ByteSizeLong());
    const bool ok = writer->Write(message);
    message.Clear();
    return ok;
  };
  size_t bytes = 0;
  bool ok = true;
  for (const v1::Row& row : rows) {
    *message.add_rows() = row;
    bytes += row.key().size() + row.value().size();
    if (static_cast<size_t>(message.rows_size()) >= kMaxRowsPerMessage ||
        bytes >= kStreamChunkBytes) {
      if (!(ok = flush())) break;
      bytes = 0;
    }
  }
  for (size_t i = 0; ok && i < erase.size(); ++i) {
    message.add_erase(erase[i]);
    bytes += erase[i].size();
    if (static_cast<size_t>(message.erase_size()) >= kMaxRowsPerMessage ||
        bytes >= kStreamChunkBytes) {
      if (!(ok = flush())) break;
      bytes = 0;
    }
  }
  if (ok && (message.rows_size() > 0 || message.erase_size() > 0)) {
    ok = flush();
  }
  writer->WritesDone();
  const grpc::Status s = writer->Finish();
  if (!s.ok()) return CallError(s, address_, "PushRows");
  CountReceived(response.ByteSizeLong());
  return response;
}

absl::StatusOr<v1::PutResponse> NodeClient::Put(
    const std::string& keyspace, const std::string& key,
    const std::string& value, const std::vector<std::string>& key_values) {
  v1::PutRequest request;
  request.set_keyspace(keyspace);
  request.set_key(key);
  request.set_value(value);
  for (const std::string& v : key_values) request.add_key_values(v);
  return CallUnary<v1::PutResponse>(
      options_.rpc_timeout, address_, "Put",
      [&](grpc::ClientContext* c, v1::PutResponse* r) {
        return stubs_->admin->Put(c, request, r);
      });
}

absl::StatusOr<v1::GetResponse> NodeClient::Get(
    const std::string& keyspace, const std::string& key,
    const std::vector<std::string>& key_values) {
  v1::GetRequest request;
  request.set_keyspace(keyspace);
  request.set_key(key);
  for (const std::string& v : key_values) request.add_key_values(v);
  return CallUnary<v1::GetResponse>(
      options_.rpc_timeout, address_, "Get",
      [&](grpc::ClientContext* c, v1::GetResponse* r) {
        return stubs_->admin->Get(c, request, r);
      });
}

absl::StatusOr<v1::DeleteResponse> NodeClient::Delete(
    const std::string& keyspace, const std::string& key,
    const std::vector<std::string>& key_values) {
  v1::DeleteRequest request;
  request.set_keyspace(keyspace);
  request.set_key(key);
  for (const std::string& v : key_values) request.add_key_values(v);
  return CallUnary<v1::DeleteResponse>(
      options_.rpc_timeout, address_, "Delete",
      [&](grpc::ClientContext* c, v1::DeleteResponse* r) {
        return stubs_->admin->Delete(c, request, r);
      });
}

absl::StatusOr<v1::LoadResponse> NodeClient::Load(
    const std::string& keyspace,
    const std::function<bool(std::string* key, std::string* value)>& next) {
  grpc::ClientContext context;
  SetDeadline(&context, options_.stream_timeout);
  v1::LoadResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::LoadRequest>> writer(
      stubs_->admin->Load(&context, &response));
  v1::LoadRequest message;
  size_t bytes = 0;
  std::string key;
  std::string value;
  bool ok = true;
  while (ok && next(&key, &value)) {
    v1::Row* row = message.add_rows();
    bytes += key.size() + value.size();
    row->set_key(std::move(key));
    row->set_value(std::move(value));
    if (static_cast<size_t>(message.rows_size()) >= kMaxRowsPerMessage ||
        bytes >= kStreamChunkBytes) {
      message.set_keyspace(keyspace);
      ok = writer->Write(message);
      message.Clear();
      bytes = 0;
    }
  }
  if (ok && message.rows_size() > 0) {
    message.set_keyspace(keyspace);
    writer->Write(message);
  }
  writer->WritesDone();
  const grpc::Status s = writer->Finish();
  if (!s.ok()) return CallError(s, address_, "Load");
  return response;
}

absl::StatusOr<v1::StatusResponse> NodeClient::Status() {
  const v1::StatusRequest request;
  return CallUnary<v1::StatusResponse>(
      options_.rpc_timeout, address_, "Status",
      [&](grpc::ClientContext* c, v1::StatusResponse* r) {
        return stubs_->admin->Status(c, request, r);
      });
}

absl::StatusOr<v1::PeerControlResponse> NodeClient::SetPeerPaused(
    const std::string& peer, bool paused) {
  v1::PeerControlRequest request;
  request.set_peer(peer);
  return CallUnary<v1::PeerControlResponse>(
      options_.rpc_timeout, address_, paused ? "PausePeer" : "ResumePeer",
      [&](grpc::ClientContext* c, v1::PeerControlResponse* r) {
        return paused ? stubs_->admin->PausePeer(c, request, r)
                      : stubs_->admin->ResumePeer(c, request, r);
      });
}

absl::StatusOr<uint64_t> NodeClient::DropKeyspace(const std::string& keyspace,
                                                  bool drop) {
  if (!drop) {
    v1::UndropKeyspaceRequest request;
    request.set_keyspace(keyspace);
    absl::StatusOr<v1::UndropKeyspaceResponse> r =
        CallUnary<v1::UndropKeyspaceResponse>(
            options_.rpc_timeout, address_, "UndropKeyspace",
            [&](grpc::ClientContext* c, v1::UndropKeyspaceResponse* out) {
              return stubs_->admin->UndropKeyspace(c, request, out);
            });
    if (!r.ok()) return r.status();
    return 0;
  }
  v1::DropKeyspaceRequest request;
  request.set_keyspace(keyspace);
  absl::StatusOr<v1::DropKeyspaceResponse> r =
      CallUnary<v1::DropKeyspaceResponse>(
          options_.stream_timeout, address_, "DropKeyspace",
          [&](grpc::ClientContext* c, v1::DropKeyspaceResponse* out) {
            return stubs_->admin->DropKeyspace(c, request, out);
          });
  if (!r.ok()) return r.status();
  return r->rows_removed();
}

absl::StatusOr<v1::VerifyTablesResponse> NodeClient::VerifyTables(
    const v1::VerifyTablesRequest& request) {
  return CallUnary<v1::VerifyTablesResponse>(
      options_.stream_timeout, address_, "VerifyTables",
      [&](grpc::ClientContext* c, v1::VerifyTablesResponse* r) {
        return stubs_->admin->VerifyTables(c, request, r);
      });
}

absl::Status NodeClient::Sync(
    const v1::SyncRequest& request,
    const std::function<absl::Status(v1::SyncEvent&)>& sink,
    StreamCanceller* canceller) {
  return ReadStream<v1::SyncEvent>(
      "Sync", request.ByteSizeLong(), sink,
      [&](grpc::ClientContext* c) { return stubs_->admin->Sync(c, request); },
      options_.stream_timeout, canceller);
}

absl::Status NodeClient::RunDiff(
    const v1::RunDiffRequest& request,
    const std::function<absl::Status(v1::RunDiffEvent&)>& sink,
    StreamCanceller* canceller) {
  return ReadStream<v1::RunDiffEvent>(
      "RunDiff", request.ByteSizeLong(), sink,
      [&](grpc::ClientContext* c) {
        return stubs_->admin->RunDiff(c, request);
      },
      options_.stream_timeout, canceller,
      [](const grpc::ClientContext& context, const grpc::Status& s,
         absl::Status* status) {
        if (s.ok()) return;
        const auto& trailers = context.GetServerTrailingMetadata();
        if (trailers.find(kPeerIsSelfMetadata) != trailers.end()) {
          *status = MarkPeerIsSelf(std::move(*status));
          return;
        }
        auto it = trailers.find(kUnreachablePeerMetadata);
        if (it == trailers.end()) return;
        // The node was reached: its own message says which peer it could
        // not reach, without "node A is unavailable" in front.
        *status = MarkPeerUnreachable(
            absl::UnavailableError(s.error_message()),
            absl::string_view(it->second.data(), it->second.size()));
      });
}

}  // namespace node
}  // namespace tally
