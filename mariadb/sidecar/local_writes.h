// LocalWrites: which rows of the kept tables the server's own applications
// (not this node's apply) last wrote between two GTID states, read from the
// binary log. A sidecar whose index was lost (mariadb/sidecar/index_marker.h)
// uses it to tell the rows that may hold writes the peers have not received
// (they get fresh versions and win) from the rows the peers already hold
// (they get the bootstrap version and lose to the peers' versions).
//
// A transaction counts as local unless it carries the apply's server_id;
// in one that does, a row its apply log record does not list (a trigger's)
// counts as local too, as the capture counts it. The last change of a key
// decides: written (the row is in the table) or deleted.
//
// The read starts at `from_gtid`. When the server no longer holds the log
// from there (purged), it starts at the oldest log the server holds (the
// GTID state at its start, BINLOG_GTID_POS(file, 4)) and says so
// (`complete` false, `read_from` that state): local writes before it cannot
// be told. A transaction whose images of a kept table cannot be read with
// the table as it is now (written before an ALTER) is counted in
// `unreadable_transactions`; its rows are not known. A TRUNCATE logs no rows.
//
//   LocalWritesOptions o;
//   o.from_gtid = marker.first_build_gtid;
//   o.to_gtid = snapshot.gtid;
//   o.tables = kept;
//   o.apply_server_id = 4242;
//   TALLY_ASSIGN_OR_RETURN(LocalWrites w, ReadLocalWrites(target, o));
//   if (w.Written("db.t", key)) ...
//
// Thread-compatible.
#ifndef TALLY_MARIADB_SIDECAR_LOCAL_WRITES_H_
#define TALLY_MARIADB_SIDECAR_LOCAL_WRITES_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "mariadb/table.h"
#include "mariadb/url.h"

namespace tally {
namespace mariadb {

struct LocalWritesOptions {
  // Read the transactions after `from_gtid` up to and including those
  // `to_gtid` holds (per replication domain).
  std::string from_gtid;
  std::string to_gtid;
  // The kept tables by keyspace ("db.t"); null for one the server does not
  // hold. Each must outlive the call.
  std::map<std::string, const MariaDbTable*> tables;
  // This node's name (its apply log record) and its apply's server_id; the
  // reader registers as apply_server_id + 1.
  std::string node;
  uint32_t apply_server_id = 0;
  // The longest wait for the next event before the read gives up
  // (kDeadlineExceeded).
  absl::Duration stall_timeout = absl::Seconds(30);
};

struct LocalWrites {
  // Per keyspace, per key: true when its last local change wrote it, false
  // when it deleted it.
  std::map<std::string, absl::flat_hash_map<std::string, bool>> keys;
  // The GTID state the read started after: from_gtid, or the oldest
  // log's when that was purged.
  std::string read_from;
  bool complete = true;  // read from from_gtid
  uint64_t transactions = 0;
  uint64_t unreadable_transactions = 0;

  // Whether the last local change of `key` in `keyspace` wrote (deleted)
  // it.
  bool Written(absl::string_view keyspace, absl::string_view key) const;
  bool Deleted(absl::string_view keyspace, absl::string_view key) const;
};

// kUnavailable when the server cannot be reached or the stream breaks;
// kFailedPrecondition when the server holds no log that could be read
// from (RESET MASTER since `from_gtid`); kDeadlineExceeded after a stall.
absl::StatusOr<LocalWrites> ReadLocalWrites(const MariaDbTarget& target,
                                            const LocalWritesOptions& options);

}  // namespace mariadb
}  // namespace tally

#endif  // TALLY_MARIADB_SIDECAR_LOCAL_WRITES_H_
