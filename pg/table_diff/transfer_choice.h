// Which way an ad-hoc diff of two tables should learn what differs
// (pg/table_diff/table_diff.h, Transfer): read every row here, or have each
// database hash blocks of rows first. It depends on the link to each
// database, which the tool measures before it starts.
//
//   TALLY_ASSIGN_OR_RETURN(LinkProbe pa, ProbeLink(*conn_a, "public.t"));
//   TALLY_ASSIGN_OR_RETURN(LinkProbe pb, ProbeLink(*conn_b, "public.t"));
//   TransferChoice c = ChooseTransfer(pa, pb);
//   Print("transfer: ", c.transfer == Transfer::kRows ? "rows" : "hashes",
//         " (", c.reason, ")");
//
// The estimate, per database (both sides run at once, so the slower one
// counts):
//   reading every row  ~ table bytes / the link's measured throughput, and
//                        no faster than the server's COPY
//                        (kCopyBytesPerSecond);
//   hashing            ~ table bytes / kHashBytesPerSecond (the server's
//                        own scan and hash), plus the ~262 kB answer over
//                        the link (so a small table is read whole).
// A round trip under 1 ms counts as a LAN or this host, at no less than
// 125 MB/s (a gigabit) whatever the probe measured. Hashes are chosen when they
// are estimated at least 1.5 times faster: near databases (a LAN, loopback) get
// `rows`, which costs the servers less CPU and reports the tables' roots; far
// or narrow links get `hashes`.
//
// Thread-safety: ProbeLink uses only its connection; ChooseTransfer is pure.
#ifndef TALLY_PG_TABLE_DIFF_TRANSFER_CHOICE_H_
#define TALLY_PG_TABLE_DIFF_TRANSFER_CHOICE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "pg/table_diff/table_diff.h"
#include "pg/wire/connection.h"

namespace tally {
namespace pg {

// Measured on a 2-core machine with PostgreSQL 15 (docs/benchmarks.md,
// pg-wan): one million rows of the benchmark table (86 MB by
// pg_table_size) hashed into buckets in 1.0 s, and read by binary COPY in
// about 1.0 s per side on loopback.
inline constexpr double kHashBytesPerSecond = 86e6;
inline constexpr double kCopyBytesPerSecond = 86e6;

// What ChooseTransfer weighs about one database.
struct LinkProbe {
  int server_version = 0;     // server_version_num (150004)
  uint64_t table_bytes = 0;   // pg_table_size: the heap and its TOAST
  absl::Duration round_trip;  // the fastest of three `SELECT 1`
  // An answer of 1 MiB, timed, less one round trip: a floor on the link's
  // throughput (TCP's slow start makes a far link look slower).
  double bytes_per_second = 0;
};

// Measures the link to `conn`'s server and the size of `table` there
// (about 1 MiB read, five round trips). Returns the connection's errors
// (kNotFound when the table does not exist).
// REQUIRES: no transaction open on `conn`.
absl::StatusOr<LinkProbe> ProbeLink(Connection& conn, absl::string_view table);

struct TransferChoice {
  Transfer transfer = Transfer::kRows;
  // Why, for the summary: "b 20.3 ms away at 11.9 MB/s: reading 86 MB ~7.2
  // s, hashing ~1.0 s".
  std::string reason;
};

// See the file comment. A server older than PostgreSQL 14 (no bit_xor)
// always gets kRows.
TransferChoice ChooseTransfer(const LinkProbe& a, const LinkProbe& b);

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_TABLE_DIFF_TRANSFER_CHOICE_H_
