// Status propagation helpers for absl::Status / absl::StatusOr.
//
// Our Abseil (20220623) ships no status macros, so tally keeps these two.
//
//   TALLY_RETURN_IF_ERROR(store->Write(batch));
//   TALLY_ASSIGN_OR_RETURN(auto row, store->Get(keyspace, key));
#ifndef TALLY_TREE_STATUS_MACROS_H_
#define TALLY_TREE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TALLY_STATUS_CONCAT_INNER_(a, b) a##b
#define TALLY_STATUS_CONCAT_(a, b) TALLY_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status) and returns it from the calling function
// when it is not OK.
#define TALLY_RETURN_IF_ERROR(expr)                \
  do {                                             \
    const ::absl::Status tally_status_ = (expr);   \
    if (!tally_status_.ok()) return tally_status_; \
  } while (false)

// Evaluates `rexpr` (an absl::StatusOr<T>); on error returns its status from
// the calling function, otherwise moves the value into `lhs`.
#define TALLY_ASSIGN_OR_RETURN(lhs, rexpr) \
  TALLY_ASSIGN_OR_RETURN_IMPL_(            \
      TALLY_STATUS_CONCAT_(tally_statusor_, __LINE__), lhs, rexpr)

#define TALLY_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                 \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

#endif  // TALLY_TREE_STATUS_MACROS_H_
