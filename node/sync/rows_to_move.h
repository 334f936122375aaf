// RowsToMove: what the row counts of two replicas say, before a sync, about
// the rows it will move — a total for the progress of a bootstrap (a new or
// emptied node filled from a peer), and no total where the counts cannot
// give one.
//
// A keyspace's row count (tombstones included, as KeyspaceSummary.row_count
// and storage::KeyspaceInfo count them; the sync moves tombstones too) bounds
// the rows each side can send: a sync never moves more rows from a side
// than it has, and at least the ones the other side lacks — no fewer than
// the difference of the counts. So
//   one-way, source S to copy C:  max(0, S - C) <= rows moved <= S
//   two-way, A and B:             |A - B|       <= rows moved <= A + B
// (rows erased from a copy are not rows moved). When the lower bound is
// within 10% of the upper one — one side empty or far behind — the upper
// bound is a total a progress line can show with a percentage and a time
// left (at most 10% early); otherwise the rows to move could be anything
// from few to all, and there is no honest total.
//
// Writes while the sync runs move both bounds: the total is the rows as of
// the start.
//
//   RowsToMove bounds;
//   for (each keyspace) bounds += RowsToMove::Between(peer_rows, my_rows,
//                                                     one_way);
//   std::optional<uint64_t> total = bounds.Total();
//
// Thread-compatible: a value.
#ifndef TALLY_NODE_SYNC_ROWS_TO_MOVE_H_
#define TALLY_NODE_SYNC_ROWS_TO_MOVE_H_

#include <cstdint>
#include <optional>

namespace tally {
namespace node {

struct RowsToMove {
  uint64_t at_least = 0;
  uint64_t at_most = 0;

  // The bounds for one keyspace with `a_rows` on one side and `b_rows` on
  // the other; with `a_is_source`, a one-way sync from a to b.
  static RowsToMove Between(uint64_t a_rows, uint64_t b_rows, bool a_is_source);

  // Sums the bounds of several keyspaces synced one after the other.
  RowsToMove& operator+=(const RowsToMove& other) {
    at_least += other.at_least;
    at_most += other.at_most;
    return *this;
  }

  // at_most when at_least is at least 90% of it (0 when there is nothing
  // to move); nullopt otherwise.
  std::optional<uint64_t> Total() const;
};

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_SYNC_ROWS_TO_MOVE_H_
