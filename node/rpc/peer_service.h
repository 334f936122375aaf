// PeerService: the tally.v1.Peer gRPC service over a node's store.
//
// Serves the diff algorithm's calls (Handshake with per-keyspace summaries,
// Exchange, Scan), FetchRows and PushRows for repair. Uses gRPC's callback
// API: reactions never block; reads and writes of the store run on the
// node's WorkerPool, and a full pool answers RESOURCE_EXHAUSTED. A stream
// never holds a pool thread while it waits for its reader: each pool task
// fills one message, and the next starts when the message was taken (the
// bulk lane of the pool, so that control calls always find a thread).
// Answers stay under kMaxMessageBytes.
//
// Every request is validated (protocol version, keyspace names, node refs,
// levels, counts, key and value sizes, versions) and answered with
// INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION or RESOURCE_EXHAUSTED
// and a message a person understands.
//
// Thread-safe. `store` and `pool` must outlive the service.
#ifndef TALLY_NODE_RPC_PEER_SERVICE_H_
#define TALLY_NODE_RPC_PEER_SERVICE_H_

#include <functional>
#include <string>

#include "node/feed/feed_publisher.h"
#include "node/rpc/stream_limiter.h"
#include "node/worker_pool.h"
#include "storage/store.h"
#include "tally/v1/tally.grpc.pb.h"

namespace tally {
namespace node {

// Called after the handshake of a node's scheduled session
// (HandshakeRequest.scheduled): its address, its name and epoch. Lets the
// node tell a caller it does not list as a peer. Optional.
using HandshakeObserver =
    std::function<void(const std::string& peer_address,
                       const std::string& node_name, uint64_t epoch)>;

// PushRows is served raw, as bytes it parses itself, so that a corrupt
// message in the stream is an error rather than its end
// (internal/write_stream.h).
class PeerService final
    : public ::tally::v1::Peer::WithRawCallbackMethod_PushRows<
          ::tally::v1::Peer::CallbackService> {
 public:
  // `limiter` bounds and watches the bulk streams (Scan, FetchRows,
  // PushRows); null for none. It must outlive the service.
  PeerService(storage::Store* store, WorkerPool* pool,
              HandshakeObserver observer = nullptr,
              FeedOptions feed_options = FeedOptions{},
              StreamLimiter* limiter = nullptr);

  grpc::ServerUnaryReactor* Handshake(
      grpc::CallbackServerContext* context,
      const ::tally::v1::HandshakeRequest* request,
      ::tally::v1::HandshakeResponse* response) override;
  grpc::ServerUnaryReactor* Exchange(
      grpc::CallbackServerContext* context,
      const ::tally::v1::ExchangeRequest* request,
      ::tally::v1::ExchangeResponse* response) override;
  grpc::ServerWriteReactor<::tally::v1::ScanResponse>* Scan(
      grpc::CallbackServerContext* context,
      const ::tally::v1::ScanRequest* request) override;
  grpc::ServerWriteReactor<::tally::v1::FetchRowsResponse>* FetchRows(
      grpc::CallbackServerContext* context,
      const ::tally::v1::FetchRowsRequest* request) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* PushRows(
      grpc::CallbackServerContext* context,
      grpc::ByteBuffer* response) override;
  // Ends the change feed's subscriptions (before the server shuts down).
  void StopFeeds() { feed_.Shutdown(); }
  // Waits until no subscription uses the store (after the server shut down).
  void WaitForFeeds() { feed_.WaitForSubscriptions(); }
  // Reports the subscriptions served and the publishing totals.
  StatusSource* feed_status() { return &feed_; }

  // The change feed (node/feed/feed_publisher.h).
  grpc::ServerWriteReactor<::tally::v1::FeedBatch>* Subscribe(
      grpc::CallbackServerContext* context,
      const ::tally::v1::SubscribeRequest* request) override;

 private:
  storage::Store* const store_;
  WorkerPool* const pool_;
  StreamLimiter* const limiter_;
  const HandshakeObserver observer_;
  FeedPublisher feed_;
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_RPC_PEER_SERVICE_H_
