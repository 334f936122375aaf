// What a sidecar does with its index each time it starts following the
// database: resume from the stored position, build a first index, or
// rebuild the one it has — and why.
//
// The decision is a pure function of what the store and the database say
// (IndexFacts), so that every case is tested without a server
// (pg/sidecar/index_decision_test.cc). The sidecar (pg/sidecar/sidecar.cc)
// reads the facts, asks DecideIndex, logs the decision's message and acts on
// it.
//
//   stored position?  no  -> database says this node built one? -> kIndexLost
//                                                        else   -> kFirstStart
//                     yes -> a change seen while following      ->
//                     kSchemaChanged
//                            another database system            -> kOtherSystem
//                            slot missing / lost / passed us    -> kSlot*, ...
//                            tables unlike the stored schemas   -> kTable*
//                            publication not via the root       ->
//                            kPublication... none of these -> kResume

#ifndef TALLY_PG_SIDECAR_INDEX_DECISION_H_
#define TALLY_PG_SIDECAR_INDEX_DECISION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "pg/schema/table_schema.h"
#include "pg/sidecar/capture_position.h"
#include "pg/wire/lsn.h"

namespace tally {
namespace pg {

// Why the index is built, rebuilt or resumed. Checked in this order; the
// first that applies wins.
enum class IndexReason {
  // Nothing changed: follow on from the stored position.
  kResume,
  // No stored position, and the database holds no record of a build.
  kFirstStart,
  // No stored position, but the database says this node built an index
  // (pg/sidecar/build_marker.h): the store was lost or replaced. Rows last
  // written
  // here get fresh versions.
  kIndexLost,
  // The capture or the catalog check saw the schema change while
  // following.
  kSchemaChanged,
  // The database's system identifier is not the one the index was built
  // from (a promoted standby, a restored backup).
  kOtherSystem,
  // The replication slot is gone, lost (wal_status lost), or has passed
  // beyond the stored position: the changes in between are not decodable.
  kSlotMissing,
  kSlotLost,
  kPositionBehindSlot,
  // A kept table the index was not built with.
  kTableNewlyKept,
  // A table that was missing (dropped) at the last build exists again.
  kTableBack,
  // A table dropped and created again under the same name while tallyd
  // was stopped (its OID differs).
  kTableRecreated,
  // A partitioned table's partitions changed while tallyd was stopped.
  kPartitionsChanged,
  // A table's columns or key changed while tallyd was stopped.
  kTableChanged,
  // A kept table is missing from the database (dropped), and the index
  // still describes its rows.
  kTableMissing,
  // The publication does not publish a partitioned table via its root.
  kPublicationNotViaRoot,
};

// "resume", "first-start", "index-lost", ... (for logs and tests).
absl::string_view IndexReasonName(IndexReason reason);

// The replication slot as pg_replication_slots shows it.
struct SlotFacts {
  bool exists = false;
  // wal_status = 'lost'.
  bool lost = false;
  // confirmed_flush_lsn; absent when NULL.
  std::optional<Lsn> confirmed_flush;
};

// What the sidecar knows when it starts following.
struct IndexFacts {
  // The store's position (absent: the store holds no index).
  std::optional<CapturePosition> position;
  // The database's record that this node built an index on this very
  // system (a build marker whose system identifier matches).
  bool database_says_built = false;
  // The database's system identifier now.
  uint64_t system_id = 0;
  // A schema change seen while following (the capture's or the catalog
  // check's description), to be built anew.
  std::optional<std::string> schema_change;
  // The slot; read only when there is a position and no schema change.
  SlotFacts slot;
  // The kept tables as the catalog has them now, and the kept tables the
  // database does not have (dropped).
  std::vector<TableSchema> tables;
  absl::flat_hash_set<std::string> missing;
  // Whether the publication publishes via the partition root; absent when
  // no kept table is partitioned (then it does not matter and is not
  // read).
  std::optional<bool> publication_via_root;
  // The publication's name, for the message.
  std::string publication;
};

struct IndexDecision {
  IndexReason reason = IndexReason::kResume;
  // The reason in words, for the log ("" for kResume).
  std::string message;
  // Whether the index is built (true for every reason but kResume), and
  // whether an index is there to be rebuilt (a stored position).
  bool build = false;
  bool rebuild = false;
  // kIndexLost.
  bool index_lost = false;
  // Tables whose index describes another table of the same name (dropped,
  // maybe created again, since): that index is forgotten and the table
  // built as at a first start, so that anti-entropy brings the peers' rows
  // in instead of sending them deletes. Only for a build with a position.
  std::vector<std::string> afresh;
};

IndexDecision DecideIndex(const IndexFacts& facts);

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_SIDECAR_INDEX_DECISION_H_
