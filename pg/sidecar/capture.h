// Capture: following a node's logical replication slot and writing every
// change applications make to the kept tables into the store's index.
//
// The stream (pgoutput protocol 1, binary) delivers whole transactions at
// their commit. For each one:
//  - a transaction whose Origin message names this node's own apply origin
//    was tally's own apply (pg/sidecar/apply/pg_backend.h): its rows are
//    indexed from its 'tally.apply' message (pg/sidecar/apply/apply_message.h)
//    with the versions it carries and its token, never as local changes. When
//    the store already committed that apply, the same version and digest change
//    nothing (no change-log entry, no echo to peers); when tallyd died between
//    the two commits, this indexes them. Rows it lists as erased (a source
//    override's) are left out (the source's next session erases them
//    again), and rows it does not list are not indexed;
//  - any other transaction gets one version, its commit time
//    (pg/sidecar/commit_stamp.h: when it was written, however late the capture
//    reads it; just after the previous transaction's when commit times go
//    backwards; this node's clock when the database's runs further ahead
//    than the store's max clock skew), with this node's name as origin —
//    each of its rows raised
//    just past the row the index holds when that one orders later
//    (storage::Mutation::supersedes_stored: a peer's clock ahead, a
//    version applied here with a later time) — and the token (commit
//    time, roident: 0 for a
//    local transaction, the origin's id for one another replication tool
//    applied). Insert and Update give the new row (an Update whose key
//    changed also a tombstone of the old key); Delete a tombstone; an
//    unchanged TOAST column ('u') is read back from the table once the
//    transaction is visible to the read (ReadBack: the server decodes a
//    transaction before other sessions see it) and indexed only when it is
//    still the version this transaction wrote (its token): a row gone or
//    changed by a later transaction is left to that one's capture, so that
//    the index never holds a token ahead of the changes it has captured
//    (the apply's compare-and-swap would then pass on a row whose later
//    change is still to come); TRUNCATE
//    gives a tombstone for every live key the index holds for the table
//    whose row version (its token) committed before the TRUNCATE, raised
//    past the stored version if need be.
// Small consecutive transactions are grouped into one store write (up to
// `max_batch_changes` mutations); a larger transaction is split over
// several writes, each with a newer version (so that a key it changes in
// two writes ends with its last value, as the tie rule would otherwise pick
// by digest), and the position records how many of its changes are stored,
// so that a replay skips exactly those. Only after a write returns OK is
// the position confirmed to the server (standby status update). When idle
// (no transaction open, everything received stored), the keepalive's WAL
// end is stored as the position and confirmed too, so that the slot
// retains no WAL under traffic the publication filters out.
//
// A Relation message whose columns or types differ from the keyspace's
// schema means DDL changed the table: Follow stores what it has and returns
// kAborted with `schema_changed()` set, and the caller rebuilds
// (pg/sidecar/bootstrap.h) after reloading the schemas.
//
//   TALLY_ASSIGN_OR_RETURN(std::unique_ptr<Capture> c,
//                          Capture::Create(options, store, position));
//   TALLY_RETURN_IF_ERROR(stream->StartReplication(slot, position.resume_lsn,
//                                                  {publication}));
//   absl::Status s = c->Follow(*stream, [&] { return stopping; });
//
// Thread-safety: Follow runs on one thread; counters() may be called from
// any thread.
#ifndef TALLY_PG_SIDECAR_CAPTURE_H_
#define TALLY_PG_SIDECAR_CAPTURE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "pg/schema/names.h"
#include "pg/schema/table_schema.h"
#include "pg/sidecar/apply/fault_points.h"
#include "pg/sidecar/apply/row_token.h"
#include "pg/sidecar/bootstrap.h"
#include "pg/sidecar/capture_position.h"
#include "pg/sidecar/commit_stamp.h"
#include "pg/wire/connection.h"
#include "pg/wire/field.h"
#include "pg/wire/pgoutput.h"
#include "pg/wire/replication_stream.h"
#include "storage/store.h"

