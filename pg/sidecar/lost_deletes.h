// LocalDeletes: the rows an application deleted in a node's database while
// the node's index was lost, found in the node's old slot before a loss
// build replaces it (pg/sidecar/bootstrap.h, "Index lost").
//
// A lost index is rebuilt from a snapshot of the tables. A row the
// application updated or inserted meanwhile is in that snapshot with its
// commit time, and gets a fresh version; a row it DELETED is simply not
// there, and without a tombstone the peers' live row would come back at
// the next session. The old slot still knows: every transaction committed
// after its confirmed position — which the lost index had stored and
// confirmed — is still decodable from it. So before the build drops it,
// the slot is peeked (pg_logical_slot_peek_binary_changes: decoded, not
// consumed) with the node's publication, and every key whose last change
// there is a delete not made by tally's own apply is returned with the
// commit time of that delete; the build then gives each such key that its
// snapshot does not hold a tombstone with a fresh version (Now() after
// observing that commit time, as for rows written since the first build).
//
// What this does not find, and why:
//  - rows deleted by a TRUNCATE (pgoutput names the tables, not the rows):
//    listed in `truncated` so the caller can say so;
//  - deletes the lost index had captured and confirmed but not yet sent to
//    its peers (before the slot's confirmed position: no longer decodable);
//  - deletes committed after the peek and before the build's new slot
//    exists (the two cannot be one step: the new slot has the old one's
//    name);
//  - anything, when the old slot is missing or its WAL was removed
//    (`slot_found` false), or deletes before a loss build that was cut
//    short (the slot is then that build's, created after them).
//
//   TALLY_ASSIGN_OR_RETURN(LocalDeletes deletes,
//       ReadLocalDeletes(conn, names, tables));
//   auto it = deletes.keys.find("public.t");  // key -> commit time
//
// Thread-compatible: uses the connection it is given. The peek decodes all
// the slot holds in one query (the server spills a large result to disk).
#ifndef TALLY_PG_SIDECAR_LOST_DELETES_H_
#define TALLY_PG_SIDECAR_LOST_DELETES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "pg/schema/names.h"
#include "pg/schema/table_schema.h"
#include "pg/wire/connection.h"
#include "pg/wire/pgoutput.h"

namespace tally {
namespace pg {

struct LocalDeletes {
  // False when the slot is missing or lost: nothing could be read.
  bool slot_found = false;
  // Keyspace -> canonical key -> the delete's commit time (µs since
  // 2000-01-01 UTC, PostgreSQL's epoch; FromPgTimestamp converts).
  absl::flat_hash_map<std::string, absl::flat_hash_map<std::string, int64_t>>
      keys;
  // Keyspaces a local TRUNCATE emptied in that span (their rows are not
  // known).
  absl::flat_hash_set<std::string> truncated;
  // Transactions decoded, and how many of them were tally's own applies.
  uint64_t transactions = 0;
  uint64_t own_transactions = 0;
};

// Peeks slot `names.slot` through publication `names.publication` and
// returns the local deletes of `tables` described above; a transaction
// under replication origin `names.origin` is tally's own. Returns the
// connection's errors, and kDataLoss for a message the parser refuses.
absl::StatusOr<LocalDeletes> ReadLocalDeletes(
    Connection& conn, const ReplicationNames& names,
    absl::Span<const TableSchema> tables);

// The decoding step, apart from the query so that it can be tested with
// made-up messages: feed each message of the peek in order.
class LocalDeleteCollector {
 public:
  LocalDeleteCollector(absl::Span<const TableSchema> tables,
                       std::string own_origin);

  absl::Status Add(const PgOutputMessage& message);

  // The result so far (slot_found left false).
  LocalDeletes Take() &&;

 private:
  struct Relation {
    const TableSchema* table = nullptr;  // null: a table not kept
    std::vector<size_t> canonical;       // relation column -> schema column
  };
  absl::StatusOr<std::string> KeyOf(const Relation& relation,
                                    const TupleData& tuple) const;
  // The change of one key in the current transaction.
  void Deleted(const TableSchema& table, std::string key);
  void Written(const TableSchema& table, const std::string& key);

  std::vector<TableSchema> tables_;
  std::string own_origin_;
  absl::flat_hash_map<uint32_t, Relation> relations_;
  bool in_transaction_ = false;
  bool own_ = false;
  int64_t commit_time_us_ = 0;
  LocalDeletes result_;
};

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_SIDECAR_LOST_DELETES_H_
