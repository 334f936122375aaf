// LevelDbConfig: the LevelDB options a Store opens its database with.
//
// Exposed so that benchmarks compare the store against raw LevelDB
// configured identically (same write buffer, block cache, Bloom filter and
// file size); the store itself is the only other user.
//
//   std::unique_ptr<LevelDbConfig> config = MakeLevelDbConfig(StoreOptions{});
//   leveldb::DB::Open(config->options, dir, &db);  // config outlives db
//
// Thread-compatible value; the cache and filter it owns are thread-safe.
#ifndef TALLY_STORAGE_LEVELDB_CONFIG_H_
#define TALLY_STORAGE_LEVELDB_CONFIG_H_

#include <leveldb/cache.h>
#include <leveldb/filter_policy.h>
#include <leveldb/options.h>

#include <memory>

#include "storage/store.h"

namespace tally {
namespace storage {

struct LevelDbConfig {
  std::unique_ptr<leveldb::Cache> cache;
  std::unique_ptr<const leveldb::FilterPolicy> filter;
  // Points at `cache` and `filter`: the config must outlive any database
  // opened with it.
  leveldb::Options options;
};

std::unique_ptr<LevelDbConfig> MakeLevelDbConfig(const StoreOptions& options);

}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_LEVELDB_CONFIG_H_
