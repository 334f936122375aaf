#include "tree/diff/diff_compare.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "tree/status_macros.h"

namespace tally {
namespace tree {
namespace internal {
namespace {

bool EntryLess(const RowEntry& x, const RowEntry& y) {
  if (x.token != y.token) return x.token < y.token;
  return x.key < y.key;
}

}  // namespace

void CompareChildren(const Planned& planned, const ViewResponse& answer_a,
                     const ViewResponse& answer_b, size_t slot,
                     std::vector<Pending>* next) {
  const uint64_t n = uint64_t{1} << planned.levels_ahead;
  const size_t first = next->size();
  double count_gap = 0;
  for (uint64_t j = 0; j < n; ++j) {
    const NodeDigest& da = answer_a.descendants[slot + j];
    const NodeDigest& db = answer_b.descendants[slot + j];
    if (da == db) continue;
    next->push_back(
        Pending{planned.pending.node.Descendant(planned.levels_ahead, j),
                da.count, db.count, 1});
    count_gap += std::fabs(static_cast<double>(da.count) -
                           static_cast<double>(db.count));
  }
  const size_t mismatched = next->size() - first;
  if (mismatched == 0) return;
  const double expected =
      ExpectedPerChild(planned.pending.expected, n, mismatched, count_gap);
  for (size_t i = first; i < next->size(); ++i) {
    (*next)[i].expected = expected;
  }
}

absl::Status CompareRows(const ViewResponse& answer_a,
                         const ViewResponse& answer_b,
                         const DifferenceSink& on_difference) {
  size_t pos_a = 0;
  size_t pos_b = 0;
  for (size_t r = 0; r < answer_a.entries_per_range.size(); ++r) {
    const size_t end_a = pos_a + answer_a.entries_per_range[r];
    const size_t end_b = pos_b + answer_b.entries_per_range[r];
    while (pos_a < end_a || pos_b < end_b) {
      const RowEntry* ea = pos_a < end_a ? &answer_a.entries[pos_a] : nullptr;
      const RowEntry* eb = pos_b < end_b ? &answer_b.entries[pos_b] : nullptr;
      if (ea != nullptr && (eb == nullptr || EntryLess(*ea, *eb))) {
        TALLY_RETURN_IF_ERROR(on_difference(ea, nullptr));
        ++pos_a;
      } else if (eb != nullptr && (ea == nullptr || EntryLess(*eb, *ea))) {
        TALLY_RETURN_IF_ERROR(on_difference(nullptr, eb));
        ++pos_b;
      } else {
        // Rows travel with 64-bit digest fingerprints.
        if (ea->digest.Fingerprint() != eb->digest.Fingerprint()) {
          TALLY_RETURN_IF_ERROR(on_difference(ea, eb));
        }
        ++pos_a;
        ++pos_b;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace tree
}  // namespace tally
