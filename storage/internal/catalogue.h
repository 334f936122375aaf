// Catalogue: the store's in-memory index of what it holds. Keyspaces and
// their Merkle trees, the origin table (id <-> name), the rows per origin,
// and the next ids to give out.
//
// It changes the way LevelDB's VersionSet does: a commit stages what it
// adds or changes in a CatalogueEdit (new keyspaces and origins, leaf
// deltas, new per-origin counts) while it builds its batch, and the edit
// is installed only once the batch is durable, so that readers never see a
// keyspace, an origin or a tree state that a crash could take back.
//
//   CatalogueEdit edit = catalogue.StartEdit();
//   KeyspaceId id = edit.AddKeyspace("users", 16);   // and its 'K' record
//   edit.leaf_deltas.push_back({id, leaf, delta, +1});
//   ... write the batch, durably ...
//   catalogue.Install(edit);
//
// A Keyspace (name, id, depth) never changes once installed, and is never
// freed: a `const Keyspace*` from Find() stays valid for the life of the
// catalogue, without the lock. A dropped keyspace (Drop) leaves the name
// and id maps, so that Find() no longer gives it, but its entry is kept
// (retired), so that a tree view or session still holding it reads an
// empty tree rather than freed memory. Its name is then listed as dropped
// until Undrop(); its id is never given out again. Trees are not in
// Keyspace: they are reached only under the catalogue's lock, through
// ReadTree().
//
// Thread-safe. Install() and the Recover*() methods must not run
// concurrently with each other (the store calls them under its commit lock,
// or at open); reads may run at any time.
#ifndef TALLY_STORAGE_INTERNAL_CATALOGUE_H_
#define TALLY_STORAGE_INTERNAL_CATALOGUE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "storage/internal/ids.h"
#include "storage/store_types.h"
#include "tree/digest.h"
#include "tree/merkle_tree.h"

namespace tally {
namespace storage {
namespace internal {

// The constant description of a keyspace.
struct Keyspace {
  std::string name;
  KeyspaceId id;
  int depth = 0;
};

// What one commit changes in the catalogue, staged while the commit is
// built and installed (Catalogue::Install) once it is durable. Built by
// one thread.
struct CatalogueEdit {
  struct NewKeyspace {
    KeyspaceId id;
    int depth;
  };
  // A change to one leaf of a tree: `digest` is XORed in, `count` added.
  struct LeafDelta {
    KeyspaceId keyspace;
    uint32_t leaf;
    tree::Digest128 digest;
    int64_t count;
  };

  // Gives `name` the next keyspace id. REQUIRES: `name` is neither in the
  // catalogue nor in this edit.
  KeyspaceId AddKeyspace(const std::string& name, int depth);
  // Gives `name` the next origin id. REQUIRES: `name` is neither in the
  // catalogue nor in this edit.
  OriginId AddOrigin(const std::string& name);
  // The name of an origin this edit adds; empty if it adds none with `id`.
  std::string NewOriginName(OriginId id) const;
  // True when `id` was given out by this edit.
  bool IsNewOrigin(OriginId id) const { return !(id < first_new_origin_id); }

  KeyspaceId next_keyspace_id;
  OriginId next_origin_id;
  // The first origin id this edit may give out.
  OriginId first_new_origin_id;
  std::map<std::string, NewKeyspace, std::less<>> new_keyspaces;
  std::map<std::string, OriginId, std::less<>> new_origins;
  std::vector<LeafDelta> leaf_deltas;
  // The rows per origin after the commit, for the origins it changes (0:
  // the origin holds no row any more). A commit touches few origins.
  absl::InlinedVector<std::pair<OriginId, uint64_t>, 4> origin_rows;
};

// The kNotFound error for a keyspace this store does not hold.
inline absl::Status KeyspaceNotFound(absl::string_view name) {
  return absl::NotFoundError(
      absl::StrFormat("keyspace '%s' does not exist", name));
}

class Catalogue {
 public:
  Catalogue() = default;
  Catalogue(const Catalogue&) = delete;
  Catalogue& operator=(const Catalogue&) = delete;

  // ------------------------------------------------ recovery, at open
  // Called before the store serves anything, in any order.
  void RecoverNextIds(KeyspaceId next_keyspace_id, OriginId next_origin_id)
      ABSL_LOCKS_EXCLUDED(mu_);
  void RecoverOrigin(OriginId id, std::string name) ABSL_LOCKS_EXCLUDED(mu_);
  // REQUIRES: tree.depth() == keyspace.depth; name and id are new.
  void RecoverKeyspace(Keyspace keyspace, tree::MerkleTree tree)
      ABSL_LOCKS_EXCLUDED(mu_);
  void RecoverOriginRows(absl::flat_hash_map<OriginId, uint64_t> rows)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A keyspace dropped before the store was opened. REQUIRES: no keyspace
  // of that name or id is installed.
  void RecoverDropped(std::string name, KeyspaceId former_id,
                      int64_t dropped_unix_ms) ABSL_LOCKS_EXCLUDED(mu_);
  // The name a dropped keyspace's id had (kept after an undone drop).
  void RecoverRetiredId(KeyspaceId id, std::string name)
      ABSL_LOCKS_EXCLUDED(mu_);

  // ------------------------------------------------ dropping
  // Retires the installed keyspace `name` (its drop record is durable):
  // Find() no longer gives it, writers are refused it (IsDropped). Its
  // tree is emptied. REQUIRES: `name` is installed.
  void Drop(absl::string_view name, int64_t dropped_unix_ms)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets that `name` was dropped (its drop record is removed): it may
  // be created again, under a new id.
  void Undrop(absl::string_view name) ABSL_LOCKS_EXCLUDED(mu_);

