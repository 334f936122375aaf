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
  // Fail the open on a damaged log or table instead of dropping what it
  // cannot read (a damaged log once cost 15-2,000 rows silently), and check
  // table checksums when compacting, so that damage is not copied into new
  // tables. `tally recover` salvages a store that no longer opens.
  config->options.paranoid_checks = true;
  config->options.write_buffer_size = options.write_buffer_bytes;
  config->options.block_cache = config->cache.get();
  config->options.filter_policy = config->filter.get();
  config->options.max_file_size = 8 * 1024 * 1024;
  if (options.env != nullptr) config->options.env = options.env;
  return config;
}

}  // namespace storage
}  // namespace tally
