// The values a Store hands out: log positions, rows, keyspace and origin
// tables, change-log entries, and the reports of Verify and ScrubLeaves
// (storage/store.h).
#ifndef TALLY_STORAGE_STORE_TYPES_H_
#define TALLY_STORAGE_STORE_TYPES_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "tree/digest.h"
#include "tree/version.h"

namespace tally {
namespace storage {

// Position in a node's change log; 0 means "before the first entry".
using Sequence = uint64_t;
// Identifies one incarnation of a node's change log (random, never 0).
using Epoch = uint64_t;

// A row as stored.
struct Row {
  std::string key;
  std::string value;
  tree::Version version;
  bool deleted = false;
  tree::Digest128 digest;
};

// A row record as the index holds it (Store::ScanIndex): no value, the
// backend's payload instead (for the embedded backend, the value itself).
// The views are valid during the visit only.
struct IndexRecord {
  absl::string_view key;
  tree::Version version;
  bool deleted = false;
  tree::Digest128 digest;
  absl::string_view payload;
  // Marked damaged: its value did not match its digest when read, so it is
  // out of its leaf until a write replaces it.
  bool damaged = false;
};

struct KeyspaceInfo {
  std::string name;
  int depth = 0;
  uint64_t row_count = 0;  // tombstones included
  tree::Digest128 root;
  // Commits that changed the root since the store was opened (in memory
  // only: a restart starts again at 0, as a Prometheus counter may).
  uint64_t root_changes = 0;
};

// A keyspace dropped from this store (Store::DropKeyspace): writes to its
// name are refused, and sessions leave it out, until the drop is undone.
struct DroppedKeyspaceInfo {
  std::string name;
  int64_t dropped_unix_ms = 0;
};

// Rows (tombstones included, over all keyspaces) whose current version was
// born at one origin.
struct OriginRowCount {
  std::string origin;  // the origin's long name
  uint64_t rows = 0;
};

// One change-log entry, as the change feed reads it.
struct ChangeEntry {
  Sequence sequence = 0;
  std::string keyspace;
  std::string key;
  tree::Version version;
  bool deleted = false;
  // The row was removed by a source override (no tombstone remains).
  bool erased = false;
};

// What one ScrubLeaves call found.
struct ScrubReport {
  uint64_t leaves = 0;        // leaves recomputed
  uint64_t rows_checked = 0;  // rows whose digest was recomputed
  // Rows found damaged by this call (their stored bytes do not match their
  // digest, or cannot be decoded); they are now marked and left out of the
  // tree until a peer's copy or a new write replaces them.
  uint64_t damaged_rows = 0;
  // Leaves whose stored digest or count disagreed with their sound rows and
  // were corrected.
  uint64_t leaves_repaired = 0;
  // Blocks LevelDB could not read at all (their rows are unknown).
  uint64_t unreadable = 0;
};

// The write path's row filters (StoreOptions::row_filter) since the store
// opened: how many writes of a row not staged earlier in their commit read
// the row first, and how many skipped the read because the filter said no
// row has the key's token.
struct RowFilterStats {
  uint64_t rows_read = 0;
  uint64_t reads_skipped = 0;
  int keyspaces = 0;  // keyspaces with a filter
  int built = 0;      // of them, built (the others read every row)
  size_t memory_bytes = 0;
};

struct VerifyReport {
  uint64_t keyspaces = 0;
  uint64_t rows = 0;
  // Human-readable descriptions of every mismatch found (empty when sound).
  std::vector<std::string> problems;
  bool ok() const { return problems.empty(); }
};

// Called after each commit with the highest sequence it wrote. Runs on the
// committing thread under the store's listener lock: it must be quick and
// must not call Write(), AddChangeListener() or RemoveChangeListener().
using ChangeListener = std::function<void(Sequence last_sequence)>;

}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_STORE_TYPES_H_
