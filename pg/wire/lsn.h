// Log sequence numbers: positions in PostgreSQL's write-ahead log.
//
// An LSN is a 64-bit byte position; PostgreSQL prints it as two hex halves,
// "16/B374D848". tally keeps LSNs as integers (they order as the WAL does)
// and converts at the SQL and log boundaries only.
//
//   absl::StatusOr<Lsn> lsn = ParseLsn("16/B374D848");
//   FormatLsn(*lsn) == "16/B374D848"
#ifndef TALLY_PG_WIRE_LSN_H_
#define TALLY_PG_WIRE_LSN_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tally {
namespace pg {

using Lsn = uint64_t;

// The LSN PostgreSQL calls InvalidXLogRecPtr ("0/0"): no position.
inline constexpr Lsn kInvalidLsn = 0;

// Parses "X/Y" (each half 1..8 hex digits, either case). kInvalidArgument
// for anything else, naming the text.
absl::StatusOr<Lsn> ParseLsn(absl::string_view text);

// "X/Y" in upper-case hex, as PostgreSQL prints it.
std::string FormatLsn(Lsn lsn);

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_WIRE_LSN_H_
