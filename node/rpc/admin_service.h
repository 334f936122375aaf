// AdminService: the tally.v1.Admin gRPC service — Put, Get, Delete, Load,
// Status, RunDiff, VerifyTables, PausePeer, ResumePeer, Sync, DropKeyspace
// and UndropKeyspace for tools and applications.
//
// Callback API; store work runs on the node's WorkerPool. Every request is
// validated and bad input answered with a clear status. Status combines the
// store's keyspaces with what the node's scheduler knows about peers and
// sessions and the change feed (StatusSource). RunDiff is served by the
// node's DiffRunner (node/rpc/diff_runner.h).
//
// Thread-safe. `store`, `pool` and `status_source` must outlive the service.
#ifndef TALLY_NODE_RPC_ADMIN_SERVICE_H_
#define TALLY_NODE_RPC_ADMIN_SERVICE_H_

#include <string>
#include <vector>

#include "node/observe/status_source.h"
#include "node/rpc/copy_write_guard.h"
#include "node/rpc/diff_runner.h"
#include "node/rpc/stream_limiter.h"
#include "node/rpc/sync_runner.h"
#include "node/session/peer_control.h"
#include "node/sidecar/postgres_sidecar.h"
#include "node/sidecar/table_rows.h"
#include "node/worker_pool.h"
#include "storage/store.h"
#include "tally/v1/tally.grpc.pb.h"

namespace tally {
namespace node {

// Fills `response` with the node's status: the store's keyspaces (with
// their root changes) and rows per origin, then what each of
// `status_sources` adds. Admin.Status and the metrics page
// (node/observe/metrics.h) both answer from it. Returns an error only when the
// store cannot be read.
absl::Status CollectNodeStatus(storage::Store* store,
                               const std::vector<StatusSource*>& status_sources,
                               ::tally::v1::StatusResponse* response);

// Load is served raw, as bytes it parses itself, so that a corrupt message
// in the stream is an error rather than its end (internal/write_stream.h).
class AdminService final
    : public ::tally::v1::Admin::WithRawCallbackMethod_Load<
          ::tally::v1::Admin::CallbackService> {
 public:
  // `status_sources` (peers, sessions, the feed) may be empty. `limiter`
  // bounds the Load streams per client (node/rpc/stream_limiter.h); null for
  // none. `diff_runner` serves RunDiff; null answers it UNIMPLEMENTED, as
  // a node from before the call. `table_rows` serves Put, Get and Delete for
  // the tables of a sidecar to PostgreSQL (by their key_values,
  // node/sidecar/table_rows.h) and `sidecar` VerifyTables; both null on a node
  // without one. `peer_control` serves PausePeer and ResumePeer and
  // `sync_runner` Sync (null: UNIMPLEMENTED). `write_guard` admits or refuses
  // client writes (a copy's, a read-only node's; node/rpc/copy_write_guard.h);
  // null admits all. All must outlive the service.
  AdminService(storage::Store* store, WorkerPool* pool,
               std::vector<StatusSource*> status_sources,
               StreamLimiter* limiter = nullptr,
               DiffRunner* diff_runner = nullptr,
               const TableRows* table_rows = nullptr,
               PostgresSidecar* sidecar = nullptr,
               PeerControl* peer_control = nullptr,
               SyncRunner* sync_runner = nullptr,
               CopyWriteGuard* write_guard = nullptr);

  grpc::ServerUnaryReactor* Put(grpc::CallbackServerContext* context,
                                const ::tally::v1::PutRequest* request,
                                ::tally::v1::PutResponse* response) override;
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* context,
                                const ::tally::v1::GetRequest* request,
                                ::tally::v1::GetResponse* response) override;
  grpc::ServerUnaryReactor* Delete(
      grpc::CallbackServerContext* context,
      const ::tally::v1::DeleteRequest* request,
      ::tally::v1::DeleteResponse* response) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* Load(
      grpc::CallbackServerContext* context,
      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Status(
      grpc::CallbackServerContext* context,
      const ::tally::v1::StatusRequest* request,
      ::tally::v1::StatusResponse* response) override;
  grpc::ServerWriteReactor<::tally::v1::RunDiffEvent>* RunDiff(
      grpc::CallbackServerContext* context,
      const ::tally::v1::RunDiffRequest* request) override;
  grpc::ServerUnaryReactor* VerifyTables(
      grpc::CallbackServerContext* context,
      const ::tally::v1::VerifyTablesRequest* request,
      ::tally::v1::VerifyTablesResponse* response) override;
  grpc::ServerUnaryReactor* PausePeer(
      grpc::CallbackServerContext* context,
      const ::tally::v1::PeerControlRequest* request,
      ::tally::v1::PeerControlResponse* response) override;
  grpc::ServerUnaryReactor* ResumePeer(
      grpc::CallbackServerContext* context,
      const ::tally::v1::PeerControlRequest* request,
      ::tally::v1::PeerControlResponse* response) override;
  grpc::ServerWriteReactor<::tally::v1::SyncEvent>* Sync(
      grpc::CallbackServerContext* context,
      const ::tally::v1::SyncRequest* request) override;
  // Refused on a sidecar to PostgreSQL (`table_rows` set) and, as a write,
  // by `write_guard`.
  grpc::ServerUnaryReactor* DropKeyspace(
      grpc::CallbackServerContext* context,
      const ::tally::v1::DropKeyspaceRequest* request,
      ::tally::v1::DropKeyspaceResponse* response) override;
  grpc::ServerUnaryReactor* UndropKeyspace(
      grpc::CallbackServerContext* context,
      const ::tally::v1::UndropKeyspaceRequest* request,
      ::tally::v1::UndropKeyspaceResponse* response) override;

 private:
  // PausePeer and ResumePeer.
  grpc::ServerUnaryReactor* SetPaused(
      grpc::CallbackServerContext* context,
      const ::tally::v1::PeerControlRequest* request,
      ::tally::v1::PeerControlResponse* response, bool paused);

  storage::Store* const store_;
  WorkerPool* const pool_;
  StreamLimiter* const limiter_;
  DiffRunner* const diff_runner_;
  const TableRows* const table_rows_;
  PostgresSidecar* const sidecar_;
  // Client writes (Put, Delete, Load) pass it first; null: all admitted.
  CopyWriteGuard* const write_guard_;
  PeerControl* const peer_control_;
  SyncRunner* const sync_runner_;
  const std::vector<StatusSource*> status_sources_;
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_RPC_ADMIN_SERVICE_H_
