// StoreOptions: how a Store is opened — its identity, durability, limits,
// LevelDB tuning, clock, backend and file system (storage/store.h).
#ifndef TALLY_STORAGE_STORE_OPTIONS_H_
#define TALLY_STORAGE_STORE_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "storage/row_backend.h"
#include "tree/hlc.h"
#include "tree/merkle_tree.h"

namespace leveldb {
class Env;
}  // namespace leveldb

namespace tally {
namespace storage {

struct StoreOptions {
  // This node's origin long name: stamped on local writes. Required when the
  // store is created; must match the stored name when it is reopened.
  std::string node_name;

  // Depth of keyspaces created on first write (1..24).
  int default_depth = tree::kDefaultDepth;

  // Sync every commit to disk before acknowledging it. With true (the
  // default) an acknowledged write survives a machine crash. With false it
  // survives a process crash but a power loss may lose the last commits
  // (never half of one: the tree still matches the rows).
  bool sync = true;

  // Keep an in-memory filter of the tokens of each keyspace's rows and skip
  // the last-writer-wins read of a row the filter says cannot exist (a new
  // key). Costs about 1.5 bytes per row of memory (3 at worst, right after
  // a filter grows); a store opened with rows builds its filters in the
  // background and reads every row until they are built. False: every write
  // reads its row first, as before (for comparisons).
  bool row_filter = true;

  // Leaves are checkpointed after this many changes (and at a clean close);
  // an open after a crash replays at most this many change-log entries.
  uint64_t leaf_checkpoint_interval = 1 << 18;

  // Limits; exceeding one returns kInvalidArgument naming it.
  size_t max_key_bytes = 16 * 1024;
  size_t max_value_bytes = 1024 * 1024;
  size_t max_batch_mutations = 10'000;
  size_t max_batch_bytes = 16 * 1024 * 1024;
  // Keyspaces a store holds at most. Each costs its whole tree in memory
  // from the moment it exists (about 2.2 MiB at depth 16), and any client
  // creates one with a write to a new name: a write that would create one
  // more is refused with kResourceExhausted.
  size_t max_keyspaces = 256;

  // LevelDB tuning. 32 MiB of write buffer ingests fastest here (1M rows,
  // store rows/s: 8 MiB ~190k, 32 MiB 160k-250k, 128 MiB ~118k; README,
  // ingest).
  size_t write_buffer_bytes = 32 * 1024 * 1024;
  size_t block_cache_bytes = 64 * 1024 * 1024;

  // Remote versions further ahead of the local clock are refused.
  absl::Duration max_clock_skew = absl::Seconds(60);
  // Milliseconds since the epoch; tests inject their own. Default: system.
  tree::HybridClock::PhysicalClock physical_clock;

  // Where values live; default: NewEmbeddedBackend().
  std::shared_ptr<RowBackend> backend;

  // Called once, on the writing thread, when a LevelDB write first fails
  // and the store starts refusing writes (see Store::write_status()), with
  // that error. Must be quick and must not write to the store.
  std::function<void(const absl::Status&)> on_write_failure;

  // Called once, from the thread that found it, when LevelDB reports a
  // table block it cannot decode at all (a read, a scan, the scrubber, or
  // a compaction, whose failure then stops writes: see write_status()),
  // after the store has written its damaged-tables file
  // (TablesReportedDamaged() in storage/store.h). The rows of such a block
  // cannot be read, replaced or compacted past until the table is salvaged
  // (RepairStore) with the store closed. Must be quick and must not use
  // the store.
  std::function<void(const absl::Status&)> on_table_damage;

  // The file system LevelDB goes through; default (null): the real one.
  // Tests inject disk faults here (storage/internal/fault_injection_env.h).
  // Not owned; must outlive the store.
  leveldb::Env* env = nullptr;
};

}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_STORE_OPTIONS_H_
