// Checking and salvaging LevelDB's table files (*.ldb, *.sst) one by one,
// with every block's checksum verified, before LevelDB's own RepairDB sees
// them.
//
// RepairDB reads tables without checksums: a damaged block decodes into
// keys out of order or shorter than LevelDB's 8-byte trailer, which either
// aborts the process on one of LevelDB's assertions (the rewrite of a table
// asserts key order) or lets garbage keys into the repaired store. Checking
// the tables first and rewriting each damaged one with only the entries of
// its sound blocks gives RepairDB nothing it cannot read. A table whose
// footer or index is damaged cannot be read at all: it is moved aside whole.
// The tables are read through LevelDB's public Table API.
#ifndef TALLY_STORAGE_INTERNAL_TABLE_SALVAGE_H_
#define TALLY_STORAGE_INTERNAL_TABLE_SALVAGE_H_

#include <leveldb/env.h>
#include <leveldb/options.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tally {
namespace storage {
namespace internal {

// One table file that is not sound.
struct DamagedTable {
  std::string file;    // its name in the directory, e.g. "000036.ldb"
  std::string reason;  // LevelDB's first error reading it
  // Entries of its sound blocks (what a salvage keeps); 0 when unreadable.
  uint64_t readable_entries = 0;
  bool unreadable = false;  // footer or index damaged: nothing to keep
};

struct TableCheck {
  int tables = 0;  // table files checked
  std::vector<DamagedTable> damaged;
  // SalvageTables: incomplete tables the MANIFEST does not name (a
  // compaction's output a close cut short), moved aside unreported.
  int leftovers = 0;
};

// Reads every table file in `dir` with checksums verified and reports the
// damaged ones. Reads only. Tables the MANIFEST does not name (a
// compaction's output that a close interrupted, which LevelDB deletes at
// the next open) are skipped when the MANIFEST can be read. A damaged
// filter block goes unseen (it is not read: tables are opened without a
// filter policy). Errors only when the directory cannot be listed.
absl::StatusOr<TableCheck> CheckTables(const std::string& dir,
                                       leveldb::Env* env);

// Whether any table in `dir` holds an entry whose user key `wanted` takes,
// reading (checksums verified) until the first one. Reads only.
absl::StatusOr<bool> AnyTableKey(
    const std::string& dir, leveldb::Env* env,
    const std::function<bool(absl::string_view user_key)>& wanted);

// Rewrites every table in `dir` from what CheckTables can read of it, with
// a new index and filter (`options` gives the filter policy, block size and
// compression). A damaged table's original is moved into `lost_dir`
// (created if missing) and the table of its sound blocks takes its name; an
// unreadable one is moved there with nothing in its place; a sound one is
// replaced (all its entries kept: its filter block, which the store reads
// without a checksum, may be what was damaged). Each new table is complete
// and synced before it takes the name, so an interrupted salvage leaves a
// complete table under every name. A damaged table the MANIFEST does not
// name (when it can be read) is a compaction's output a close cut short:
// it is moved into `lost_dir` whole and counted in `leftovers`, not in
// `damaged`. Returns the damaged tables as CheckTables does.
absl::StatusOr<TableCheck> SalvageTables(const std::string& dir,
                                         const std::string& lost_dir,
                                         const leveldb::Options& options);

}  // namespace internal
}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_INTERNAL_TABLE_SALVAGE_H_
