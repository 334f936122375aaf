// Reading the two views' answers to one exchange (tree/diff/diff_batches.h)
// side by side: which children of a descended node differ, to be examined
// next, and which rows of the listed ranges differ, to be delivered. The
// answers are in the plain form (ViewResponse) whichever way the views were
// asked (tree/diff/view_asker.h puts them in it).
//
// Pure: no view is asked here.
//
//   std::vector<Pending> next;
//   for (const auto& [planned, slot] : batch.descended) {
//     CompareChildren(*planned, answer_a, answer_b, slot, &next);
//   }
//   absl::Status s = CompareRows(answer_a, answer_b, sink);
#ifndef TALLY_TREE_DIFF_DIFF_COMPARE_H_
#define TALLY_TREE_DIFF_DIFF_COMPARE_H_

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "tree/diff/diff.h"
#include "tree/diff/diff_planner.h"
#include "tree/tree_view.h"

namespace tally {
namespace tree {
namespace internal {

// Appends to `next`, in index order, the descendants of `planned`'s node
// (2^levels_ahead of them, from `slot` in both answers' descendants) whose
// digests or counts differ, with their row counts and the differences each
// is expected to hold (ExpectedPerChild). Appends nothing when all match.
// REQUIRES: both answers hold slot + 2^planned.levels_ahead descendants
// (CheckAnswerShape).
void CompareChildren(const Planned& planned, const ViewResponse& answer_a,
                     const ViewResponse& answer_b, size_t slot,
                     std::vector<Pending>* next);

// Merges the rows of each listed range of the two answers, both in (token,
// key) order, and calls `on_difference` for every key that is on one side
// only (nullptr for the other) or whose rows' 64-bit digest fingerprints
// differ (rows travel with those only). Stops at and returns its first
// error.
// REQUIRES: both answers list the same ranges (CheckAnswerShape).
absl::Status CompareRows(const ViewResponse& answer_a,
                         const ViewResponse& answer_b,
                         const DifferenceSink& on_difference);

}  // namespace internal
}  // namespace tree
}  // namespace tally

#endif  // TALLY_TREE_DIFF_DIFF_COMPARE_H_
