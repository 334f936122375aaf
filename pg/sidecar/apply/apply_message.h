// The 'tally.apply' logical-decoding message: what one apply transaction
// changed, written into the same PostgreSQL transaction as the rows.
//
// The apply (pg/sidecar/apply/pg_backend.h) commits PostgreSQL first and the
// store's WriteBatch second. If tallyd dies between the two, PostgreSQL holds
// rows the index does not describe. Every apply transaction therefore also
// calls `pg_logical_emit_message(true, 'tally.apply', <these bytes>)`: the
// message is decoded at the transaction's commit, in the slot's stream, and
// the capture (which resumes from the store's position, before that
// transaction) indexes the listed rows with the versions the message
// carries instead of stamping them as local changes. When the store did
// commit, the same versions and digests change nothing: the replay is
// idempotent.
//
// Bytes (integers big-endian; RowToken is pg/sidecar/apply/row_token.h's):
//   u8  format (1)
//   u64 apply sequence (the LSN given to pg_replication_origin_xact_setup)
//   11  the RowToken every applied row version gets
//   u32 keyspace count, then per keyspace: u32 length + name
//   u32 origin count,   then per origin:   u32 length + long name
//   u32 row count, then per row: u32 keyspace index, u32 length + key,
//       u64 HLC timestamp, u32 origin index, u8 flags (bit 0: deleted,
//       bit 1: erased, no tombstone left)
// Keyspace and origin names are listed once: a batch of 10,000 rows from a
// handful of origins stays close to the size of its keys.
//
//   ApplyMessage m{sequence, token, {{"public.t", key, version, false}}};
//   std::string bytes = EncodeApplyMessage(m);
//   TALLY_ASSIGN_OR_RETURN(ApplyMessage back, DecodeApplyMessage(bytes));
//
// Thread-safety: pure functions and value types.
#ifndef TALLY_PG_SIDECAR_APPLY_APPLY_MESSAGE_H_
#define TALLY_PG_SIDECAR_APPLY_APPLY_MESSAGE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pg/sidecar/apply/row_token.h"
#include "tree/version.h"

namespace tally {
namespace pg {

// The prefix the apply emits its message under (pgoutput sends it with
// `messages 'true'`).
inline constexpr absl::string_view kApplyMessagePrefix = "tally.apply";

// One row an apply transaction changed.
struct AppliedRow {
  std::string keyspace;
  std::string key;
  tree::Version version;
  bool deleted = false;
  // The row went with no tombstone (a source override's erase). Implies
  // `deleted`.
  bool erased = false;

  friend bool operator==(const AppliedRow& a, const AppliedRow& b) {
    return a.keyspace == b.keyspace && a.key == b.key &&
           a.version == b.version && a.deleted == b.deleted &&
           a.erased == b.erased;
  }
};

struct ApplyMessage {
  uint64_t apply_sequence = 0;
  // The CAS token of every row the transaction wrote.
  RowToken token;
  std::vector<AppliedRow> rows;
};

std::string EncodeApplyMessage(const ApplyMessage& message);

// Returns the message `bytes` encode; kDataLoss when they are truncated,
// longer than the message, of another format, or index a keyspace or
// origin the message does not list.
absl::StatusOr<ApplyMessage> DecodeApplyMessage(absl::string_view bytes);

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_SIDECAR_APPLY_APPLY_MESSAGE_H_
