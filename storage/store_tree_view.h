// StoreTreeView: the tree::TreeView of one keyspace of a store, which the
// diff walks. The nodes above the leaves come from the keyspace's in-memory
// tree; the leaf lists and scans read the rows at one LevelDB snapshot per
// call. Made by Store::NewTreeView; it must not outlive its store. It sees
// the store only through a SnapshotRowReader
// (internal/snapshot_row_reader.h).
//
// Thread-compatible: one caller at a time (the store's state it reads is
// locked by the store).
#ifndef TALLY_STORAGE_STORE_TREE_VIEW_H_
#define TALLY_STORAGE_STORE_TREE_VIEW_H_

#include <leveldb/db.h>

#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "storage/internal/snapshot_row_reader.h"
#include "tree/token.h"
#include "tree/tree_view.h"

namespace tally {
namespace storage {
namespace internal {

// TreeView over one keyspace; one LevelDB snapshot per call.
class StoreTreeView : public tree::TreeView {
 public:
  // REQUIRES: `reader` and `keyspace` outlive the view (keyspaces are
  // never removed from a store).
  StoreTreeView(SnapshotRowReader* reader, const Keyspace* keyspace)
      : reader_(reader), keyspace_(keyspace) {}

  absl::StatusOr<tree::ViewSummary> Summary(int top_levels) override;
  // A store is local: nothing crosses a network.
  std::optional<tree::ViewTraffic> MeasuredTraffic() const override {
    return tree::ViewTraffic{};
  }
  absl::StatusOr<tree::ViewResponse> Exchange(
      const tree::ViewRequest& request) override;
  absl::Status Scan(absl::Span<const tree::NodeRef> ranges,
                    const tree::EntrySink& sink) override;
  // Every entry carries its value: the scan reads it anyway, to check it
  // against the row's digest.
  absl::Status ScanWithValues(absl::Span<const tree::NodeRef> ranges,
                              const tree::EntrySink& sink) override;

 private:
  // Rows checked with one backend read (ForEachSoundEntry): enough that a
  // whole listing is one read, few enough that a batch's copies stay small.
  static constexpr size_t kCheckBatch = 1024;

  // Calls `fn` with the index in `ranges` and the entry of every sound row
  // of each range at `snapshot`, range by range, in order, until it returns
  // false or an error. The rows are checked kCheckBatch at a time ACROSS
  // ranges: a diff lists a hundred small ranges in one exchange, and a
  // check per range was a backend read (a PostgreSQL round trip) each. A
  // row that fails its digest is left out and its token added to `damaged`
  // (for the caller to mark once the snapshot is released): a peer then
  // sends its copy.
  // With `values` kYes each entry carries its value.
  absl::Status ForEachSoundEntry(
      const leveldb::Snapshot* snapshot, absl::Span<const tree::NodeRef> ranges,
      SnapshotRowReader::Values values, std::vector<tree::Token>* damaged,
      absl::FunctionRef<absl::StatusOr<bool>(size_t, tree::RowEntry)> fn);

  // Scan and ScanWithValues.
  absl::Status ScanRanges(absl::Span<const tree::NodeRef> ranges,
                          SnapshotRowReader::Values values,
                          const tree::EntrySink& sink);

  // Reads of ranges of at most this many rows fill the block cache: a diff
  // scans the same few differing nodes' rows again in its next round (to
  // list what it descended into) and its next run, and uncached each scan
  // decompresses its blocks again (most of a warm diff's CPU at 5M rows).
  // Larger ranges (a Scan of the keyspace, a descent from near the root)
  // would evict the rest of the cache.
  static constexpr uint64_t kCachedRangeRows = 4096;

  CacheFill FillFor(const tree::NodeRef& range) const;

  SnapshotRowReader* const reader_;
  const Keyspace* const keyspace_;
};

}  // namespace internal
}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_STORE_TREE_VIEW_H_
