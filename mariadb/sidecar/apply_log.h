// ApplyLog: the record of one MariaDB apply transaction — the rows it
// changed and the versions the index gives them — written into a small
// table in the same transaction as the rows.
//
// The apply (mariadb/sidecar/mariadb_backend.h) commits MariaDB first and
// the store's WriteBatch second. If tallyd dies between the two, the tables
// hold rows the index does not describe. Each apply transaction therefore
// also writes its list into `tally`.`apply_log` (one row per node, replaced
// by every transaction: the binary log keeps each transaction's list in
// that row's after image, so the table itself stays one row per node). A
// capture that resumes from the store's position, before that transaction,
// reads the list in the transaction's binlog events (marked with the apply's
// server_id) and indexes the listed rows with the versions listed instead of
// stamping them as local changes; when the store did commit, the same
// versions change nothing.
//
// Bytes (u64 big-endian; var = LEB128 varint, 7 bits a byte, low first):
//   u8  format (1)
//   u64 sequence (increasing per node; informative)
//   var keyspace count, then per keyspace: var length + name
//   var origin count,   then per origin:   var length + long name
//   var row count, then per row: var keyspace index, var length + key,
//       u64 HLC timestamp, var origin index, u8 flags (bit 0: deleted,
//       bit 1: erased, no tombstone left)
// Names are listed once and the integers are short, so a row costs its key
// and 12 bytes (24 for a bigint key): the binary log carries the record
// about three times (the statement's text, and the before and after images
// of the node's row).
//
//   ApplyLog log{7, {{"db1.t", key, version, false, false}}};
//   std::string bytes = EncodeApplyLog(log);
//   TALLY_ASSIGN_OR_RETURN(ApplyLog back, DecodeApplyLog(bytes));
//
// Thread-safety: pure functions and value types.
#ifndef TALLY_MARIADB_SIDECAR_APPLY_LOG_H_
#define TALLY_MARIADB_SIDECAR_APPLY_LOG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tree/version.h"

namespace tally {
namespace mariadb {

// The schema and table the apply log lives in.
inline constexpr absl::string_view kApplyLogSchema = "tally";
inline constexpr absl::string_view kApplyLogTable = "apply_log";

// One row an apply transaction changed.
struct AppliedRow {
  std::string keyspace;
  std::string key;
  tree::Version version;
  bool deleted = false;
  // The row went with no tombstone. Implies `deleted`.
  bool erased = false;
};

struct ApplyLog {
  uint64_t sequence = 0;
  std::vector<AppliedRow> rows;
};

std::string EncodeApplyLog(const ApplyLog& log);

// Returns kDataLoss for bytes EncodeApplyLog did not write.
absl::StatusOr<ApplyLog> DecodeApplyLog(absl::string_view bytes);

}  // namespace mariadb
}  // namespace tally

#endif  // TALLY_MARIADB_SIDECAR_APPLY_LOG_H_
