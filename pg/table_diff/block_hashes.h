// Block hashes: a table's rows summarised inside its database, so that two
// databases far apart compare their tables without sending their rows.
//
// Every row falls in one of 2^bits buckets by a hash of its primary key;
// per bucket the database returns the row count and the XOR of a 64-bit
// hash of each row's text form (the compared columns, in canonical order).
// Two tables' buckets that agree hold the same rows (up to a 64-bit hash
// collision); the rows of the buckets that differ are then read and
// compared exactly, as a full diff would (pg/table_diff/table_diff.h):
//
//   TALLY_ASSIGN_OR_RETURN(BlockHashes a,
//                          ReadBlockHashes(conn_a, schema_a, where, 14));
//   ... the same on b ...
//   std::vector<uint32_t> differ = DifferingBuckets(a, b);
//   std::string only = BucketCondition(schema_a, 14, differ);  // SQL
//
// The row hash is PostgreSQL's hashtextextended over the row's binary form
// (record_send of the compared columns, in canonical order, spelled in
// hex): the send forms tally's own canonical rows are made of, which no
// session setting changes, and in which a NULL and an empty string differ.
// (PostgreSQL's hash functions are not promised to agree between servers
// of different byte order or major version; there every bucket would
// differ, and the diff would read every row: slower, never wrong.) A column of
// a user type (an enum, a composite, a domain: its OID, which the binary form
// embeds, differs between databases) goes in as its text instead. The hash is a
// prune only: a bucket is skipped when its count and hash agree, and every
// other bucket's rows are compared by tally's canonical digests, so a false
// "differs" costs only a bucket read; a user-type value whose text is equal
// while its canonical form differs would be the one way (besides a 64-bit
// collision) to miss a difference.
//
// Needs PostgreSQL 14 or later (bit_xor).
#ifndef TALLY_PG_TABLE_DIFF_BLOCK_HASHES_H_
#define TALLY_PG_TABLE_DIFF_BLOCK_HASHES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "pg/schema/table_schema.h"
#include "pg/wire/connection.h"

namespace tally {
namespace pg {

struct BlockHashes {
  int bits = 0;
  // Per bucket, 2^bits of them.
  std::vector<uint64_t> counts;
  std::vector<uint64_t> hashes;
  uint64_t rows = 0;            // the sum of counts
  uint64_t bytes_received = 0;  // of the answer's values
};

// The default number of bucket bits: 2^14 buckets. At 1M rows a bucket
// holds ~61 rows, so 100 differences read ~6,100 rows; the answer is one
// value of 16 bytes a non-empty bucket (~262 kB).
inline constexpr int kDefaultBucketBits = 14;

// The buckets of `schema`'s table (the rows for which `where` holds, when
// not empty), in the connection's current transaction. kFailedPrecondition
// for a server older than PostgreSQL 14; the connection's errors.
// REQUIRES: 1 <= bits <= 20.
absl::StatusOr<BlockHashes> ReadBlockHashes(Connection& conn,
                                            const TableSchema& schema,
                                            absl::string_view where, int bits);

// The buckets whose count or hash differ, ascending.
// REQUIRES: a.bits == b.bits.
std::vector<uint32_t> DifferingBuckets(const BlockHashes& a,
                                       const BlockHashes& b);

// The SQL condition that holds for the rows of `buckets` alone.
std::string BucketCondition(const TableSchema& schema, int bits,
                            absl::Span<const uint32_t> buckets);

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_TABLE_DIFF_BLOCK_HASHES_H_
