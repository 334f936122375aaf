#include "tree/diff.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "absl/strings/str_format.h"
#include "tree/status_macros.h"

namespace tally {
namespace tree {
namespace {

// A node whose digests differ between the views, waiting to be examined.
struct Pending {
  NodeRef node;
  uint64_t count_a = 0;
  uint64_t count_b = 0;
  // Estimated number of differing keys below this node (at least 1).
  double expected = 1;
};

enum class Step { kDescend, kList, kScanA, kScanB };

struct Planned {
  Pending pending;
  Step step = Step::kList;
  int levels_ahead = 0;
};

int CeilLog2(double x) {
  if (x <= 1) return 0;
  return static_cast<int>(std::ceil(std::log2(x)));
}

bool EntryLess(const RowEntry& x, const RowEntry& y) {
  if (x.token != y.token) return x.token < y.token;
  return x.key < y.key;
}

// Runs one diff. Holds the work stack of mismatched nodes; every iteration
// of Run() takes a bounded batch from it and costs one round trip.
class Differ {
 public:
  Differ(TreeView& a, TreeView& b, const DiffOptions& options,
         const DifferenceSink& sink, DiffStats* stats)
      : a_(a), b_(b), options_(options), sink_(sink), stats_(*stats) {}

  absl::Status Run() {
    TALLY_ASSIGN_OR_RETURN(const ViewSummary summary_a, a_.Summary());
    TALLY_ASSIGN_OR_RETURN(const ViewSummary summary_b, b_.Summary());
    stats_.rounds = 1;
    stats_.bytes_sent += 2 * kSummaryRequestBytes;
    stats_.bytes_received += WireSize(summary_a) + WireSize(summary_b);
    if (summary_a.root == summary_b.root &&
        summary_a.row_count == summary_b.row_count) {
      return absl::OkStatus();
    }
    const NodeRef root{0, 0};
    if (summary_a.row_count == 0 || summary_b.row_count == 0) {
      // Nothing to compare against: stream the side that has rows.
      ++stats_.rounds;
      std::vector<NodeRef> ranges{root};
      if (summary_a.row_count > 0)
        TALLY_RETURN_IF_ERROR(ScanSide(true, ranges));
      if (summary_b.row_count > 0) {
        TALLY_RETURN_IF_ERROR(ScanSide(false, ranges));
      }
      return absl::OkStatus();
    }
    const uint64_t gap = summary_a.row_count > summary_b.row_count
                             ? summary_a.row_count - summary_b.row_count
                             : summary_b.row_count - summary_a.row_count;
    work_.push_back(Pending{root, summary_a.row_count, summary_b.row_count,
                            std::max<double>(1, static_cast<double>(gap))});
    while (!work_.empty()) {
      TALLY_RETURN_IF_ERROR(RunRound());
    }
    return absl::OkStatus();
  }

 private:
  // A summary request carries little more than the keyspace name.
  static constexpr size_t kSummaryRequestBytes = 16;

  // Decides what to do with one mismatched node.
  Planned Plan(const Pending& p) const {
    Planned planned{p, Step::kList, 0};
    if (p.count_a == 0) {
      planned.step = Step::kScanB;
      return planned;
    }
    if (p.count_b == 0) {
      planned.step = Step::kScanA;
      return planned;
    }
    const uint64_t rows = std::max(p.count_a, p.count_b);
    if (rows <= options_.list_threshold || p.node.level == kTokenBits) {
      return planned;
    }
    planned.step = Step::kDescend;
    // Levels to reach ranges small enough to list.
    const int to_list = std::max(
        1, CeilLog2(static_cast<double>(rows) / options_.list_threshold));
    // Levels to spread the expected differences over distinct children.
    int levels = std::max(CeilLog2(p.expected * options_.spread),
                          options_.min_levels_per_round);
    if (p.node.level == 0) {
      levels = std::max(levels, options_.first_round_levels);
    }
    levels = std::min({levels, to_list, options_.max_levels_per_round,
                       kMaxLevelsAhead, kTokenBits - p.node.level});
    planned.levels_ahead = std::max(levels, 1);
    return planned;
  }

