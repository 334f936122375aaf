// What `tally diff URL URL` and `tally repair URL URL` print, whichever
// engines hold the tables (tools/cli/pg/pg_diff.h for two PostgreSQL
// tables, tools/cli/pg/sql_diff.h with a MariaDB side): the table pairs
// they compare, one line per differing key, a repair's plan and its result.
// One place, so that the two paths print alike.
//
//   TALLY_ASSIGN_OR_RETURN(std::vector<TablePair> pairs,
//                          PairTables(options.tables, in_a, in_b, list_all));
//   PrintDifference(json, "public.t", "42", true, false);   // 42  only in a
//
// Thread-compatible: writes to std::cout.
#ifndef TALLY_TOOLS_CLI_PG_DIFF_OUTPUT_H_
#define TALLY_TOOLS_CLI_PG_DIFF_OUTPUT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace tally {
namespace cli {

// A table of database a and the table of database b it is compared with.
using TablePair = std::pair<std::string, std::string>;

// The pairs to compare: `named` (--table: the same names on both sides),
// or the table= lists of the two URLs (paired in order when both give
// some, the same names on both sides when one does), or, with no table
// named anywhere, what `list_all` finds. kInvalidArgument for --table
// beside table=, or two lists of different lengths.
absl::StatusOr<std::vector<TablePair>> PairTables(
    const std::vector<std::string>& named, const std::vector<std::string>& in_a,
    const std::vector<std::string>& in_b,
    const std::function<absl::StatusOr<std::vector<TablePair>>()>& list_all);

// "differs", "only in a", "only in b".
const char* DifferenceKind(bool in_a, bool in_b);

// One differing key: `KEY  only in a` (C-escaped), or a JSON line
// {"table":..., "key":..., "a":..., "b":...}.
void PrintDifference(bool json, const std::string& table,
                     const std::string& key_text, bool in_a, bool in_b);

// A repair's plan for one key (dry run): `would upsert KEY into b`.
void PrintWouldRepair(bool json, const std::string& table,
                      const std::string& key_text, bool upsert,
                      const std::string& target);

// After a dry run's lines: what it would do, nothing changed.
void PrintDryRunSummary(bool json, const std::string& table,
                        const std::string& source, const std::string& target,
                        uint64_t would_upsert, uint64_t would_delete);

// After a repair: the keys that still differ when read again (one line
// each), and the counts.
void PrintRepairSummary(bool json, const std::string& table,
                        const std::string& source, const std::string& target,
                        uint64_t upserted, uint64_t deleted, uint64_t checked,
                        const std::vector<std::string>& still_different);

// "1.2 MB", "830 B".
std::string ByteCount(uint64_t n);

}  // namespace cli
}  // namespace tally

#endif  // TALLY_TOOLS_CLI_PG_DIFF_OUTPUT_H_