  // ------------------------------------------------ commits
  // An empty edit that gives out ids after the ones in use.
  CatalogueEdit StartEdit() const ABSL_LOCKS_EXCLUDED(mu_);
  // Applies a committed edit: its keyspaces and origins become visible,
  // its leaf deltas are applied to the trees (counting, per keyspace,
  // whether the root changed), its per-origin counts replace the old.
  // REQUIRES: `edit` came from StartEdit() and no other edit was
  // installed since; its batch is durable.
  void Install(const CatalogueEdit& edit) ABSL_LOCKS_EXCLUDED(mu_);
  // Sets leaves of `keyspace` to the given states (a scrub's corrections);
  // returns how many differed from their state before.
  size_t SetLeaves(
      const Keyspace& keyspace,
      absl::Span<const std::pair<uint64_t, tree::NodeState>> leaves)
      ABSL_LOCKS_EXCLUDED(mu_);

  // ------------------------------------------------ reads
  // nullptr when the keyspace does not exist.
  const Keyspace* Find(absl::string_view name) const ABSL_LOCKS_EXCLUDED(mu_);
  const Keyspace* Find(KeyspaceId id) const ABSL_LOCKS_EXCLUDED(mu_);
  size_t keyspace_count() const ABSL_LOCKS_EXCLUDED(mu_);
  // kNotFound naming the keyspace when it does not exist.
  absl::StatusOr<KeyspaceInfo> GetKeyspace(absl::string_view name) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Every keyspace, by name.
  std::vector<KeyspaceInfo> ListKeyspaces() const ABSL_LOCKS_EXCLUDED(mu_);
  // True when `name` was dropped (and not undone).
  bool IsDropped(absl::string_view name) const ABSL_LOCKS_EXCLUDED(mu_);
  // The dropped keyspaces, by name.
  std::vector<DroppedKeyspaceInfo> ListDropped() const ABSL_LOCKS_EXCLUDED(mu_);
  // The name a dropped keyspace's id had (dropped then, whatever became of
  // the name since); empty when `id` is not one.
  std::string DroppedName(KeyspaceId id) const ABSL_LOCKS_EXCLUDED(mu_);

  // Calls `fn(tree)` with the tree of `keyspace` under the lock and
  // returns what it returns. `fn` must be quick and must not call the
  // catalogue.
  template <typename Fn>
  auto ReadTree(const Keyspace& keyspace, Fn fn) const
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return fn(TreeOf(keyspace.id));
  }
  // The states of `leaves`, in order, read at one moment.
  std::vector<tree::NodeState> LeafStates(
      absl::Span<const LeafRef> leaves) const ABSL_LOCKS_EXCLUDED(mu_);
  // A copy of every tree with its keyspace, by keyspace name, read at one
  // moment (48 bytes per node: large trees copy slowly).
  std::vector<std::pair<const Keyspace*, tree::MerkleTree>> CopyTrees() const
      ABSL_LOCKS_EXCLUDED(mu_);

  // The name of an origin; empty when the origin table lacks `id`.
  std::string OriginName(OriginId id) const ABSL_LOCKS_EXCLUDED(mu_);
  std::optional<OriginId> FindOrigin(absl::string_view name) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The rows whose version `id` wrote (0 if none).
  uint64_t origin_rows(OriginId id) const ABSL_LOCKS_EXCLUDED(mu_);
  // Every origin that holds rows, with its count.
  absl::flat_hash_map<OriginId, uint64_t> AllOriginRows() const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The same, by origin name ("#id" for an id the table lacks), sorted by
  // name.
  std::vector<OriginRowCount> OriginRowCounts() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // A keyspace with its tree. Owned by keyspaces_; never deleted.
  struct Entry {
    Keyspace keyspace;
    tree::MerkleTree tree;
    // Commits that changed the root since the store opened.
    uint64_t root_changes = 0;
  };

  // The entry of an installed keyspace id.
  Entry& EntryOf(KeyspaceId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const tree::MerkleTree& TreeOf(KeyspaceId id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddEntry(Keyspace keyspace, tree::MerkleTree tree)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static KeyspaceInfo InfoOf(const Entry& e);

  mutable absl::Mutex mu_;
  // The trees are reachable only through these two maps, so only under
  // mu_; the Keyspace in an entry never changes once added.
  std::map<std::string, std::unique_ptr<Entry>, std::less<>> keyspaces_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<KeyspaceId, Entry*> keyspaces_by_id_ ABSL_GUARDED_BY(mu_);
  // Entries of keyspaces dropped while the store was open, kept for the
  // pointers still held to them (never freed); by id for TreeOf().
  std::vector<std::unique_ptr<Entry>> retired_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<KeyspaceId, Entry*> retired_by_id_ ABSL_GUARDED_BY(mu_);
  // Dropped names, with the id each had and when it was dropped.
  struct Dropped {
    KeyspaceId id;
    int64_t dropped_unix_ms = 0;
  };
  std::map<std::string, Dropped, std::less<>> dropped_ ABSL_GUARDED_BY(mu_);
  // Every id a dropped keyspace had, with its name.
  absl::flat_hash_map<KeyspaceId, std::string> retired_names_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, OriginId> origin_ids_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<OriginId, std::string> origin_names_ ABSL_GUARDED_BY(mu_);
  // Rows per origin, as the 'Q' records hold them (zero counts absent).
  absl::flat_hash_map<OriginId, uint64_t> origin_rows_ ABSL_GUARDED_BY(mu_);
  KeyspaceId next_keyspace_id_ ABSL_GUARDED_BY(mu_) = KeyspaceId(1);
  // Origin 1 is this node's own (kLocalOriginId).
  OriginId next_origin_id_ ABSL_GUARDED_BY(mu_) = OriginId(2);
};

}  // namespace internal
}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_INTERNAL_CATALOGUE_H_
