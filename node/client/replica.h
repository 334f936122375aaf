// Replica: one side of a sync — something with a tree to diff and rows to
// read and write. Sessions pair the local store with a remote peer; `tally
// repair` pairs two remote nodes. The sync logic (sync.h) is written once
// against this interface.
//
// Thread-compatible: one sync at a time per Replica object.
#ifndef TALLY_NODE_CLIENT_REPLICA_H_
#define TALLY_NODE_CLIENT_REPLICA_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "storage/store.h"
#include "tree/tree_view.h"

namespace tally {
namespace node {

class NodeClient;

struct FetchResult {
  // Keys whose row changed in the replica's backend (a sidecar's table an
  // application writes) since it was indexed: not given to the sink. The
  // replica's capture indexes the newer write.
  uint64_t changed = 0;
};

struct ApplyResult {
  uint64_t applied = 0;
  uint64_t ignored = 0;  // not newer than what the replica had
  uint64_t erased = 0;
};

class Replica {
 public:
  virtual ~Replica() = default;

  // For logs and output: the node's address or "local".
  virtual std::string name() const = 0;

  // A view of `keyspace`; kNotFound when the replica does not have it.
  virtual absl::StatusOr<std::unique_ptr<tree::TreeView>> NewView(
      const std::string& keyspace) = 0;

  // Reads full rows (tombstones included) by key; absent keys are skipped,
  // and so are rows an application changed in the backend since they were
  // indexed (counted in the result: a sync under application writes goes
  // on and leaves them to the capture).
  virtual absl::StatusOr<FetchResult> FetchRows(
      const std::string& keyspace, const std::vector<std::string>& keys,
      const std::function<absl::Status(const storage::Row&)>& sink) = 0;

  // Writes rows that keep their versions, under `mode`, and (source
  // override only) erases `erase`.
  virtual absl::StatusOr<ApplyResult> ApplyRows(
      const std::string& keyspace, const std::vector<storage::Row>& rows,
      const std::vector<std::string>& erase, storage::ApplyMode mode) = 0;
};

// The node's own store. `store` must outlive the replica.
std::unique_ptr<Replica> NewLocalReplica(storage::Store* store);
// A node over the network. `client` must outlive the replica.
std::unique_ptr<Replica> NewRemoteReplica(NodeClient* client);

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_CLIENT_REPLICA_H_
