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
  config->options.write_buffer_size = options.write_buffer_bytes;
  config->options.block_cache = config->cache.get();
  config->options.filter_policy = config->filter.get();
  config->options.max_file_size = 8 * 1024 * 1024;
  return config;
}

}  // namespace storage
}  // namespace tally