  // Takes a batch off the work stack, within the per-exchange limits.
  std::vector<Planned> TakeBatch() {
    std::vector<Planned> batch;
    uint64_t descendants = 0;
    uint64_t list_ranges = 0;
    uint64_t listed_rows = 0;
    while (!work_.empty()) {
      Planned planned = Plan(work_.back());
      if (planned.step == Step::kDescend) {
        const uint64_t n = uint64_t{1} << planned.levels_ahead;
        if (!batch.empty() && descendants + n > kMaxDescendantsPerExchange) {
          break;
        }
        descendants += n;
      } else if (planned.step == Step::kList) {
        const uint64_t rows =
            std::max(planned.pending.count_a, planned.pending.count_b);
        // Leave headroom: counts may have moved since they were read.
        if (!batch.empty() &&
            (list_ranges + 1 > kMaxListRangesPerExchange ||
             listed_rows + rows > kMaxEntriesPerExchange / 2)) {
          break;
        }
        ++list_ranges;
        listed_rows += rows;
      }
      batch.push_back(std::move(planned));
      work_.pop_back();
    }
    return batch;
  }

  absl::Status RunRound() {
    std::vector<Planned> batch = TakeBatch();
    ++stats_.rounds;

    // Streams first: they need no comparison.
    std::vector<NodeRef> scan_a;
    std::vector<NodeRef> scan_b;
    ViewRequest request;
    std::vector<const Planned*> descended;
    std::vector<const Planned*> listed;
    for (const Planned& p : batch) {
      switch (p.step) {
        case Step::kScanA:
          scan_a.push_back(p.pending.node);
          break;
        case Step::kScanB:
          scan_b.push_back(p.pending.node);
          break;
        case Step::kList:
          request.list.push_back(p.pending.node);
          listed.push_back(&p);
          break;
        case Step::kDescend:
          descended.push_back(&p);
          break;
      }
    }
    if (!scan_a.empty()) TALLY_RETURN_IF_ERROR(ScanSide(true, scan_a));
    if (!scan_b.empty()) TALLY_RETURN_IF_ERROR(ScanSide(false, scan_b));

    // Dense levels: when most nodes of a level are pending with the same
    // expansion, fetch the whole level below instead of naming each node.
    std::map<std::pair<int, int>, uint64_t> group_sizes;
    for (const Planned* p : descended) {
      ++group_sizes[{p->pending.node.level, p->levels_ahead}];
    }
    uint64_t total_descendants = 0;
    for (const Planned* p : descended) {
      total_descendants += uint64_t{1} << p->levels_ahead;
    }
    std::map<std::pair<int, int>, size_t> whole_level_slot;
    std::vector<size_t> slot_of(descended.size());
    size_t next_slot = 0;
    for (const auto& [group, size] : group_sizes) {
      const auto [level, ahead] = group;
      const int target = level + ahead;
      if (level == 0 || target > kMaxLevelsAhead) continue;
      const uint64_t whole = uint64_t{1} << target;
      const uint64_t named = size << ahead;
      if (static_cast<double>(size) >=
              options_.dense_fraction *
                  static_cast<double>(uint64_t{1} << level) &&
          total_descendants - named + whole <= kMaxDescendantsPerExchange) {
        total_descendants = total_descendants - named + whole;
        whole_level_slot[group] = next_slot;
        next_slot += uint64_t{1} << target;
        request.descend.push_back(DescendRequest{NodeRef{0, 0}, target});
      }
    }
    for (size_t i = 0; i < descended.size(); ++i) {
      const Planned& p = *descended[i];
      auto it = whole_level_slot.find({p.pending.node.level, p.levels_ahead});
      if (it != whole_level_slot.end()) {
        slot_of[i] = it->second + (p.pending.node.index << p.levels_ahead);
      } else {
        slot_of[i] = next_slot;
        next_slot += uint64_t{1} << p.levels_ahead;
        request.descend.push_back(
            DescendRequest{p.pending.node, p.levels_ahead});
      }
    }
    if (request.descend.empty() && request.list.empty()) {
      return absl::OkStatus();
    }

    TALLY_ASSIGN_OR_RETURN(ViewResponse response_a, a_.Exchange(request));
    TALLY_ASSIGN_OR_RETURN(ViewResponse response_b, b_.Exchange(request));
    const size_t request_size = WireSize(request);
    stats_.bytes_sent += 2 * request_size;
    stats_.bytes_received += WireSize(response_a) + WireSize(response_b);
    TALLY_RETURN_IF_ERROR(CheckShape(request, response_a));
    TALLY_RETURN_IF_ERROR(CheckShape(request, response_b));
    stats_.digests +=
        response_a.descendants.size() + response_b.descendants.size();
    stats_.entries += response_a.entries.size() + response_b.entries.size();

    for (size_t i = 0; i < descended.size(); ++i) {
      CompareDescendants(*descended[i], response_a, response_b, slot_of[i]);
    }
    return CompareLists(response_a, response_b);
  }

