// The exchanges of one diff round: the planner's decisions
// (tree/diff/diff_planner.h) laid out as requests within the per-exchange
// limits of tree/tree_view.h, and the shape an answer must have before it
// is compared. The exchanges of a round do not depend on one another, so a
// remote view may pipeline them, and a round costs one round trip of
// latency however many it holds.
//
// Pure: no view is asked here.
//
//   RoundRequests round = PackRound(plan, options.dense_fraction);
//   // round.scan_a, round.scan_b: streamed; round.batches: exchanged.
//
// Thread-compatible: values.
#ifndef TALLY_TREE_DIFF_DIFF_BATCHES_H_
#define TALLY_TREE_DIFF_DIFF_BATCHES_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "tree/diff/diff_planner.h"
#include "tree/token.h"
#include "tree/tree_view.h"

namespace tally {
namespace tree {
namespace internal {

// One Exchange to each view: the request and where each planned descend's
// children sit in the answer.
struct Batch {
  ViewRequest request;
  uint64_t descendants = 0;  // the descendants `request` asks for
  uint64_t listed_rows = 0;  // the larger side's rows of its listed ranges
  // Each planned descend and the index of its first child in the answer's
  // descendants.
  std::vector<std::pair<const Planned*, size_t>> descended;
  std::vector<const Planned*> listed;  // in the order of request.list
};

// A round, as the views are asked it.
struct RoundRequests {
  // Ranges empty on the other side, streamed from view a and from view b:
  // they need no comparison.
  std::vector<NodeRef> scan_a;
  std::vector<NodeRef> scan_b;
  // The descents and listings, as exchanges sent to both views.
  std::vector<Batch> batches;
};

// Lays out `plan` as the requests of one round. A batch holds at most
// kMaxDescendantsPerExchange descendants, kMaxListRangesPerExchange ranges
// and half of kMaxEntriesPerExchange rows (counts may have moved since they
// were read); a new one is started when the next step would not fit. When
// the descents of one level with the same levels_ahead name at least
// `dense_fraction` of that level's nodes, the whole level below is fetched
// by one request from the root instead of naming each node. Descents come
// first, whole levels then named nodes, both by (level, levels_ahead) and in
// plan order within; then listings in plan order. The batches point into
// `plan`, which must outlive them.
RoundRequests PackRound(const std::vector<Planned>& plan,
                        double dense_fraction);

// Whether `response` holds what `request` asked for: 2^levels_ahead
// descendants per descend, a row count per listed range, and as many rows
// as the counts say. kDataLoss if not.
absl::Status CheckAnswerShape(const ViewRequest& request,
                              const ViewResponse& response);

}  // namespace internal
}  // namespace tree
}  // namespace tally

#endif  // TALLY_TREE_DIFF_DIFF_BATCHES_H_