namespace tally {
namespace pg {

struct CaptureOptions {
  // For the connection that reads rows back (unchanged TOAST) and looks up
  // origin ids.
  std::string conninfo;
  ReplicationNames names;
  std::vector<TableSchema> tables;
  std::string node_name;
  // Mutations per store write.
  size_t max_batch_changes = 10000;
  // Status updates at least this often (the server drops a silent client
  // after wal_sender_timeout, 60 s by default).
  absl::Duration status_interval = absl::Seconds(10);
  ConnectOptions connect;
  // Crash tests only: each store write of captured changes reaches
  // capture-after-index-commit before its confirmation
  // (pg/sidecar/apply/fault_points.h). Null: none.
  std::shared_ptr<FaultPoints> fault_points;
  // The store's value limit: a row longer is not indexed. Its keyspace is
  // then refused by the sidecar (on_oversize tells it) while any of its rows
  // is over, and the position records the keyspace as kRefusedTable, so
  // that a start rebuilds it and looks again.
  size_t max_value_bytes = storage::StoreOptions().max_value_bytes;
  // The rows over the limit when the capture starts (the build's).
  OversizeKeys oversize;
  // Called on Follow's thread for a row over the limit (`bytes` its size)
  // and for a key of `oversize` written within the limit or deleted
  // (`bytes` 0); `rows_over`: the keyspace's rows over the limit now.
  std::function<void(const std::string& keyspace, const std::string& key,
                     size_t bytes, size_t rows_over)>
      on_oversize;
};

struct CaptureCounters {
  uint64_t transactions_captured = 0;
  uint64_t rows_captured = 0;  // mutations written to the store
  uint64_t own_transactions_replayed = 0;
  Lsn received_lsn = kInvalidLsn;   // the server's WAL end, last reported
  Lsn confirmed_lsn = kInvalidLsn;  // stored and confirmed
  // Commit time of the last transaction indexed (µs since 2000), 0 if none.
  int64_t last_commit_time_us = 0;
  // True when everything received is stored and no transaction is open.
  bool idle = false;
};

class Capture {
 public:
  // Connects the reader and prepares the keyspaces. `start` is where the
  // stream will start (the stored position, or the build's).
  static absl::StatusOr<std::unique_ptr<Capture>> Create(
      const CaptureOptions& options, storage::Store* store,
      CapturePosition start);

  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;
  ~Capture();

  // Consumes `stream` until `stopping()` returns true (checked at least
  // every 200 ms; then OK), or an error: the stream's (kUnavailable:
  // reconnect and resume from position()), the store's, kDataLoss for a
  // malformed message, kAborted for a schema change (schema_changed()).
  // What was stored before an error stays stored and is the position.
  // REQUIRES: `stream` is streaming from position().resume_lsn.
  absl::Status Follow(ReplicationStream& stream,
                      const std::function<bool()>& stopping);

  // Makes Follow send a status update asking for a keepalive at its next
  // turn, so that an idle stream learns (and confirms) the server's WAL end
  // now rather than at the next status interval. Any thread.
  void RequestKeepalive() { keepalive_wanted_.store(true); }

  // The position of what the store holds (where to resume).
  CapturePosition position() const ABSL_LOCKS_EXCLUDED(mu_);
  CaptureCounters counters() const ABSL_LOCKS_EXCLUDED(mu_);
  // The keyspace whose Relation message differed from its schema, with how
  // ("column b: integer here, bigint there"), after Follow returned
  // kAborted.
  const std::string& schema_changed() const { return schema_changed_; }

 private:
  struct Keyspace;
  struct Relation;
  struct Transaction;
  struct RowChange;
  struct EncodedChange;
  class Batch;

  Capture(const CaptureOptions& options, storage::Store* store,
          CapturePosition start, std::unique_ptr<Connection> reader);

