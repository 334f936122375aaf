// What a Store::Write takes and returns: mutations, the apply mode that
// decides how they meet the stored rows, and upstream progress committed
// with them (storage/store.h).
#ifndef TALLY_STORAGE_WRITE_REQUEST_H_
#define TALLY_STORAGE_WRITE_REQUEST_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "storage/store_types.h"
#include "tree/digest.h"
#include "tree/version.h"

namespace tally {
namespace storage {

// One change to one row.
struct Mutation {
  std::string keyspace;
  std::string key;
  std::string value;  // empty for deletes
  bool deleted = false;
  // Unset for a local write (stamped at commit). Set for a replicated or
  // repaired row, which keeps its version and origin.
  std::optional<tree::Version> version;
  // Removes the row altogether, leaving no tombstone. Only with
  // ApplyMode::kSourceOverride: the source does not have the row, so the
  // copy must not have it either; or with ApplyMode::kCaptured: the backend
  // no longer holds the row and nobody is to learn of a delete (a
  // PostgreSQL table dropped, whose rows must not be deleted on the peers:
  // the index forgets them). The feed never sends an erase.
  bool erase = false;
  // ApplyMode::kCaptured only: the bytes the index record keeps for the row
  // (what RowBackend::ApplyRows would have returned for it: the backend's
  // token for its row version). Unset: the value itself, as the embedded
  // backend keeps it.
  std::optional<std::string> captured_payload;
  // Store::LoadAbsent only (Store::Write refuses it): the row enters no
  // change-log entry, so the feed never sends it. For rows every replica
  // builds the same (a sidecar's first build, with the bootstrap version),
  // which no peer needs from the feed: anti-entropy settles differences.
  bool unlogged = false;
  // ApplyMode::kCaptured only: a new write the backend committed after the
  // row the index describes (an application's change the capture found),
  // not a replay of one the index holds. It must order after the stored
  // row, whose version may be newer than its own (a peer's clock ahead of
  // the backend's commit time, or two commits in the same microsecond):
  // the store then raises its timestamp to just after the stored row's,
  // keeping its origin. Without it (or when it carries the stored row's
  // very version and digest), a captured row that is not newer than the
  // stored one is a replay and changes nothing.
  bool supersedes_stored = false;

  static Mutation Put(std::string keyspace, std::string key, std::string value);
  static Mutation Delete(std::string keyspace, std::string key);
  static Mutation Erase(std::string keyspace, std::string key);
};

// Upstream replication progress, committed together with the rows it
// applied, so that after a crash replication resumes exactly where the
// committed rows end.
struct UpstreamProgress {
  std::string upstream;  // the upstream node's name
  Epoch epoch = 0;
  Sequence sequence = 0;
};

// The order last writer wins puts rows in: by version (timestamp, then
// origin name) and, between equal versions with different content, by row
// digest, the higher one winning (the tie rule). Rows found by a first scan
// get the same bootstrap version on every replica, and a restored backup can
// bring back an old version with other content: without the rule such a tie
// stays different forever; with it every replica keeps the same row, so both
// sides of a sync converge. Returns a negative number, 0 (the same version
// and content) or a positive number as `a` orders before, with or after `b`.
int CompareRows(const tree::Version& a, const tree::Digest128& a_digest,
                const tree::Version& b, const tree::Digest128& b_digest);

// Where the backend's own stream of changes stands (for a PostgreSQL
// backend, the end LSN of the last transaction whose captured changes are
// in the store): opaque bytes the backend encodes and orders. The store
// commits it in the same WriteBatch as the request's rows and hands it back
// after a restart (Store::backend_position()), so that the backend resumes
// after exactly what the store holds.
struct BackendPosition {
  std::string bytes;  // 1..max_key_bytes bytes

