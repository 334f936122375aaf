#include "storage/leveldb_config.h"

namespace tally {
namespace storage {

std::unique_ptr<LevelDbConfig> MakeLevelDbConfig(const StoreOptions& options) {
  auto config = std::make_unique<LevelDbConfig>();
  config->cache.reset(leveldb::NewLRUCache(options.block_cache_bytes));
  // 10 bits per key: reading a key the store does not have (every new row,
  // since last writer wins reads before it writes) rarely touches a table.
  config->filter.reset(leveldb::NewBloomFilterPolicy(10));
  config->options.create_if_missing = true;
  // Off while the store runs: with paranoid checks, the first compaction
  // that reads a damaged block fails, and LevelDB then refuses every write
  // until it is reopened (and again at the next such compaction), so one
  // flipped byte would stop a node's writes. A damaged value is caught
  // instead by the row's own digest on every read (the row is then repaired
  // from a peer). Store::Open runs a paranoid open first, for the log: see
  // there.
  config->options.paranoid_checks = false;
  config->options.write_buffer_size = options.write_buffer_bytes;
  config->options.block_cache = config->cache.get();
  config->options.filter_policy = config->filter.get();
  config->options.max_file_size = 8 * 1024 * 1024;
  if (options.env != nullptr) config->options.env = options.env;
  return config;
}

}  // namespace storage
}  // namespace tally
