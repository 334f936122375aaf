// CapturePosition: where a node's capture of its PostgreSQL database stands,
// as the store keeps it (storage::BackendPosition, committed in the same
// WriteBatch as the index rows it describes).
//
// It says which cluster the index was built from (the system identifier
// IDENTIFY_SYSTEM reports: another one means a promoted standby or a
// restored backup, whose slots and positions are not ours), where to resume
// the stream (START_REPLICATION at `resume_lsn`: the end LSN of the last
// transaction wholly in the store, or the slot's consistent point after a
// build), and, while a transaction too large for one store batch is being
// indexed, how far it got: its end LSN, how many of its changes are in the
// store and the version of the last batch written, so that a replay skips
// exactly those changes; and the schema fingerprint of each keyspace's
// table as the index was built from it (pg/schema/table_schema.h), so that a
// schema change made while tallyd was stopped — one no row change
// reveals, such as `ADD COLUMN ... DEFAULT` — is noticed at the next start.
// No position stored means the index was never built.
//
//   CapturePosition p{system_id, end_lsn, std::nullopt};
//   request.backend_position = storage::BackendPosition{p.Encode()};
//   ...
//   TALLY_ASSIGN_OR_RETURN(CapturePosition back, CapturePosition::Decode(b));
//
// Bytes (big-endian): u8 format (1), u8 flags (bit 0: a partial
// transaction follows; bit 1: fingerprints follow), u64 system identifier,
// u64 resume LSN; with bit 0: u64 end LSN, u64 changes done, u64 HLC
// timestamp, u32 length + origin name; with bit 1: u32 count, then for each
// keyspace u32 length + name, u32 length + fingerprint, in name order. A
// position written before fingerprints were recorded has no bit 1.
//
// Thread-safety: a value type.
#ifndef TALLY_PG_SIDECAR_CAPTURE_POSITION_H_
#define TALLY_PG_SIDECAR_CAPTURE_POSITION_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pg/wire/lsn.h"
#include "tree/version.h"

namespace tally {
namespace pg {

struct CapturePosition {
  // A transaction of which only the first `changes_done` changes are in the
  // store (it was split over several batches).
  struct Partial {
    Lsn end_lsn = kInvalidLsn;
    // Row changes (Insert, Update, Delete, Truncate messages) counted in
    // stream order.
    uint64_t changes_done = 0;
    // The version the last batch written got; a replay's next batch gets a
    // newer one.
    tree::Version version;

    friend bool operator==(const Partial& a, const Partial& b) {
      return a.end_lsn == b.end_lsn && a.changes_done == b.changes_done &&
             a.version == b.version;
    }
  };

  uint64_t system_id = 0;
  Lsn resume_lsn = kInvalidLsn;
  std::optional<Partial> partial;
  // Keyspace name -> the fingerprint of its table when the index was built
  // (empty in a position written by a tally that did not record them).
  std::map<std::string, std::string> fingerprints;

  std::string Encode() const;

  // kDataLoss for bytes that are not an encoded position (truncated, extra
  // bytes, unknown format or flags).
  static absl::StatusOr<CapturePosition> Decode(absl::string_view bytes);

  // "system 7312... resume 0/16B3F10 (partial: 20000 changes of the
  // transaction ending 0/1A00000)", for logs and status.
  std::string DebugString() const;

  friend bool operator==(const CapturePosition& a, const CapturePosition& b) {
    return a.system_id == b.system_id && a.resume_lsn == b.resume_lsn &&
           a.partial == b.partial && a.fingerprints == b.fingerprints;
  }
};

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_SIDECAR_CAPTURE_POSITION_H_
