// NodeServer: a running tallyd — the store, the gRPC services, the session
// scheduler — assembled from a NodeConfig.
//
//   absl::StatusOr<std::unique_ptr<NodeServer>> node = NodeServer::Start(c);
//   std::cout << (*node)->listen_address();  // with the port bound
//   (*node)->Shutdown();
//
// Shutdown order: health checks answer NOT_SERVING (every service name,
// and watchers are told); stop the PostgreSQL sidecar's capture (if any); stop
// the maintenance (log retention, tombstone purge);
// stop starting sessions and feed subscriptions and end
// running ones (and the `tally sync` calls following them); end the feed
// streams this node serves; stop accepting RPCs and finish those in flight (1 s
// grace, then they are cancelled); wait for the feed threads; drain the worker
// pool; close the store (a clean close checkpoints the leaves).
//
// A failed store write (a full disk) does not stop the node: it logs an
// error, the gRPC health service answers NOT_SERVING, every write is refused
// with UNAVAILABLE and reads go on, until the node is restarted (which
// reopens the store and recovers every acknowledged write). A table block
// the store cannot decode is different: Start salvages such a store before
// it opens it (storage::TablesReportedDamaged), and the handler set with
// SetTablesDamagedHandler is told when the running store finds one.
//
// Thread-safe.
#ifndef TALLY_NODE_NODE_SERVER_H_
#define TALLY_NODE_NODE_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "node/config/config.h"
#include "node/rpc/copy_write_guard.h"
#include "node/session/session_scheduler.h"
#include "node/sidecar/database_source.h"
#include "node/sidecar/postgres_sidecar.h"
#include "node/sync/bandwidth_limiter.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace tally {
namespace storage {
class Store;
}  // namespace storage

namespace node {

class AdminService;
class DiffRunner;
class KeyspaceTrouble;
class SyncRunner;
class MetricsServer;
class Maintenance;
class Scrubber;
class PeerService;
class SessionScheduler;
class ListenerWatch;
class StreamLimiter;
class TableRows;
class WorkerPool;
struct StoreHealth;

class NodeServer {
 public:
  // Validates `config`, opens the store, starts serving and the sessions.
  // With `config.postgres` set, `sidecar_factory` prepares the sidecar
  // first (node/sidecar/postgres_sidecar.h: its backend opens the store, it
  // starts once the store is open and stops before it closes); its error is
  // returned as is. A null factory refuses `postgres` (kUnimplemented).
  static absl::StatusOr<std::unique_ptr<NodeServer>> Start(
      const NodeConfig& config,
      PostgresSidecarFactory sidecar_factory = DefaultPostgresSidecarFactory());
  ~NodeServer();
  NodeServer(const NodeServer&) = delete;
  NodeServer& operator=(const NodeServer&) = delete;

  // The address it listens on, with the port it bound (for --listen ...:0).
  const std::string& listen_address() const { return listen_address_; }
  storage::Store& store() { return *store_; }
  // The port serving /metrics (for --metrics-listen ...:0); 0 when off.
  int metrics_port() const;

  // Sets the node's repair limit (node-bandwidth) in MB/s from now on, for
  // the sessions and repairs running too; 0 lifts it. For SIGHUP. Rejects
  // a negative or non-finite value with kInvalidArgument.
  absl::Status SetNodeBandwidth(double mb_per_second);

  // Makes `peers` the node's peers from now on, for SIGHUP: added ones are
  // followed and synced with at once, removed ones dropped
  // (SessionScheduler::SetPeers). Their roles must not change, nor which
  // peer is the node's source (kFailedPrecondition, nothing changed): a
  // source makes this node its copy, which takes a restart.
  absl::StatusOr<SessionScheduler::PeerChanges> SetPeers(
      const std::vector<PeerConfig>& peers);

  // Called (from another thread) when the gRPC listener stopped accepting
  // connections for good (listener-check-interval): the node can serve no
  // new client or peer until it is restarted. Without a handler the node
  // only logs it.
  void SetListenerStuckHandler(std::function<void()> handler);

  // Called (from another thread, or at once when it already happened) when
  // the store found a table block it cannot decode
  // (StoreOptions::on_table_damage): the rows around it fail every read
  // and write until the table is salvaged, which Start does before it
  // opens such a store (not a PostgreSQL sidecar's: the error names `tally
  // recover`, and the handler is not called). Without a handler the node
  // only logs it.
  void SetTablesDamagedHandler(std::function<void()> handler);

  // Idempotent.
  void Shutdown();

 private:
  NodeServer() = default;

  std::string listen_address_;
  // Declared before the store: destroyed after it. Null without postgres.
  std::unique_ptr<PostgresSidecar> sidecar_;
  std::unique_ptr<PostgresStatusSource> sidecar_status_;
  // Set when a peer is a database this sidecar copies.
  std::unique_ptr<DatabaseSource> database_source_;
  std::unique_ptr<TableRows> table_rows_;
  std::unique_ptr<storage::Store> store_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<StreamLimiter> streams_;
  // The node's repair limit (node-bandwidth; rate 0 when unlimited). Before
  // the scheduler and the diff runner, which use it: destroyed after them.
  std::unique_ptr<BandwidthLimiter> bandwidth_;
  // Keyspaces whose rows from peers are left out (feeds and sessions
  // report; status shows). Before the scheduler: destroyed after it.
  std::unique_ptr<KeyspaceTrouble> trouble_;
  std::unique_ptr<SessionScheduler> scheduler_;
  std::unique_ptr<Maintenance> maintenance_;
  std::unique_ptr<Scrubber> scrubber_;
  std::unique_ptr<PeerService> peer_service_;
  std::unique_ptr<DiffRunner> diff_runner_;
  std::unique_ptr<CopyWriteGuard> write_guard_;
  // The peers as last set (Start, SetPeers); SetPeers runs from one thread
  // (tallyd's signal loop).
  std::vector<PeerConfig> peers_;
  std::unique_ptr<SyncRunner> sync_runner_;
  std::unique_ptr<AdminService> admin_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<MetricsServer> metrics_;
  std::unique_ptr<ListenerWatch> listener_watch_;
  absl::Mutex listener_stuck_mu_;
  std::function<void()> listener_stuck_ ABSL_GUARDED_BY(listener_stuck_mu_);
  // Shared with the store's write-failure callback (node_server.cc).
  std::shared_ptr<StoreHealth> store_health_;
  bool shut_down_ = false;
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_NODE_SERVER_H_
