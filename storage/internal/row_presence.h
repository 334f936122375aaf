// RowPresence: which rows may exist, per keyspace, so that a write can skip
// the last-writer-wins read of a row that cannot exist (a new key, a
// bootstrap into an empty node, a feed of inserts).
//
// Each keyspace has a TokenFilter (internal/token_filter.h) of the tokens
// of its rows. A keyspace the store creates starts empty and is exact from
// its first row; a keyspace that exists when the store opens answers "may
// exist" for every token until its filter has been built from its rows,
// which happens in the background (StoreImpl's builder) so that opening a
// large store does not wait for it.
//
// The rule that keeps it correct: the store adds a row's token before the
// batch that writes the row reaches LevelDB, and the builder adds the
// tokens of every row of a snapshot taken after it was told the keyspace
// exists. A row is then either in the builder's snapshot or written after
// the filter existed, and its token is in the filter either way. Rows are
// never removed from a filter (an erased key's token stays): that costs a
// read, never a wrong answer.
//
//   RowPresence presence;
//   presence.AddExisting(ks, rows);            // at open: not built yet
//   ... builder: presence.Add(ks, tokens of a snapshot); MarkBuilt(ks) ...
//   presence.AddNew(new_ks);                   // created now: built
//   presence.Add(ks, {token});                 // before the write
//   if (!presence.MayExist(ks, token)) ... no read ...
//
// Thread-safe.
#ifndef TALLY_STORAGE_INTERNAL_ROW_PRESENCE_H_
#define TALLY_STORAGE_INTERNAL_ROW_PRESENCE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "storage/internal/ids.h"
#include "storage/internal/token_filter.h"
#include "tree/token.h"

namespace tally {
namespace storage {
namespace internal {

class RowPresence {
 public:
  RowPresence() = default;
  RowPresence(const RowPresence&) = delete;
  RowPresence& operator=(const RowPresence&) = delete;

  // A keyspace that holds rows already (about `rows`): every token may
  // exist until MarkBuilt. No effect if the keyspace is known.
  void AddExisting(KeyspaceId keyspace, uint64_t rows) ABSL_LOCKS_EXCLUDED(mu_);
  // A keyspace with no rows yet: its filter is exact from now on. No
  // effect if the keyspace is known.
  void AddNew(KeyspaceId keyspace) ABSL_LOCKS_EXCLUDED(mu_);
  // Adds the tokens of rows of `keyspace` (known: AddExisting or AddNew).
  void Add(KeyspaceId keyspace, absl::Span<const tree::Token> tokens)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The filter of `keyspace` holds every row of the builder's snapshot.
  void MarkBuilt(KeyspaceId keyspace) ABSL_LOCKS_EXCLUDED(mu_);

  // The keyspaces still to be built (AddExisting without MarkBuilt).
  std::vector<KeyspaceId> Unbuilt() const ABSL_LOCKS_EXCLUDED(mu_);

  // False only if `keyspace` is built and no row of it has `token`. True
  // for a keyspace not known.
  bool MayExist(KeyspaceId keyspace, tree::Token token) const
      ABSL_LOCKS_EXCLUDED(mu_);

  struct Stats {
    int keyspaces = 0;
    int built = 0;
    uint64_t tokens = 0;
    size_t memory_bytes = 0;
  };
  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    explicit Entry(uint64_t expected) : filter(expected) {}
    TokenFilter filter;
    bool built = false;
  };
  mutable absl::Mutex mu_;
  absl::flat_hash_map<KeyspaceId, Entry> keyspaces_ ABSL_GUARDED_BY(mu_);
};

}  // namespace internal
}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_INTERNAL_ROW_PRESENCE_H_