  absl::Status Handle(ReplicationStream& stream, const PgOutputMessage& m);
  absl::Status OnRelation(const RelationMessage& m);
  // An insert, update or delete: encoded, then kept for the commit (the
  // node's own apply, indexed from its apply message) or added to the batch
  // (an application's).
  absl::Status OnChange(const PgOutputMessage& m);
  // The tuples of an insert, update or delete; kDataLoss for another
  // message.
  static absl::StatusOr<RowChange> RowChangeOf(const PgOutputMessage& m);
  // `tuple`'s columns in the canonical order of `relation`'s keyspace;
  // an unchanged TOAST column is taken from `fallback` (the old row under
  // REPLICA IDENTITY FULL) when it has it, else `*toast` is set.
  static absl::Status TupleFields(const Relation& relation,
                                  const TupleData& tuple,
                                  const TupleData* fallback,
                                  std::vector<Field>* fields, bool* toast);
  static absl::Status EncodeChange(const Relation& relation,
                                   const RowChange& change,
                                   EncodedChange* encoded);
  // Whether `m` may go into a batch: false for a row over the value
  // limit (noted, see CaptureOptions::max_value_bytes).
  bool Admit(const storage::Mutation& m);
  void KeepOwnChange(Transaction& txn, Keyspace& ks, EncodedChange change);
  void AddLocalChange(Transaction& txn, Keyspace& ks, EncodedChange change);
  absl::Status OnTruncate(const TruncateMessage& m);
  absl::Status OnCommit(const CommitMessage& m);
  // Gives the open local transaction its version for the current batch.
  void StampVersion(Transaction& txn);
  // `stamp`, observed by the store's clock; the clock's Now() instead when
  // it is further ahead than the store accepts. Both for a transaction's
  // first stamp and for the next part of one split over store writes.
  tree::HlcTimestamp Accepted(tree::HlcTimestamp stamp);
  // Writes the pending batch; `partial`: the open transaction continues
  // after it.
  absl::Status Flush(bool partial);
  absl::Status Confirm(ReplicationStream& stream, bool reply_requested);
  absl::StatusOr<OriginId> OriginIdOf(absl::string_view name);
  // Reads the row of `key` (an unchanged TOAST value) as of a snapshot in
  // which the transaction being indexed (`xid`, its Begin message's) is
  // visible, reading again while it is not yet (decoded before visible):
  // `*value` is the row then (the transaction's or a later one's, `*token`
  // says which), nullopt when a later transaction deleted it or moved its
  // key. Returns kUnavailable when the transaction is still not visible
  // after kReadBackPatience (Follow then ends and resumes from the stored
  // position: nothing is indexed from a read that predates the
  // transaction), or the read's error.
  // Whether a read-back of a row of `txn` found the version `txn` wrote:
  // present, with `txn`'s token. Otherwise a later transaction changed or
  // deleted the row, and the row is left to that one's capture.
  static bool IsVersionOf(const Transaction& txn,
                          const std::optional<std::string>& value,
                          const RowToken& token);
  absl::Status ReadBack(const Keyspace& ks, absl::string_view key, uint32_t xid,
                        std::optional<std::string>* value, RowToken* token);
  absl::Status ReadBackOnce(const Keyspace& ks, absl::string_view key,
                            uint32_t xid, bool* visible,
                            std::optional<std::string>* value, RowToken* token);

  // How long ReadBack waits for a decoded transaction to become visible.
  static constexpr absl::Duration kReadBackPatience = absl::Seconds(30);

  // Constant after construction.
  const CaptureOptions options_;
  storage::Store* const store_;
  std::vector<std::unique_ptr<Keyspace>> keyspaces_;

  // Used by Follow's thread only.
  std::unique_ptr<Connection> reader_;
  absl::flat_hash_map<uint32_t, std::unique_ptr<Relation>> relations_;
  absl::flat_hash_map<std::string, OriginId> origin_ids_;
  std::unique_ptr<Transaction> txn_;
  std::unique_ptr<Batch> batch_;
  OversizeKeys oversize_;
  CommitStamps stamps_;
  std::string schema_changed_;
  Lsn last_sent_status_ = kInvalidLsn;
  absl::Time last_status_time_ = absl::InfinitePast();
  std::atomic<bool> keepalive_wanted_{false};

  mutable absl::Mutex mu_;
  CapturePosition position_ ABSL_GUARDED_BY(mu_);
  CaptureCounters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_SIDECAR_CAPTURE_H_
