// Naming how two tables differ, in the words of the node that holds
// `here`: DescribeSchemaDifference() compares two TableSchema::description()
// texts ("column b: integer here, bigint there"), DescribePartitionChange()
// two TableSchema::partitions() lists. Pure text functions: a node's
// schema check (node/sync/schema_check.h) uses them on descriptions a peer
// sent, without a database connection, so they live apart from
// TableSchema::Read (and the `tally` CLI, which links them, does not need
// libpq).
//
//   std::string why = DescribeSchemaDifference(mine.description(), theirs);
//   if (!why.empty()) return absl::FailedPreconditionError(why);
//
// Thread-safe: functions of their arguments.
#ifndef TALLY_PG_SCHEMA_SCHEMA_DIFFERENCE_H_
#define TALLY_PG_SCHEMA_SCHEMA_DIFFERENCE_H_

#include <string>

#include "absl/strings/string_view.h"

namespace tally {
namespace pg {

// The prefix of every PostgreSQL schema fingerprint (its format version):
// here rather than beside TableSchema, so that a node's schema check tells
// a PostgreSQL fingerprint from another backend's without libpq.
inline constexpr absl::string_view kFingerprintPrefix = "postgresql/1:";

// Names how two partitions() lists differ, in the words of the node that
// holds `here` ("partitions new here: public.ev_3; partitions truncated or
// rewritten here: public.ev_1"). Empty when they are equal.
std::string DescribePartitionChange(absl::string_view here,
                                    absl::string_view there);

// Names how two descriptions (TableSchema::description()) differ, in the
// words of the node that holds `here`: "column b: integer here, bigint
// there; column c: absent here, text there; primary key (id) here, (id, b)
// there". Empty when they are equal.
std::string DescribeSchemaDifference(absl::string_view here,
                                     absl::string_view there);

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_SCHEMA_SCHEMA_DIFFERENCE_H_