  friend bool operator==(const BackendPosition& a, const BackendPosition& b) {
    return a.bytes == b.bytes;
  }
};

// How a request's mutations meet the stored rows.
enum class ApplyMode {
  // A mutation is applied only when it orders after the stored row
  // (CompareRows: a higher version, or an equal version whose digest wins
  // the tie rule); last writer wins.
  kLastWriterWins,
  // The mutations come from an authoritative source (a master whose copy
  // this is):
  // each replaces the stored row whenever the two differ, whatever their
  // versions, and `erase` mutations remove rows the source does not have.
  // Every mutation must carry a version (the source's).
  kSourceOverride,
  // Tombstone purge (PurgeTombstones): each mutation is an erase that
  // removes the row only if it is still a tombstone of exactly the given
  // version.
  kPurgeTombstones,
  // Changes the backend has already made (an application wrote its
  // database, and the backend captured the change): the store updates only
  // its index, leaves, change log and origin counts, with the version the
  // capture gives (every mutation carries one, with the origin it names),
  // and never asks the backend to apply them. Decided as last writer wins:
  // a capture stamps its versions with the backend's commit time, and marks
  // fresh changes Mutation::supersedes_stored, which the store raises past
  // the stored row when they do not order after it; a captured row without
  // the mark that is not newer is a replay, which changes nothing:
  // replaying captured changes after a crash is idempotent (with the
  // request's backend_position, committed in the same batch, the backend
  // knows where to resume).
  kCaptured,
};

struct WriteRequest {
  std::vector<Mutation> mutations;
  std::optional<UpstreamProgress> progress;
  ApplyMode mode = ApplyMode::kLastWriterWins;
  // Committed with the rows when set; of the requests one commit groups,
  // the last one's position is kept (positions must grow in request order).
  std::optional<BackendPosition> backend_position;
  // When the backend takes the rows of none of the request's keyspaces now
  // (RowBackend::TakesRows refuses each), refuse the request whole with
  // the first refusal instead of rejecting every mutation and committing
  // the progress: a feed must not move past changes that no keyspace took
  // when the cause is most likely the backend's, not a keyspace's (its
  // database not reached). With some keyspace taken, the others' mutations
  // are rejected one by one as usual.
  bool refuse_when_none_taken = false;
};

// A mutation the backend would not take, and why: its keyspace takes no
// rows now (RowBackend::TakesRows: a keyspace being built, say), or its
// database refused the row itself (RowOutcome::rejected: a type, a
// constraint, a table that is gone). The row is left as it was; the other
// mutations of the request, and its progress, are committed all the same,
// so that one keyspace in trouble never holds back the others.
struct RejectedMutation {
  size_t index = 0;  // in the request's mutations
  std::string keyspace;
  std::string key;
  absl::Status status;  // never OK
  // True for a keyspace the backend takes no rows of now (TakesRows),
  // false for a row its database refused (RowOutcome::rejected).
  bool not_taken = false;
  // True for a keyspace dropped on this node (Store::DropKeyspace); then
  // not_taken is true too.
  bool dropped = false;
};

struct WriteResult {
  // Per mutation, in order: true if applied; false if the commit rules
  // left the row as it was (the stored row orders after it, ...) or the
  // backend refused or rejected it.
  std::vector<bool> applied;
  // The mutations (indexes, ascending) the backend refused: its row had
  // changed since the store last indexed it (RowOutcome::applied). They are
  // false in `applied`, and changed nothing in the store.
  std::vector<size_t> refused;
  // The mutations (ascending by index) the backend would not take
  // (RejectedMutation). They are false in `applied`, changed nothing in the
  // store, and are not in `refused`: a refusal is the compare-and-swap
  // losing to an application's write, which is settled; a rejection is
  // trouble that lasts until its cause goes, and the row is still owed.
  std::vector<RejectedMutation> rejected;
  // The log sequence of the last entry this request wrote, or 0 if none.
  Sequence last_sequence = 0;
  // Versions given to (or kept by) each mutation, in order.
  std::vector<tree::Version> versions;
};

// OK when `result` has no rejected mutation; otherwise the first one's
// status code with a message naming how many were rejected and the first's
// keyspace, key and reason. For callers that must answer one error for a
// write (a client's Put, a repair batch); the rest of the request was
// committed all the same.
absl::Status RejectionError(const WriteResult& result);

}  // namespace storage
}  // namespace tally

#endif  // TALLY_STORAGE_WRITE_REQUEST_H_
