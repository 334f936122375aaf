// Scenario "ingest": rows through the store (tree maintenance, change log,
// one WriteBatch per commit) against raw LevelDB WriteBatches of the same
// keys and values, with the same LevelDB options, in the same run.
#include <leveldb/db.h>
#include <leveldb/write_batch.h>
#include <time.h>

#include <chrono>
#include <memory>
#include <random>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "storage/leveldb_config.h"
#include "storage/store.h"
#include "tools/bench/scenario.h"
#include "tools/bench/store_fixture.h"

ABSL_FLAG(uint64_t, ingest_batch, 100, "ingest: rows per write batch");
ABSL_FLAG(bool, ingest_unfiltered, true,
          "ingest: also run the store with its row filter off (the lever "
          "alone, same run)");
ABSL_FLAG(uint64_t, ingest_write_buffer_mb, 0,
          "ingest: LevelDB write buffer in MiB for the store and the raw "
          "baselines alike (0: the store's default)");
ABSL_FLAG(uint64_t, ingest_sync_rows, 100000,
          "ingest: rows for the sync=true comparison (0 to skip)");

namespace tally {
namespace bench {
namespace {

constexpr size_t kKeyBytes = 16;
constexpr size_t kValueBytes = 100;

struct Run {
  double seconds = 0;
  // CPU of the whole process (LevelDB's compaction thread included).
  double cpu_seconds = 0;
  uint64_t disk_bytes = 0;
};

using Clock = std::chrono::steady_clock;

// The store's options as this run sets them (--ingest_write_buffer_mb).
storage::StoreOptions BenchStoreOptions() {
  storage::StoreOptions options;
  if (const uint64_t mb = absl::GetFlag(FLAGS_ingest_write_buffer_mb); mb > 0) {
    options.write_buffer_bytes = mb << 20;
  }
  return options;
}

double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
}

// Raw LevelDB with the options Store::Open uses. With `same_work`, it also
// does what any last-writer-wins store with a change log must: read the key
// before writing it, and write a change record beside the row.
absl::StatusOr<Run> IngestRaw(uint64_t rows, uint64_t batch_rows, bool sync,
                              bool same_work, uint64_t seed) {
  testing::TempDir dir;
  const std::unique_ptr<storage::LevelDbConfig> config =
      storage::MakeLevelDbConfig(BenchStoreOptions());
  leveldb::DB* raw = nullptr;
  leveldb::Status s = leveldb::DB::Open(config->options, dir.path(), &raw);
  if (!s.ok()) return absl::UnavailableError(s.ToString());
  std::unique_ptr<leveldb::DB> db(raw);
  std::mt19937_64 rng(seed);
  leveldb::WriteOptions write;
  write.sync = sync;
  Run run;
  const auto start = Clock::now();
  for (uint64_t done = 0; done < rows;) {
    leveldb::WriteBatch batch;
    for (uint64_t i = 0; i < batch_rows && done < rows; ++i, ++done) {
      const std::string key = RandomBytes(rng, kKeyBytes);
      const std::string value = RandomBytes(rng, kValueBytes);
      if (!same_work) {
        batch.Put(key, value);
        continue;
      }
      std::string existing;
      s = db->Get(leveldb::ReadOptions(), key, &existing);
      if (!s.ok() && !s.IsNotFound()) {
        return absl::UnavailableError(s.ToString());
      }
      batch.Put(key, value);
      char change_key[9] = {'C'};
      for (int b = 0; b < 8; ++b) {
        change_key[1 + b] = static_cast<char>(done >> (56 - 8 * b));
      }
      batch.Put(leveldb::Slice(change_key, 9), key);
    }
    s = db->Write(write, &batch);
    if (!s.ok()) return absl::UnavailableError(s.ToString());
  }
  run.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  db.reset();
  run.disk_bytes = DirectoryBytes(dir.path());
  return run;
}

absl::StatusOr<Run> IngestStore(uint64_t rows, uint64_t batch_rows, bool sync,
                                bool row_filter, uint64_t seed) {
  testing::TempDir dir;
  storage::StoreOptions options = BenchStoreOptions();
  options.node_name = "bench";
  options.sync = sync;
  options.row_filter = row_filter;
  auto store = storage::Store::Open(dir.path(), options);
  if (!store.ok()) return store.status();
  absl::Status s = (*store)->CreateKeyspace("bench", tree::kDefaultDepth);
  if (!s.ok()) return s;
  std::mt19937_64 rng(seed);
  Run run;
  const auto start = Clock::now();
  const double cpu_start = ProcessCpuSeconds();
  for (uint64_t done = 0; done < rows;) {
    storage::WriteRequest request;
    request.mutations.reserve(batch_rows);
    for (uint64_t i = 0; i < batch_rows && done < rows; ++i, ++done) {
      request.mutations.push_back(storage::Mutation::Put(
          "bench", RandomBytes(rng, kKeyBytes), RandomBytes(rng, kValueBytes)));
    }
    auto result = (*store)->Write(std::move(request));
    if (!result.ok()) return result.status();
  }
  run.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  run.cpu_seconds = ProcessCpuSeconds() - cpu_start;
  auto info = (*store)->GetKeyspace("bench");
  if (!info.ok()) return info.status();
  if (info->row_count != rows) {
    return absl::InternalError(absl::StrFormat(
        "the store holds %d rows after ingesting %d", info->row_count, rows));
  }
  store->reset();
  run.disk_bytes = DirectoryBytes(dir.path());
  return run;
}

absl::Status RunIngest(std::ostream& out) {
  const uint64_t rows = absl::GetFlag(FLAGS_rows);
  const uint64_t batch = absl::GetFlag(FLAGS_ingest_batch);
  const uint64_t sync_rows = absl::GetFlag(FLAGS_ingest_sync_rows);
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  if (rows == 0 || batch == 0) {
    return absl::InvalidArgumentError("--rows and --ingest_batch must be > 0");
  }
  out << absl::StrFormat(
      "ingest: %d-byte keys, %d-byte values, batches of %d, depth %d\n",
      kKeyBytes, kValueBytes, batch, tree::kDefaultDepth);
  out << absl::StrFormat(
      "%-5s %8s %11s %11s %12s %10s %7s %7s %8s %8s %8s %8s\n", "sync", "rows",
      "raw rows/s", "raw+lww+log", "store rows/s", "no filter", "us/row",
      "nf us/r", "raw MB", "store MB", "ratio", "ratio2");
  struct Mode {
    bool sync;
    uint64_t rows;
  };
  std::vector<Mode> modes{{false, rows}};
  if (sync_rows > 0) modes.push_back({true, std::min(sync_rows, rows)});
  for (const Mode& mode : modes) {
    auto raw = IngestRaw(mode.rows, batch, mode.sync, false, seed);
    if (!raw.ok()) return raw.status();
    auto same = IngestRaw(mode.rows, batch, mode.sync, true, seed);
    if (!same.ok()) return same.status();
    auto store = IngestStore(mode.rows, batch, mode.sync, true, seed);
    if (!store.ok()) return store.status();
    Run unfiltered;
    if (absl::GetFlag(FLAGS_ingest_unfiltered)) {
      auto run = IngestStore(mode.rows, batch, mode.sync, false, seed);
      if (!run.ok()) return run.status();
      unfiltered = *run;
    }
    const double n = static_cast<double>(mode.rows);
    const double raw_rate = n / raw->seconds;
    const double same_rate = n / same->seconds;
    const double store_rate = n / store->seconds;
    out << absl::StrFormat(
        "%-5s %8d %11.0f %11.0f %12.0f %10.0f %7.2f %7.2f %8.1f %8.1f %8.2f "
        "%8.2f\n",
        mode.sync ? "on" : "off", mode.rows, raw_rate, same_rate, store_rate,
        unfiltered.seconds > 0 ? n / unfiltered.seconds : 0.0,
        store->cpu_seconds * 1e6 / n, unfiltered.cpu_seconds * 1e6 / n,
        raw->disk_bytes / 1e6, store->disk_bytes / 1e6, store_rate / raw_rate,
        store_rate / same_rate);
  }
  out << "no filter = the store with StoreOptions::row_filter off (every "
         "write reads its row first)\n"
         "us/row = CPU microseconds per row of the whole process "
         "(LevelDB's compaction thread included); nf: no filter\n"
         "ratio  = store / raw LevelDB blind writes of the same rows (goal "
         ">= 0.5)\n"
         "ratio2 = store / raw LevelDB doing the unavoidable work of LWW with "
         "a change log\n         (read each key first, write row and change "
         "record): the cost of the tree itself\n";
  return absl::OkStatus();
}

}  // namespace

Scenario IngestScenario() {
  return {"ingest",
          "rows into the store vs raw LevelDB WriteBatches of the same rows",
          &RunIngest};
}

}  // namespace bench
}  // namespace tally
