// SnapshotRowReader: what a reader of one keyspace's rows at a LevelDB
// snapshot needs from the store, and nothing more: the row records of a
// token range, each row checked against its digest and made a tree entry,
// the marking of rows found damaged, and the keyspace's in-memory tree.
// StoreImpl implements it and hands it to StoreTreeView (the diff's view of
// a keyspace), which so needs no access to the store's state.
//
//   const leveldb::Snapshot* snapshot = reader->GetSnapshot();
//   absl::Status s = reader->ForEachRow(snapshot, ks.id, range,
//   CacheFill::kYes,
//       [&](const StoredRow& row) -> absl::StatusOr<bool> {
//         ...  // copy the row; every so many rows, check them at once:
//         TALLY_ASSIGN_OR_RETURN(auto entries, reader->CheckedEntries(ks,
//         rows, SnapshotRowReader::Values::kNo));
//         return true;  // false stops
//       });
//   reader->ReleaseSnapshot(snapshot);
//
// Thread-safe: every method may be called from any thread (the store locks
// what it reads).
#ifndef TALLY_STORAGE_INTERNAL_SNAPSHOT_ROW_READER_H_
#define TALLY_STORAGE_INTERNAL_SNAPSHOT_ROW_READER_H_

#include <leveldb/db.h>

#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "storage/internal/records.h"
#include "tree/merkle_tree.h"
#include "tree/token.h"
#include "tree/tree_view.h"

namespace tally {
namespace storage {
namespace internal {

struct Keyspace;

// One row record as stored. The views point into the iterator: valid for
// the visit only.
struct StoredRow {
  tree::Token token = 0;
  absl::string_view key;
  RowHeader header;
  absl::string_view payload;
  // Marked damaged (only visited by scans that include damaged rows).
  bool damaged = false;
};

// Whether a read keeps the blocks it reads in the store's block cache. Yes
// for reads of at most a leaf's rows, which a diff repeats (the next round
// lists what this one descended into, the next diff reads the same leaves)
// and which, read uncached, decompress their blocks again each time; no for
// scans of large ranges, which would evict everything else.
enum class CacheFill { kNo, kYes };

// Returns true to go on, false to stop, or an error that ends the scan.
using RowVisitor = absl::FunctionRef<absl::StatusOr<bool>(const StoredRow&)>;

class SnapshotRowReader {
 public:
  // A snapshot of the store; the caller releases it with ReleaseSnapshot.
  virtual const leveldb::Snapshot* GetSnapshot() = 0;
  virtual void ReleaseSnapshot(const leveldb::Snapshot* snapshot) = 0;

  // Visits the row records of `range` in keyspace `keyspace_id` at
  // `snapshot` (nullptr: now), in (token, key) order. Rows marked damaged
  // are left out: they are out of their leaf until replaced. Returns the
  // visitor's error, kDataLoss for a record that does not parse, or
  // LevelDB's error. `fill` says whether the blocks read stay cached.
  virtual absl::Status ForEachRow(const leveldb::Snapshot* snapshot,
                                  uint32_t keyspace_id,
                                  const tree::NodeRef& range, CacheFill fill,
                                  RowVisitor visit) = 0;

  // The rows of `keyspace` as tree entries, one result per row in order,
  // each once its value matches its digest: kDataLoss for a row whose value
  // does not (the row is damaged; the caller leaves it out and marks it) or
  // whose origin is unknown, another error for a row the backend cannot
  // give now. A row whose backend value is not the indexed version any
  // more (ReadValues' kAborted or kUnavailable: an application changed it)
  // is the index's entry without a value, unchecked: it is what the tree
  // holds, and a diff under application writes must not fail on it. The values
  // are read with ONE backend read for the whole batch
  // (RowBackend::ReadValues): for a PostgreSQL backend a row read alone is a
  // round trip, and a diff lists whole leaves. With `values` kYes each
  // entry keeps the value it was checked with (RowEntry::value). The call
  // itself fails only when the backend cannot be read at all.
  enum class Values { kNo, kYes };
  virtual absl::StatusOr<std::vector<absl::StatusOr<tree::RowEntry>>>
  CheckedEntries(const Keyspace& keyspace, absl::Span<const StoredRow> rows,
                 Values values) const = 0;

  // Marks the damaged rows of the leaf of `token` and recomputes the leaf
  // from its sound rows (ScrubLeaves of one leaf), so that anti-entropy
  // brings a peer's copy. Commits: call it with no snapshot or iterator
  // held. Returns the scrub's error.
  virtual absl::Status MarkDamaged(const Keyspace& keyspace,
                                   tree::Token token) = 0;

  // Calls `read` with the keyspace's in-memory tree, under the lock that
  // guards it: `read` must not call back into the store.
  virtual void ReadTree(
      const Keyspace& keyspace,
      absl::FunctionRef<void(const tree::MerkleTree&)> read) const = 0;

 protected:
  ~SnapshotRowReader() = default;
};

}  // namespace internal
}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_INTERNAL_SNAPSHOT_ROW_READER_H_
