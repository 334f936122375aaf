// The compare-and-swap token of a PostgreSQL row version.
//
// For a PostgreSQL row the index record keeps, instead of the value, which
// row version it describes: the commit timestamp and the replication origin
// of the transaction that wrote it, as
// `pg_xact_commit_timestamp_origin(xmin)` reports them. The apply changes a
// row only while the row still has the token the index holds, so an
// application write that tallyd has not captured yet is never overwritten.
// (`xmin` itself cannot serve: a row written in a savepoint carries the
// subtransaction's xid while decoding reports the top transaction's.)
//
// The commit timestamp is NULL for rows written before
// track_commit_timestamp was on, or older than the commit-timestamp
// horizon; such a token still compares (NULL matches NULL, the SQL side
// uses IS NOT DISTINCT FROM).
//
// Encoding: 11 bytes, fixed: a tag byte (0x01: with a commit timestamp;
// 0x02: without), the timestamp as a big-endian int64 of microseconds since
// 2000-01-01 00:00 UTC (PostgreSQL's timestamptz; zero without one), and the
// origin's roident as a big-endian u16 (0 = a local transaction).
//
//   RowToken t{RowToken::CommitTime(stamp_us), origin_id};
//   std::string payload = t.Encode();             // the index record keeps it
//   TALLY_ASSIGN_OR_RETURN(RowToken back, RowToken::Decode(payload));
//
// Thread-safety: a value type.
#ifndef TALLY_PG_SIDECAR_APPLY_ROW_TOKEN_H_
#define TALLY_PG_SIDECAR_APPLY_ROW_TOKEN_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pg/wire/field.h"

namespace tally {
namespace pg {

// A replication origin's id (pg_replication_origin.roident); 0 = none.
// PostgreSQL keeps origin ids in 16 bits (RepOriginId).
struct OriginId {
  uint16_t value = 0;
  friend bool operator==(OriginId a, OriginId b) { return a.value == b.value; }
  friend bool operator!=(OriginId a, OriginId b) { return !(a == b); }
};

// The origin id of a transaction that no replication origin applied.
inline constexpr OriginId kLocalOrigin{0};

struct RowToken {
  static constexpr size_t kEncodedBytes = 11;

  // Microseconds since 2000-01-01 00:00:00 UTC (PostgreSQL's timestamptz);
  // nullopt when the server has no commit timestamp for the row version.
  std::optional<int64_t> commit_time_us;
  OriginId origin;

  // The fixed-size bytes described above.
  std::string Encode() const;

  // Returns the token `bytes` encode; kDataLoss when they are not
  // kEncodedBytes long, carry an unknown tag, or carry a timestamp under
  // the "without" tag.
  static absl::StatusOr<RowToken> Decode(absl::string_view bytes);

  // Returns the token of the binary result columns of
  // `pg_xact_commit_timestamp_origin(xmin)`: `timestamp` (a timestamptz,
  // 8 bytes, or NULL) and `roident` (an oid, 4 bytes, or NULL for "no
  // commit timestamp known", as the function answers for old rows).
  // kDataLoss for bytes of another size or an roident above 65535.
  static absl::StatusOr<RowToken> FromBinary(Field timestamp, Field roident);

  // "2026-12-01T13:57:25.123456Z origin 1", "no commit time, origin 0".
  std::string DebugString() const;

  friend bool operator==(const RowToken& a, const RowToken& b) {
    return a.commit_time_us == b.commit_time_us && a.origin == b.origin;
  }
  friend bool operator!=(const RowToken& a, const RowToken& b) {
    return !(a == b);
  }
};

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_SIDECAR_APPLY_ROW_TOKEN_H_
