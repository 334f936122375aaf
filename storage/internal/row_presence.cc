#include "storage/internal/row_presence.h"

namespace tally {
namespace storage {
namespace internal {

void RowPresence::AddExisting(KeyspaceId keyspace, uint64_t rows) {
  absl::MutexLock lock(&mu_);
  // Room for the rows it holds and as many again before a second level.
  keyspaces_.try_emplace(keyspace, 2 * rows);
}

void RowPresence::AddNew(KeyspaceId keyspace) {
  absl::MutexLock lock(&mu_);
  auto [it, added] = keyspaces_.try_emplace(keyspace, 0);
  if (added) it->second.built = true;
}

void RowPresence::Add(KeyspaceId keyspace,
                      absl::Span<const tree::Token> tokens) {
  absl::MutexLock lock(&mu_);
  auto it = keyspaces_.find(keyspace);
  if (it == keyspaces_.end()) return;  // MayExist answers true for it
  for (tree::Token token : tokens) it->second.filter.Add(token);
}

void RowPresence::MarkBuilt(KeyspaceId keyspace) {
  absl::MutexLock lock(&mu_);
  auto it = keyspaces_.find(keyspace);
  if (it != keyspaces_.end()) it->second.built = true;
}

std::vector<KeyspaceId> RowPresence::Unbuilt() const {
  absl::MutexLock lock(&mu_);
  std::vector<KeyspaceId> unbuilt;
  for (const auto& [id, entry] : keyspaces_) {
    if (!entry.built) unbuilt.push_back(id);
  }
  return unbuilt;
}

bool RowPresence::MayExist(KeyspaceId keyspace, tree::Token token) const {
  absl::MutexLock lock(&mu_);
  auto it = keyspaces_.find(keyspace);
  if (it == keyspaces_.end() || !it->second.built) return true;
  return it->second.filter.MayContain(token);
}

RowPresence::Stats RowPresence::stats() const {
  absl::MutexLock lock(&mu_);
  Stats stats;
  for (const auto& [id, entry] : keyspaces_) {
    ++stats.keyspaces;
    if (entry.built) ++stats.built;
    stats.tokens += entry.filter.added();
    stats.memory_bytes += entry.filter.memory_bytes();
  }
  return stats;
}

}  // namespace internal
}  // namespace storage
}  // namespace tally
