// The commit rules: how one mutation meets the row the index holds.
//
// A pure function of the stored row's state, the mutation, the apply mode
// and the purge horizon. It reads nothing and writes nothing: the commit
// (storage/store_write.cc) asks it for a decision and then does the I/O
// the decision calls for, so every rule is here, in one place, and is
// tested as a table of cases (commit_rules_test.cc).
//
//   internal::StoredState stored = ...;       // from the index record
//   internal::IncomingRow row{IncomingRow::Kind::kPut, version, digest};
//   Decision d = internal::Decide(stored, row, mode, purged_before);
//   if (internal::Writes(d)) { ... stage the row ... }
//
// The rules, by mode:
//  - every mode but a purge: a damaged row is replaced by any write, and
//    erased by any erase, whatever the versions (the damaged copy usually
//    has the very version of the peer's good copy, which the version order
//    would refuse);
//  - kLastWriterWins: a row is written when its version is higher than the
//    stored one; an equal version with the same content is a no-op (so that
//    replays are idempotent), and an older one is refused. The tie rule: an
//    equal version with different content is written when its digest is the
//    higher (CompareRows in storage/write_request.h), so that every replica
//    keeps the same row of a tie;
//  - kSourceOverride: the source's row replaces the stored one whenever the
//    two differ (by digest), whatever their versions; an erase removes the
//    row;
//  - kPurgeTombstones: an erase removes the row only while it is still a
//    (sound) tombstone of exactly the given version;
//  - the purge horizon: a replicated tombstone older than `purged_before`
//    for a key this store does not hold is refused, since this store
//    purged its own tombstones that old and a peer that has not purged yet
//    must not bring it back;
//  - an erase of a row the store does not hold does nothing.
//
// Thread-safe: pure functions of their arguments.
#ifndef TALLY_STORAGE_INTERNAL_COMMIT_RULES_H_
#define TALLY_STORAGE_INTERNAL_COMMIT_RULES_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "storage/write_request.h"
#include "tree/digest.h"
#include "tree/version.h"

namespace tally {
namespace storage {
namespace internal {

// The row as the index holds it when the mutation meets it (the group's
// earlier mutations of the same key included).
struct StoredState {
  bool exists = false;
  // Marked damaged: its bytes do not match its digest. A damaged record
  // that cannot even be decoded has exists == false.
  bool damaged = false;
  bool deleted = false;
  // Meaningful when `exists`.
  tree::Version version;
  tree::Digest128 digest;
};

// The mutation as the rules see it, after the store gave a local write its
// version (a local write's version is always higher than the stored one:
// StampLocalWrite).
struct IncomingRow {
  enum class Kind { kPut, kDelete, kErase };
  Kind kind = Kind::kPut;
  tree::Version version;
  // False for a local write, stamped by this store: the purge horizon
  // applies only to tombstones that come from elsewhere.
  bool replicated = true;
  // The digest of the row it would write (unused for an erase).
  tree::Digest128 digest;
};

// What the commit does with one mutation.
enum class Decision {
  // Write the row (index record, leaf, change log).
  kWrite,           // the key is new here, or the version is higher
  kReplaceDamaged,  // the stored row is damaged: any write replaces it
  kOverride,        // source override: the source's row differs from ours
  kWriteTie,        // an equal version, other content, the higher digest
  // Remove the row, leaving no tombstone.
  kErase,
  // Leave the row as it is.
  kSkipNotNewer,   // the stored version is newer, or the very same row
  kSkipTieLost,    // an equal version, other content, the lower digest
  kSkipSame,       // source override: the rows are identical
  kSkipAbsent,     // an erase of a row this store does not hold
  kSkipPurged,     // a tombstone older than the purge horizon, key absent
  kSkipRewritten,  // purge: no longer that tombstone (rewritten, damaged)
};

// Decides how `row` meets `stored` under `mode`. `purged_before` is the
// raw HLC before which this store purged its tombstones (0: never).
// REQUIRES: `row.kind == kErase` only in kSourceOverride and
// kPurgeTombstones, and in kPurgeTombstones only erases (ValidateRequest).
Decision Decide(const StoredState& stored, const IncomingRow& row,
                ApplyMode mode, uint64_t purged_before);

// True for the decisions that write the row.
inline bool Writes(Decision d) {
  return d == Decision::kWrite || d == Decision::kReplaceDamaged ||
         d == Decision::kOverride || d == Decision::kWriteTie;
}
// True for the decisions that change the store (writes and erases).
inline bool Applies(Decision d) { return Writes(d) || d == Decision::kErase; }

// "write", "skip-not-newer", ...: for tests and debug output.
absl::string_view DecisionName(Decision d);

}  // namespace internal
}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_INTERNAL_COMMIT_RULES_H_
