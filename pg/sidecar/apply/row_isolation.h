// Row isolation: finding, among a group of rows one statement applies, the
// rows the database refuses, so that the others are applied all the same.
//
// The apply (pg/sidecar/apply/pg_backend.h) writes a table's rows with one
// statement in a SAVEPOINT. When the statement fails, the savepoint is rolled
// back and the error classified (ClassifyApplyError):
//   kRows   a row's value broke a rule (a CHECK, NOT NULL, a unique index
//           other than the key, a value out of range, a trigger's RAISE):
//           the group is halved and each half tried again, down to the
//           single rows that fail, which are rejected with the error;
//   kAll    the table itself refuses (it is gone, a column is of another
//           type, a privilege is missing): every row of the group is
//           rejected with the error, with no bisection;
//   kBusy   the statement waited for a lock past the apply's lock_timeout
//           or was chosen as a deadlock's victim: the rows are tried again
//           later, in another transaction;
//   kFatal  the connection is gone: the whole apply fails.
// Bisection is bounded: past `max_attempts` statements, a failing group is
// rejected whole with its error instead of being halved again (a table
// whose every row fails costs about 2 * max_attempts statements, not two
// per row).
//
//   IsolationOutcome o = IsolateRows(rows, 64, attempt, classify);
//   for (auto& [row, why] : o.rejected) ...;  // refused, with the reason
//   for (uint32_t row : o.busy) ...;          // try again later
//
// Thread-safety: a pure function of its arguments.
#ifndef TALLY_PG_SIDECAR_APPLY_ROW_ISOLATION_H_
#define TALLY_PG_SIDECAR_APPLY_ROW_ISOLATION_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tally {
namespace pg {

enum class AttemptFailure { kRows, kAll, kBusy, kFatal };

// The SQLSTATE a Status from pg/wire/connection.h carries in its message
// ("... [SQLSTATE 23514]"), or "" when it carries none.
absl::string_view SqlStateOf(const absl::Status& status);

// How the apply treats the failure `status` of a statement (see the header
// comment). `connection_healthy`: whether the connection still is; a
// failure on a broken one is kFatal whatever its SQLSTATE.
AttemptFailure ClassifyApplyError(const absl::Status& status,
                                  bool connection_healthy);

struct IsolationOutcome {
  // The rows refused, each with the error of the statement that showed it
  // (a group rejected whole gives each of its rows the group's error).
  std::vector<std::pair<uint32_t, absl::Status>> rejected;
  // The rows of groups that failed kBusy: not tried to the end.
  std::vector<uint32_t> busy;
  // Not OK when an attempt failed kFatal: the outcome is then incomplete
  // and the caller gives up the transaction.
  absl::Status fatal;
  // The statements tried.
  int attempts = 0;
};

// Tries `rows` with `attempt` (which applies the group given, keeping what
// it applied when it returns OK, nothing when it fails), and on failure
// proceeds as `classify` says, halving kRows groups while fewer than
// `max_attempts` attempts were made. Groups are tried in the order of
// `rows`, the first half first.
// REQUIRES: max_attempts >= 1.
IsolationOutcome IsolateRows(
    absl::Span<const uint32_t> rows, int max_attempts,
    absl::FunctionRef<absl::Status(absl::Span<const uint32_t>)> attempt,
    absl::FunctionRef<AttemptFailure(const absl::Status&)> classify);

}  // namespace pg
}  // namespace tally

#endif  // TALLY_PG_SIDECAR_APPLY_ROW_ISOLATION_H_