  static absl::Status CheckShape(const ViewRequest& request,
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

  void CompareDescendants(const Planned& p, const ViewResponse& response_a,
                          const ViewResponse& response_b, size_t slot) {
    const uint64_t n = uint64_t{1} << p.levels_ahead;
    std::vector<Pending> children;
    for (uint64_t j = 0; j < n; ++j) {
      const NodeDigest& da = response_a.descendants[slot + j];
      const NodeDigest& db = response_b.descendants[slot + j];
      if (da == db) continue;
      children.push_back(Pending{p.pending.node.Descendant(p.levels_ahead, j),
                                 da.count, db.count, 1});
    }
    if (children.empty()) return;
    // Estimate the differences below from the share of children that
    // differed (Poisson occupancy); when all did, assume at least a
    // coupon-collector's worth.
    const double slots = static_cast<double>(n);
    const double hit = static_cast<double>(children.size());
    double total = hit < slots ? -slots * std::log1p(-hit / slots)
                               : std::max(p.pending.expected,
                                          1.5 * slots * std::log(slots + 1));
    total = std::max(total, hit);
    for (Pending& child : children) {
      child.expected = std::max(1.0, total / hit);
      work_.push_back(child);
    }
  }

  absl::Status CompareLists(const ViewResponse& response_a,
                            const ViewResponse& response_b) {
    size_t pos_a = 0;
    size_t pos_b = 0;
    for (size_t r = 0; r < response_a.entries_per_range.size(); ++r) {
      const size_t end_a = pos_a + response_a.entries_per_range[r];
      const size_t end_b = pos_b + response_b.entries_per_range[r];
      while (pos_a < end_a || pos_b < end_b) {
        const RowEntry* ea =
            pos_a < end_a ? &response_a.entries[pos_a] : nullptr;
        const RowEntry* eb =
            pos_b < end_b ? &response_b.entries[pos_b] : nullptr;
        if (ea != nullptr && (eb == nullptr || EntryLess(*ea, *eb))) {
          TALLY_RETURN_IF_ERROR(Emit(ea, nullptr));
          ++pos_a;
        } else if (eb != nullptr && (ea == nullptr || EntryLess(*eb, *ea))) {
          TALLY_RETURN_IF_ERROR(Emit(nullptr, eb));
          ++pos_b;
        } else {
          if (ea->digest != eb->digest) TALLY_RETURN_IF_ERROR(Emit(ea, eb));
          ++pos_a;
          ++pos_b;
        }
      }
    }
    return absl::OkStatus();
  }

  // Streams ranges that are empty on the other side: every row differs.
  absl::Status ScanSide(bool side_a, const std::vector<NodeRef>& ranges) {
    TreeView& view = side_a ? a_ : b_;
    stats_.bytes_sent += ranges.size() * 8;
    return view.Scan(ranges, [&](const RowEntry& entry) {
      ++stats_.entries;
      stats_.bytes_received += WireSize(entry);
      return side_a ? Emit(&entry, nullptr) : Emit(nullptr, &entry);
    });
  }

  absl::Status Emit(const RowEntry* in_a, const RowEntry* in_b) {
    ++stats_.differences;
    return sink_(in_a, in_b);
  }

  TreeView& a_;
  TreeView& b_;
  const DiffOptions& options_;
  const DifferenceSink& sink_;
  DiffStats& stats_;
  // Mismatched nodes still to examine; a stack, so that the descent goes
  // deep before wide and the stack stays bounded.
  std::vector<Pending> work_;
};

}  // namespace

std::string DiffStats::DebugString() const {
  return absl::StrFormat(
      "differences=%d rounds=%d digests=%d entries=%d bytes_sent=%d "
      "bytes_received=%d",
      differences, rounds, digests, entries, bytes_sent, bytes_received);
}

absl::Status DiffViews(TreeView& a, TreeView& b, const DiffOptions& options,
                       const DifferenceSink& sink, DiffStats* stats) {
  DiffStats local_stats;
  DiffStats* out = stats != nullptr ? stats : &local_stats;
  *out = DiffStats{};
  Differ differ(a, b, options, sink, out);
  return differ.Run();
}

}  // namespace tree
}  // namespace tally
