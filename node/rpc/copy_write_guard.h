// CopyWriteGuard: the writes a node takes from its own clients (Admin.Put,
// Delete and Load) when it should take rows only from its peers.
//
// A node with a `role=source` peer is that source's copy: whatever else
// writes to it is undone by its next session with the source (the rows are
// erased or overwritten), and a client that keeps writing to a copy is a
// split brain waiting to happen (a replica must be checked regularly for
// writers nobody meant to point at it). So on a copy every such write is
// counted, by origin (the node's own name: the client's rows are born here),
// shown in status with a warning and in /metrics (tally_copy_writes_total), and
// logged once. With --read-only they are refused instead
// (kFailedPrecondition naming the source), on a copy or any node.
//
//   CopyWriteGuard guard(config.name, source_address, config.read_only);
//   TALLY_RETURN_IF_ERROR(guard.Admit(rows));  // before writing them
//
// Rows that arrive from peers (sessions, the change feed, a tool's repair)
// are not client writes and never pass here.
//
// Thread-safe.
#ifndef TALLY_NODE_RPC_COPY_WRITE_GUARD_H_
#define TALLY_NODE_RPC_COPY_WRITE_GUARD_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "node/observe/status_source.h"

namespace tally {
namespace node {

class CopyWriteGuard : public StatusSource {
 public:
  // `source`: the address of this node's role=source peer, empty when it
  // has none. `read_only`: refuse every client write.
  CopyWriteGuard(std::string node_name, std::string source, bool read_only);

  // Before a client writes `rows` rows: kFailedPrecondition on a read-only
  // node; otherwise OK, counting them on a copy (logging the first).
  absl::Status Admit(uint64_t rows) ABSL_LOCKS_EXCLUDED(mu_);

  // StatusSource: StatusResponse.copy_writes and read_only.
  void FillStatus(::tally::v1::StatusResponse* response) override
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const std::string node_name_;
  const std::string source_;
  const bool read_only_;

  absl::Mutex mu_;
  uint64_t rows_written_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t rows_refused_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_RPC_COPY_WRITE_GUARD_H_
