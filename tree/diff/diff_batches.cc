#include "tree/diff/diff_batches.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"

namespace tally {
namespace tree {
namespace internal {

RoundRequests PackRound(const std::vector<Planned>& plan,
                        double dense_fraction) {
  RoundRequests round;
  std::vector<const Planned*> descended;
  std::vector<const Planned*> listed;
  for (const Planned& p : plan) {
    switch (p.step) {
      case Step::kScanA:
        round.scan_a.push_back(p.pending.node);
        break;
      case Step::kScanB:
        round.scan_b.push_back(p.pending.node);
        break;
      case Step::kList:
        listed.push_back(&p);
        break;
      case Step::kDescend:
        descended.push_back(&p);
        break;
    }
  }

  std::vector<Batch>& batches = round.batches;
  auto batch_with_room = [&](uint64_t descendants, uint64_t rows,
                             bool list) -> Batch& {
    if (batches.empty() ||
        batches.back().descendants + descendants > kMaxDescendantsPerExchange ||
        // Leave headroom: counts may have moved since they were read.
        batches.back().listed_rows + rows > kMaxEntriesPerExchange / 2 ||
        (list &&
         batches.back().request.list.size() + 1 > kMaxListRangesPerExchange)) {
      batches.emplace_back();
    }
    return batches.back();
  };

  // Dense levels: when most nodes of a level are expanded alike, fetch the
  // whole level below by one request instead of naming each node.
  std::map<std::pair<int, int>, std::vector<const Planned*>> groups;
  std::vector<const Planned*> named;
  for (const Planned* p : descended) {
    groups[{p->pending.node.level, p->levels_ahead}].push_back(p);
  }
  for (auto& [group, members] : groups) {
    const auto [level, ahead] = group;
    const int target = level + ahead;
    if (level > 0 && target <= kMaxLevelsAhead &&
        static_cast<double>(members.size()) >=
            dense_fraction * static_cast<double>(uint64_t{1} << level)) {
      Batch& batch = batch_with_room(uint64_t{1} << target, 0, false);
      const size_t base = batch.descendants;
      batch.request.descend.push_back(DescendRequest{NodeRef{0, 0}, target});
      batch.descendants += uint64_t{1} << target;
      for (const Planned* p : members) {
        batch.descended.emplace_back(p,
                                     base + (p->pending.node.index << ahead));
      }
    } else {
      named.insert(named.end(), members.begin(), members.end());
    }
  }
  for (const Planned* p : named) {
    const uint64_t n = uint64_t{1} << p->levels_ahead;
    Batch& batch = batch_with_room(n, 0, false);
    batch.descended.emplace_back(p, batch.descendants);
    batch.request.descend.push_back(
        DescendRequest{p->pending.node, p->levels_ahead});
    batch.descendants += n;
  }
  for (const Planned* p : listed) {
    const uint64_t rows = std::max(p->pending.count_a, p->pending.count_b);
    Batch& batch = batch_with_room(0, rows, true);
    batch.request.list.push_back(p->pending.node);
    batch.listed.push_back(p);
    batch.listed_rows += rows;
  }
  return round;
}

absl::Status CheckAnswerShape(const ViewRequest& request,
                              const ViewResponse& response) {
  size_t descendants = 0;
  for (const DescendRequest& d : request.descend) {
    descendants += size_t{1} << d.levels_ahead;
  }
  size_t entries = 0;
  for (uint32_t n : response.entries_per_range) entries += n;
  if (response.descendants.size() != descendants ||
      response.entries_per_range.size() != request.list.size() ||
      entries != response.entries.size()) {
    return absl::DataLossError(absl::StrFormat(
        "a view answered with %d digests and %d ranges of %d entries; "
        "%d digests and %d ranges were asked for",
        response.descendants.size(), response.entries_per_range.size(),
        response.entries.size(), descendants, request.list.size()));
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace tree
}  // namespace tally
