#include "node/node_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "node/client/client.h"
#include "node/client/tls.h"
#include "node/client/wire.h"
#include "node/config/postgres_settings.h"
#include "node/observe/log.h"
#include "node/observe/metrics.h"
#include "node/observe/metrics_server.h"
#include "node/observe/status_page.h"
#include "node/rpc/admin_service.h"
#include "node/rpc/diff_runner.h"
#include "node/rpc/listener_watch.h"
#include "node/rpc/peer_service.h"
#include "node/rpc/stream_limiter.h"
#include "node/rpc/sync_runner.h"
#include "node/session/session_scheduler.h"
#include "node/sidecar/mariadb_table_rows.h"
#include "node/sidecar/postgres_table_rows.h"
#include "node/sidecar/table_rows.h"
#include "node/upkeep/maintenance.h"
#include "node/upkeep/scrubber.h"
#include "node/worker_pool.h"
#include "storage/store.h"
#include "tally/v1/tally.grpc.pb.h"
#include "tree/status_macros.h"

namespace tally {
namespace node {
namespace {

// Checks in a row that find connections waiting in the accept queue before
// the listener counts as stuck: one that accepts empties it at once.
constexpr int kListenerChecks = 6;

}  // namespace

// What the store's write-failure callback needs. It may run before the
// server is built and while it shuts down (the store's last checkpoint at
// close), so it reaches the health service only through this, under a lock.
struct StoreHealth {
  absl::Mutex mu;
  grpc::HealthCheckServiceInterface* health ABSL_GUARDED_BY(mu) = nullptr;
  bool failed ABSL_GUARDED_BY(mu) = false;
  // Set when the store found a table block it cannot decode.
  bool tables_damaged ABSL_GUARDED_BY(mu) = false;
  std::function<void()> on_tables_damaged ABSL_GUARDED_BY(mu);
};

namespace {

// The peers that are tallyds (not a database source).
std::vector<PeerConfig> TallydPeers(const std::vector<PeerConfig>& peers) {
  std::vector<PeerConfig> out;
  for (const PeerConfig& peer : peers) {
    if (!peer.database) out.push_back(peer);
  }
  return out;
}

// The feed's options: half its slots kept for the listed peers.
FeedOptions PeerFeedOptions(const SessionScheduler* scheduler) {
  FeedOptions options;
  options.is_peer = [scheduler](const std::string& subscriber) {
    return scheduler->IsListedPeer(subscriber);
  };
  return options;
}

// A store that reported damaged tables (storage::TablesReportedDamaged) is
// salvaged before it opens, as `tally recover` would: LevelDB cannot read
// past, nor compact past, a block it cannot decode, so until then the rows
// around it fail every read and write. The salvage keeps every sound block
// (the originals go to DIR/lost) and the rows of the damaged ones come
// back from the peers. A PostgreSQL sidecar's store is not salvaged here:
// its rows' values live in the database, which the salvage cannot check
// the rows against; its index is rebuilt from its tables instead, by
// starting on an empty data directory (a lost index).
absl::Status SalvageReportedDamage(const NodeConfig& config,
                                   const storage::StoreOptions& options) {
  if (!storage::TablesReportedDamaged(config.data_dir)) {
    return absl::OkStatus();
  }
  if (HasSidecar(config)) {
    LogError(
        "store: its tables were found damaged (a block LevelDB cannot "
        "decode); a sidecar's index is not salvaged but rebuilt: stop the "
        "node, move its data directory aside leaving an empty one, and "
        "start it: the sidecar finds its index lost and builds it again "
        "from its tables",
        {{"data", config.data_dir}});
    return absl::OkStatus();
  }
  LogWarning(
      "store: salvaging the tables it found damaged before opening it (as "
      "`tally recover` does); the originals go to the lost directory",
      {{"data", config.data_dir}});
  const absl::Time start = absl::Now();
  absl::StatusOr<storage::RepairReport> repaired =
      storage::RepairStore(config.data_dir, options, {"default"});
  if (!repaired.ok()) {
    return absl::Status(
        repaired.status().code(),
        absl::StrFormat("salvaging the damaged tables of the store in %s "
                        "failed: %s; stop the node and run `tally recover "
                        "--data-dir %s`",
                        config.data_dir, repaired.status().message(),
                        config.data_dir));
  }
  LogWarning(
      "store: salvaged; the rows of the damaged blocks come back from the "
      "peers through anti-entropy",
      {{"data", config.data_dir},
       {"damaged_tables", absl::StrJoin(repaired->damaged_tables, "; ")},
       {"rows_removed", repaired->rows_removed},
       {"rows_set_aside", repaired->rows_unattributed},
       {"seconds", absl::ToDoubleSeconds(absl::Now() - start)}});
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<NodeServer>> NodeServer::Start(
    const NodeConfig& config, PostgresSidecarFactory sidecar_factory) {
  TALLY_RETURN_IF_ERROR(ValidateConfig(config));
  std::unique_ptr<NodeServer> node(new NodeServer());
  if (HasSidecar(config)) {
    if (sidecar_factory == nullptr) {
      return absl::UnimplementedError(
          "--postgres/--mariadb: this tallyd was built without the database "
          "sidecars; run it without --postgres, --mariadb and --table");
    }
    LogInfo(config.postgres.empty() ? "MariaDB sidecar" : "PostgreSQL sidecar",
            {{"database", MaskConninfo(SidecarDatabase(config))},
             {"tables", absl::StrJoin(config.tables, ",")}});
    // Before the store opens: the store opens with its backend, and a
    // database that is not fit (wal_level, privileges, keys) ends the start
    // here, with the sidecar's message naming the fix.
    TALLY_ASSIGN_OR_RETURN(node->sidecar_, sidecar_factory(config));
    node->sidecar_status_ = std::make_unique<PostgresStatusSource>(
        node->sidecar_.get(), SidecarDatabase(config));
    // get/put/del of the tables' rows by primary key as text.
    if (!config.postgres.empty()) {
      node->table_rows_ = NewPostgresTableRows(config.postgres, config.tables);
    } else {
      TALLY_ASSIGN_OR_RETURN(
          node->table_rows_,
          NewMariaDbTableRows(config.mariadb, config.tables));
    }
  }

  storage::StoreOptions store_options;
  store_options.node_name = config.name;
  store_options.default_depth = config.default_depth;
  store_options.sync = config.sync_writes;
  store_options.max_clock_skew = config.max_clock_skew;
  store_options.max_keyspaces = static_cast<size_t>(config.max_keyspaces);
  node->store_health_ = std::make_shared<StoreHealth>();
  store_options.on_write_failure =
      [health = node->store_health_](const absl::Status& status) {
        LogError(
            "store: a write failed; the node answers NOT_SERVING to health "
            "checks and refuses writes until it is restarted",
            {{"error", status}});
        absl::MutexLock lock(&health->mu);
        health->failed = true;
        if (health->health != nullptr) health->health->SetServingStatus(false);
      };
  if (config.test_clock_offset != absl::ZeroDuration()) {
    const absl::Duration offset = config.test_clock_offset;
    store_options.physical_clock = [offset] {
      return static_cast<uint64_t>(absl::ToUnixMillis(absl::Now() + offset));
    };
  }
  store_options.on_table_damage =
      [health = node->store_health_,
       sidecar = HasSidecar(config)](const absl::Status& status) {
        LogError(sidecar ? "store: a table block cannot be decoded; the rows "
                           "around it cannot be read or written. Stop the "
                           "node, move its data directory aside leaving an "
                           "empty one, and start it: the sidecar finds its "
                           "index lost and builds it again from its tables"
                         : "store: a table block cannot be decoded; the rows "
                           "around it cannot be read or written, so the node "
                           "restarts itself and salvages the table first",
                 {{"error", status}});
        std::function<void()> handler;
        {
          absl::MutexLock lock(&health->mu);
          health->tables_damaged = true;
          if (!sidecar) handler = health->on_tables_damaged;
        }
        if (handler) handler();
      };
  if (node->sidecar_ != nullptr) {
    store_options.backend = node->sidecar_->backend();
  }
  TALLY_RETURN_IF_ERROR(SalvageReportedDamage(config, store_options));
  absl::StatusOr<std::unique_ptr<storage::Store>> store =
      storage::Store::Open(config.data_dir, store_options);
  if (!store.ok() && absl::IsDataLoss(store.status()) && !HasSidecar(config) &&
      storage::TablesReportedDamaged(config.data_dir)) {
    // The open itself read the damaged block (its own records).
    TALLY_RETURN_IF_ERROR(SalvageReportedDamage(config, store_options));
    store = storage::Store::Open(config.data_dir, store_options);
  }
  TALLY_ASSIGN_OR_RETURN(node->store_, std::move(store));
  if (node->sidecar_ != nullptr) {
    // Builds or resumes in its own thread: the node serves (status shows
    // the build's progress) while it runs.
    TALLY_RETURN_IF_ERROR(node->sidecar_->Start(node->store_.get()));
  }

  node->pool_ = std::make_unique<WorkerPool>(config.rpc_threads, 1024);
  ClientOptions client_options;
  client_options.node_name = config.name;
  client_options.epoch = node->store_->epoch();
  client_options.rpc_timeout = absl::Seconds(10);
  // Peers are dialled with the node's own certificate (node/client/tls.h).
  const TlsFiles tls{config.tls_cert, config.tls_key, config.tls_ca};
  TALLY_ASSIGN_OR_RETURN(
      client_options.credentials,
      MakeChannelCredentials(tls, config.tls_refresh_interval));
  // Always there, unlimited at 0: SIGHUP may set a limit later
  // (SetNodeBandwidth).
  node->bandwidth_ =
      std::make_unique<BandwidthLimiter>(config.node_bandwidth_mb * 1e6);
  node->trouble_ = std::make_unique<KeyspaceTrouble>();
  node->peers_ = config.peers;
  // A database source has sessions of its own (no tallyd to call, no feed
  // to follow); the scheduler runs the tallyd peers'.
  NodeConfig tally_peers = config;
  tally_peers.peers = TallydPeers(config.peers);
  node->scheduler_ = std::make_unique<SessionScheduler>(
      node->store_.get(), tally_peers, client_options, node->bandwidth_.get(),
      node->trouble_.get());
  for (const PeerConfig& peer : config.peers) {
    if (!peer.database) continue;
    DatabaseSourceOptions source;
    source.source_conninfo = peer.address;
    source.replica_conninfo =
        config.postgres.empty() ? config.mariadb : config.postgres;
    source.tables = config.tables;
    source.interval = config.sync_interval;
    source.bandwidth_bytes_per_second = config.repair_bandwidth_mb * 1e6;
    source.node_bandwidth = node->bandwidth_.get();
    source.sidecar_ready = [sidecar = node->sidecar_.get()] {
      return sidecar->status().phase() == "following";
    };
    node->database_source_ =
        std::make_unique<DatabaseSource>(node->store_.get(), source);
  }
  StreamLimits stream_limits;
  stream_limits.max_per_client = config.max_streams_per_client;
  stream_limits.idle_timeout = config.stream_idle_timeout;
  node->streams_ = std::make_unique<StreamLimiter>(stream_limits);
  node->peer_service_ = std::make_unique<PeerService>(
      node->store_.get(), node->pool_.get(),
      // Every node's handshake: the scheduler tells a one-sided link.
      [scheduler = node->scheduler_.get()](
          const std::string& address, const std::string& name,
          uint64_t /*epoch*/) { scheduler->ObserveCaller(address, name); },
      PeerFeedOptions(node->scheduler_.get()), node->streams_.get());
  MaintenanceOptions maintenance;
  maintenance.log_retention_entries = config.log_retention_entries;
  maintenance.log_retention_age = config.log_retention_age;
  maintenance.tombstone_min_age = config.tombstone_min_age;
  maintenance.max_clock_skew = config.max_clock_skew;
  maintenance.interval = config.maintenance_interval;
  SessionScheduler* scheduler = node->scheduler_.get();
  node->maintenance_ = std::make_unique<Maintenance>(
      node->store_.get(), maintenance,
      [scheduler] { return scheduler->PeersSyncedSince(); });
  ScrubberOptions scrub;
  scrub.interval = config.scrub_interval;
  node->scrubber_ =
      std::make_unique<Scrubber>(node->store_.get(), std::move(scrub));
  // Diffs a tool asks this node to run against another (Admin.RunDiff):
  // dialled as its sessions dial peers, as many at once as sessions.
  node->diff_runner_ = std::make_unique<DiffRunner>(
      node->store_.get(), client_options, config.max_sessions,
      node->streams_.get(), node->bandwidth_.get());
  // Sessions a tool asks for now (Admin.Sync), as many calls at once as
  // sessions.
  node->sync_runner_ = std::make_unique<SyncRunner>(
      node->scheduler_.get(), config.max_sessions, node->streams_.get());
  // Admin.Status and the metrics page report the same sources.
  std::vector<StatusSource*> status_sources = {
      node->scheduler_.get(),   node->peer_service_->feed_status(),
      node->maintenance_.get(), node->scrubber_.get(),
      node->diff_runner_.get(), node->bandwidth_.get()};
  if (node->sidecar_status_ != nullptr) {
    status_sources.push_back(node->sidecar_status_.get());
  }
  if (node->database_source_ != nullptr) {
    status_sources.push_back(node->database_source_.get());
  }
  // After the sidecar's: it marks the tables in trouble.
  status_sources.push_back(node->trouble_.get());
  std::string source;
  for (const PeerConfig& peer : config.peers) {
    if (peer.role == PeerRole::kSource) {
      source = peer.database ? MaskConninfo(peer.address) : peer.address;
    }
  }
  node->write_guard_ = std::make_unique<CopyWriteGuard>(
      config.name, std::move(source), config.read_only);
  status_sources.push_back(node->write_guard_.get());
  node->admin_service_ = std::make_unique<AdminService>(
      node->store_.get(), node->pool_.get(), status_sources,
      node->streams_.get(), node->diff_runner_.get(), node->table_rows_.get(),
      node->sidecar_.get(), node->scheduler_.get(), node->sync_runner_.get(),
      node->write_guard_.get());

  grpc::EnableDefaultHealthCheckService(true);
  // Linked in explicitly: with --as-needed the plugin is dropped otherwise.
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  TALLY_ASSIGN_OR_RETURN(
      std::shared_ptr<grpc::ServerCredentials> credentials,
      MakeServerCredentials(tls, config.tls_refresh_interval));
  builder.AddListeningPort(config.listen, credentials, &port);
  // gRPC sets SO_REUSEPORT by default: a second tallyd on a port this one
  // holds would then start too and take half of the new connections. Off,
  // the second bind fails and that node exits naming the address.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Answers are held to the limit requests are (gRPC's default receive
  // limit): the services refuse larger ones with a message of their own
  // (node/client/wire.h CheckAnswerSize); this catches any other path.
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  // Accept the clients' keepalive pings (node/client/client.h) even on calls
  // that send nothing for a while (a long Load, a quiet feed between
  // heartbeats): by default gRPC answers pings more often than every 5
  // minutes without data with GOAWAY.
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
      static_cast<int>(absl::ToInt64Milliseconds(kKeepaliveTime) / 2));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  // A connection that has not finished its handshake (TLS, HTTP/2 preface)
  // in 20 s is closed (gRPC's default: 120 s): idle connections opened to
  // use up the node's file descriptors do not stay long.
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, 20'000);
  builder.RegisterService(node->peer_service_.get());
  builder.RegisterService(node->admin_service_.get());
  node->server_ = builder.BuildAndStart();
  if (node->server_ == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrFormat(
        "cannot listen on %s (address in use, or not an address of this "
        "machine)",
        config.listen));
  }
  {
    absl::MutexLock lock(&node->store_health_->mu);
    grpc::HealthCheckServiceInterface* health =
        node->server_->GetHealthCheckService();
    node->store_health_->health = health;
    if (health != nullptr) {
      // By name too, as load balancers and Kubernetes' gRPC probes ask: the
      // whole server ("") is SERVING from the start, the services are added
      // here.
      for (const char* service :
           {v1::Admin::service_full_name(), v1::Peer::service_full_name()}) {
        health->SetServingStatus(service, !node->store_health_->failed);
      }
      if (node->store_health_->failed) health->SetServingStatus(false);
    }
  }
  node->listen_address_ = absl::StrCat(
      config.listen.substr(0, config.listen.rfind(':')), ":", port);
  node->scheduler_->SetListenAddress(node->listen_address_);
  node->diff_runner_->SetListenAddress(node->listen_address_);
  LogInfo(DescribeServerTls(tls));
  if (config.listener_check_interval > absl::ZeroDuration()) {
    NodeServer* self = node.get();
    const std::string address = node->listen_address_;
    node->listener_watch_ = ListenerWatch::Start(
        port, config.listener_check_interval, kListenerChecks, [self, address] {
          LogError(
              "the gRPC listener stopped accepting connections: they wait "
              "and time out (gRPC gives up accepting after an error such as "
              "running out of file descriptors; see the 'Failed accept4' "
              "line). The node serves no new client or peer until it is "
              "restarted",
              {{"listen", address}});
          std::function<void()> handler;
          {
            absl::MutexLock lock(&self->listener_stuck_mu_);
            handler = self->listener_stuck_;
          }
          if (handler) handler();
        });
  }
  TALLY_RETURN_IF_ERROR(node->scheduler_->Start());
  if (node->database_source_ != nullptr) node->database_source_->Start();
  node->maintenance_->Start();
  node->scrubber_->Start();
  if (!config.metrics_listen.empty()) {
    storage::Store* store = node->store_.get();
    TALLY_ASSIGN_OR_RETURN(
        node->metrics_,
        MetricsServer::Start(
            config.metrics_listen,
            [store, status_sources]() -> absl::StatusOr<std::string> {
              v1::StatusResponse status;
              TALLY_RETURN_IF_ERROR(
                  CollectNodeStatus(store, status_sources, &status));
              return RenderPrometheus(status);
            },
            // The status page, from the same status.
            [store, status_sources]() -> absl::StatusOr<std::string> {
              v1::StatusResponse status;
              TALLY_RETURN_IF_ERROR(
                  CollectNodeStatus(store, status_sources, &status));
              return RenderStatusPage(status, absl::Now());
            }));
    LogInfo(absl::StrFormat("metrics on http://%s/metrics",
                            node->metrics_->address()));
    LogInfo(absl::StrFormat("status page on http://%s/",
                            node->metrics_->address()));
  }
  return node;
}

int NodeServer::metrics_port() const {
  return metrics_ == nullptr ? 0 : metrics_->port();
}

absl::Status NodeServer::SetNodeBandwidth(double mb_per_second) {
  return bandwidth_->SetBytesPerSecond(mb_per_second * 1e6);
}

absl::StatusOr<SessionScheduler::PeerChanges> NodeServer::SetPeers(
    const std::vector<PeerConfig>& peers) {
  auto roles = [](const std::vector<PeerConfig>& list) {
    std::map<std::string, PeerRole> by_address;
    for (const PeerConfig& peer : list) by_address[peer.address] = peer.role;
    return by_address;
  };
  const std::map<std::string, PeerRole> before = roles(peers_);
  const std::map<std::string, PeerRole> after = roles(peers);
  std::vector<std::string> refused;
  for (const auto& [address, role] : after) {
    auto it = before.find(address);
    const bool was_source =
        it != before.end() && it->second == PeerRole::kSource;
    if ((it != before.end() && it->second != role) ||
        (role == PeerRole::kSource && !was_source)) {
      refused.push_back(address);
    }
  }
  for (const auto& [address, role] : before) {
    if (role == PeerRole::kSource && after.find(address) == after.end()) {
      refused.push_back(address);
    }
  }
  if (!refused.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the peers were not changed: the role of %s would change (or a "
        "source would be added or removed), which takes a restart",
        absl::StrJoin(refused, ", ")));
  }
  TALLY_ASSIGN_OR_RETURN(SessionScheduler::PeerChanges changes,
                         scheduler_->SetPeers(TallydPeers(peers)));
  peers_ = peers;
  return changes;
}

void NodeServer::SetListenerStuckHandler(std::function<void()> handler) {
  absl::MutexLock lock(&listener_stuck_mu_);
  listener_stuck_ = std::move(handler);
}

void NodeServer::SetTablesDamagedHandler(std::function<void()> handler) {
  bool damaged = false;
  {
    absl::MutexLock lock(&store_health_->mu);
    store_health_->on_tables_damaged = handler;
    damaged = store_health_->tables_damaged && sidecar_ == nullptr;
  }
  // Found before the handler was set (while the node started).
  if (damaged && handler) handler();
}

NodeServer::~NodeServer() { Shutdown(); }

void NodeServer::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  // First of all, health checks answer NOT_SERVING (and watchers are told):
  // a load balancer stops sending work while the sessions, the capture and
  // the feeds stop, which may take seconds, instead of learning of it from
  // refused calls. Later changes (a store failure at close) are ignored.
  if (store_health_ != nullptr) {
    absl::MutexLock lock(&store_health_->mu);
    if (store_health_->health != nullptr) store_health_->health->Shutdown();
  }
  LogInfo("shutdown: health checks answer NOT_SERVING");
  listener_watch_.reset();
  // First: a scrape reads the store and every status source.
  if (metrics_ != nullptr) metrics_->Stop();
  // A database source's sessions write through the store into the
  // sidecar's database: they stop first.
  if (database_source_ != nullptr) database_source_->Stop();
  // Capture writes into the store: it stops before anything the store's
  // readers need, and long before the store closes.
  if (sidecar_ != nullptr) sidecar_->Stop();
  if (maintenance_ != nullptr) maintenance_->Shutdown();
  if (scrubber_ != nullptr) scrubber_->Shutdown();
  if (scheduler_ != nullptr) scheduler_->Shutdown();
  // After the scheduler: its sessions have ended, so the calls following
  // them end with their outcomes.
  if (sync_runner_ != nullptr) sync_runner_->Shutdown();
  if (diff_runner_ != nullptr) diff_runner_->Shutdown();
  LogInfo("shutdown: sessions, diffs and feed subscriptions stopped");
  if (peer_service_ != nullptr) peer_service_->StopFeeds();
  if (store_health_ != nullptr) {
    absl::MutexLock lock(&store_health_->mu);
    store_health_->health = nullptr;
  }
  if (server_ != nullptr) {
    // In-flight calls get a second, then are cancelled: every write is
    // atomic, so a cancelled call leaves nothing half-done.
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(1));
    server_->Wait();
  }
  LogInfo("shutdown: server stopped");
  // Subscription threads outlive their calls by a moment; the store must
  // outlive them.
  if (peer_service_ != nullptr) peer_service_->WaitForFeeds();
  pool_.reset();
  server_.reset();
  // Every call, and so every stream's ticket, has ended.
  streams_.reset();
  store_.reset();
}

}  // namespace node
}  // namespace tally
