#include "storage/bulk/gathered_rows.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "tree/hlc.h"
#include "tree/status_macros.h"

namespace tally {
namespace storage {
namespace {

void Store32(char* p, uint32_t v) { std::memcpy(p, &v, sizeof(v)); }
void Store64(char* p, uint64_t v) { std::memcpy(p, &v, sizeof(v)); }
uint32_t Load32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
uint64_t Load64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Rows ahead of the one being made whose records are fetched meanwhile.
constexpr size_t kPrefetchDistance = 8;

}  // namespace

GatheredRows::GatheredRows(size_t expected_rows) {
  entries_.reserve(expected_rows);
}

char* GatheredRows::Allocate(size_t bytes) {
  if (bytes > kChunkSize) {
    // A row larger than a chunk gets one of its own, before the current
    // one, which stays open.
    auto big = std::make_unique<char[]>(bytes);
    char* p = big.get();
    chunks_.insert(chunks_.empty() ? chunks_.end() : chunks_.end() - 1,
                   std::move(big));
    return p;
  }
  if (kChunkSize - chunk_used_ < bytes) {
    chunks_.push_back(std::make_unique<char[]>(kChunkSize));
    chunk_used_ = 0;
  }
  char* p = chunks_.back().get() + chunk_used_;
  chunk_used_ += bytes;
  return p;
}

void GatheredRows::Add(absl::string_view key, absl::string_view value,
                       absl::string_view payload,
                       const tree::Version& version) {
  size_t origin = 0;
  while (origin < origins_.size() && origins_[origin] != version.origin) {
    ++origin;
  }
  if (origin == origins_.size()) origins_.push_back(version.origin);
  char* record =
      Allocate(kHeaderSize + key.size() + value.size() + payload.size());
  Store32(record, static_cast<uint32_t>(key.size()));
  Store32(record + 4, static_cast<uint32_t>(value.size()));
  record[8] = static_cast<char>(payload.size());
  record[9] = static_cast<char>(origin);
  Store64(record + 10, version.timestamp.raw());
  char* p = record + kHeaderSize;
  std::memcpy(p, key.data(), key.size());
  std::memcpy(p + key.size(), value.data(), value.size());
  std::memcpy(p + key.size() + value.size(), payload.data(), payload.size());
  entries_.push_back(Entry{tree::TokenOf(key), record});
}

absl::string_view GatheredRows::KeyOf(const char* record) {
  return absl::string_view(record + kHeaderSize, Load32(record));
}

void GatheredRows::Sort() {
  std::sort(entries_.begin(), entries_.end(),
            [](const Entry& a, const Entry& b) {
              if (a.token != b.token) return a.token < b.token;
              return KeyOf(a.record) < KeyOf(b.record);
            });
}

absl::Status GatheredRows::ForEach(
    absl::string_view keyspace,
    absl::FunctionRef<absl::Status(storage::Mutation)> visit) const {
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (i + kPrefetchDistance < entries_.size()) {
      const char* ahead = entries_[i + kPrefetchDistance].record;
      __builtin_prefetch(ahead);
      __builtin_prefetch(ahead + 64);
    }
    const char* record = entries_[i].record;
    const uint32_t key_size = Load32(record);
    const uint32_t value_size = Load32(record + 4);
    const size_t payload_size = static_cast<unsigned char>(record[8]);
    const size_t origin = static_cast<unsigned char>(record[9]);
    const char* key = record + kHeaderSize;
    storage::Mutation m = storage::Mutation::Put(
        std::string(keyspace), std::string(key, key_size),
        std::string(key + key_size, value_size));
    m.version = tree::Version{tree::HlcTimestamp::FromRaw(Load64(record + 10)),
                              origins_[origin]};
    m.captured_payload.emplace(key + key_size + value_size, payload_size);
    TALLY_RETURN_IF_ERROR(visit(std::move(m)));
  }
  return absl::OkStatus();
}

}  // namespace storage
}  // namespace tally
