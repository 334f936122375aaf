// A parser for the messages of PostgreSQL's pgoutput logical decoding
// plugin, protocol version 1, as they arrive in the payload of each
// XLogData message of a logical replication stream started with
// `proto_version '1', binary 'true', messages 'true'`.
//
//   absl::StatusOr<PgOutputMessage> m = ParsePgOutputMessage(xlog.payload);
//   if (!m.ok()) return m.status();
//   if (const auto* insert = std::get_if<InsertMessage>(&*m)) { ... }
//
// One XLogData payload holds exactly one pgoutput message. A transaction
// arrives as Begin, then optionally Origin (when it was applied under a
// replication origin), Relation and Type messages for tables and types the
// stream has not described yet (or whose definition changed), the row
// changes, and Commit. Logical decoding messages with the transactional flag
// arrive inside a transaction, others on their own.
//
// Ownership: per-row data (tuple column values, the origin name, a
// logical message's prefix and content) are views into the parsed payload,
// valid only while it is. Relation and Type messages, which a consumer
// caches by relid/oid for the rest of the stream, own their strings.
//
// Errors: the payload comes from another process and is checked field by
// field. A truncated or malformed message gives kDataLoss naming the message,
// the field and the offset; a message type that protocol version 1 never
// sends (streaming, two-phase) gives kUnimplemented. Never a crash.
//
// Thread-safe: pure functions.
#ifndef TALLY_PG_WIRE_PGOUTPUT_H_
#define TALLY_PG_WIRE_PGOUTPUT_H_

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tally {
namespace pg {

// 'B': the start of a transaction (sent at its commit: proto 1 decodes a
// transaction only once it has committed).
struct BeginMessage {
  uint64_t final_lsn = 0;  // the LSN of the commit record
  // µs since 2000-01-01 UTC (FromPgTimestamp in replication_messages.h).
  int64_t commit_time_us = 0;
  uint32_t xid = 0;
};

// 'C': the end of a transaction. Confirming `end_lsn` tells the server the
// transaction is never needed again.
struct CommitMessage {
  uint8_t flags = 0;  // unused by PostgreSQL 15 (0)
  uint64_t commit_lsn = 0;
  uint64_t end_lsn = 0;
  int64_t commit_time_us = 0;
};

// 'O': the transaction was applied under a replication origin; `name` is
// the origin's name (view into the payload).
struct OriginMessage {
  uint64_t origin_lsn = 0;  // the commit LSN on the origin server
  absl::string_view name;
};

// pg_class.relreplident: which old values UPDATE and DELETE carry.
enum class ReplicaIdentity : char {
  kDefault = 'd',  // the primary key
  kNothing = 'n',
  kFull = 'f',   // every column
  kIndex = 'i',  // the columns of a chosen unique index
};

struct RelationColumn {
  bool key = false;  // part of the replica identity
  std::string name;
  uint32_t type_oid = 0;
  int32_t type_modifier = -1;  // atttypmod; -1 when the type has none
};

// 'R': the definition of a published table, sent before the first change
// of the table in a stream and again after its definition changed (DDL
// itself is not decoded). Generated columns are not listed.
struct RelationMessage {
  uint32_t relid = 0;
  std::string schema;  // empty for pg_catalog
  std::string table;
  ReplicaIdentity replica_identity = ReplicaIdentity::kDefault;
  std::vector<RelationColumn> columns;
};

// 'Y': a non-built-in data type used by a column of a following Relation.
struct TypeMessage {
  uint32_t oid = 0;
  std::string schema;  // empty for pg_catalog
  std::string name;
};

// How one column of a tuple is sent.
enum class TupleColumnKind : char {
  kNull = 'n',
  // The value is TOASTed and did not change: the server does not send it.
  kUnchangedToast = 'u',
  kText = 't',    // `value` is the type's text output
  kBinary = 'b',  // `value` is the type's binary send() output
};

struct TupleColumn {
  TupleColumnKind kind = TupleColumnKind::kNull;
  absl::string_view value;  // empty unless kText or kBinary
};

// The columns of one row in the order of the table's Relation message.
using TupleData = std::vector<TupleColumn>;

// 'I'.
struct InsertMessage {
  uint32_t relid = 0;
  TupleData new_tuple;
};

// Which old tuple an UPDATE or DELETE carries.
enum class OldTuple : char {
  kNone = 0,    // UPDATE only: the key did not change (identity DEFAULT/INDEX)
  kKey = 'K',   // the replica identity columns; the others are null
  kFull = 'O',  // every column (REPLICA IDENTITY FULL)
};

// 'U'. With REPLICA IDENTITY DEFAULT, `old_tuple` is present ('K') only when
// the key changed.
struct UpdateMessage {
  uint32_t relid = 0;
  OldTuple old_kind = OldTuple::kNone;
  TupleData old_tuple;  // empty when old_kind is kNone
  TupleData new_tuple;
};

// 'D'. `old_kind` is kKey or kFull.
struct DeleteMessage {
  uint32_t relid = 0;
  OldTuple old_kind = OldTuple::kKey;
  TupleData old_tuple;
};

// 'T': one TRUNCATE statement, over every relation it emptied.
struct TruncateMessage {
  static constexpr uint8_t kCascade = 1;
  static constexpr uint8_t kRestartIdentity = 2;

  uint8_t options = 0;  // kCascade | kRestartIdentity
  std::vector<uint32_t> relids;

  bool cascade() const { return (options & kCascade) != 0; }
  bool restart_identity() const { return (options & kRestartIdentity) != 0; }
};

// 'M': a message written by pg_logical_emit_message(). Transactional
// messages arrive inside their transaction, others as soon as decoded.
struct LogicalMessage {
  bool transactional = false;
  uint64_t lsn = 0;
  absl::string_view prefix;
  absl::string_view content;  // may hold any bytes
};

using PgOutputMessage =
    std::variant<BeginMessage, CommitMessage, OriginMessage, RelationMessage,
                 TypeMessage, InsertMessage, UpdateMessage, DeleteMessage,
                 TruncateMessage, LogicalMessage>;

// Parses one pgoutput protocol version 1 message (the whole payload of one
// XLogData message). Views in the result point into `payload`.
// Returns kDataLoss when the payload is empty, truncated, has bytes after the
// message or a field out of range (an unknown tuple column kind, a negative
// length or count, an unknown replica identity), and kUnimplemented for a
// message type of a later protocol version.
absl::StatusOr<PgOutputMessage> ParsePgOutputMessage(absl::string_view payload);

// The message's type as pgoutput names it ("Begin", "Insert", ...), for logs.
absl::string_view PgOutputMessageName(const PgOutputMessage& message);

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_WIRE_PGOUTPUT_H_
