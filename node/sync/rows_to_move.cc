#include "node/sync/rows_to_move.h"

namespace tally {
namespace node {

RowsToMove RowsToMove::Between(uint64_t a_rows, uint64_t b_rows,
                               bool a_is_source) {
  RowsToMove r;
  if (a_is_source) {
    r.at_least = a_rows > b_rows ? a_rows - b_rows : 0;
    r.at_most = a_rows;
  } else {
    r.at_least = a_rows > b_rows ? a_rows - b_rows : b_rows - a_rows;
    r.at_most = a_rows + b_rows;
  }
  return r;
}

std::optional<uint64_t> RowsToMove::Total() const {
  // at_least / at_most >= 0.9, in integers (counts stay far below 2^60).
  if (at_least * 10 >= at_most * 9) return at_most;
  return std::nullopt;
}

}  // namespace node
}  // namespace tally
