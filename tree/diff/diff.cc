#include "tree/diff/diff.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "tree/diff/diff_cost.h"
#include "tree/fingerprint.h"
#include "tree/status_macros.h"

namespace tally {
namespace tree {
namespace {

using internal::AskMode;
using internal::CostModel;
using internal::CostOf;
using internal::FingerprintBits;
using internal::kRowExtraBits;
using internal::RoundBudget;

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

bool EntryLess(const RowEntry& x, const RowEntry& y) {
  if (x.token != y.token) return x.token < y.token;
  return x.key < y.key;
}

// One Exchange to each view: the request and where each planned descend's
// children sit in the answer.
struct Batch {
  ViewRequest request;
  uint64_t descendants = 0;
  uint64_t listed_rows = 0;
  std::vector<std::pair<const Planned*, size_t>> descended;  // node, slot
  std::vector<const Planned*> listed;
};

// Runs one diff as a sequence of rounds. A round plans every pending node
// from what earlier rounds saw, then sends the plan as one or more
// exchanges; the exchanges of a round do not depend on one another, so a
// remote view may pipeline them (as the two views are asked side by side),
// and a round costs one round trip of latency however many it holds.
class Differ {
 public:
  Differ(TreeView& a, TreeView& b, const DiffOptions& options,
         const DifferenceSink& sink, DiffStats* stats)
      : a_(a), b_(b), options_(options), sink_(sink), stats_(*stats) {}

  // Runs passes until one's differences account for the difference of the
  // roots (docs/design/diff.md, "Short fingerprints"), or max_passes.
  absl::Status Run() {
    seed_ = options_.seed != 0 ? options_.seed : NewSessionSeed();
    stats_.seed = seed_;
    const int passes = std::max(1, options_.max_passes);
    for (int pass = 1;; ++pass) {
      stats_.passes = static_cast<uint64_t>(pass);
      TALLY_RETURN_IF_ERROR(RunPass());
      stats_.verified = found_.fingerprints == roots_.fingerprints &&
                        found_.count_gap == roots_.count_gap;
      // A plain diff compares every fingerprint at 64 bits: another pass
      // would compare the same.
      if (stats_.verified || mode_ == AskMode::kPlain || pass >= passes) {
        return absl::OkStatus();
      }
      seed_ = XXH3_64bits_withSeed(&seed_, sizeof(seed_), pass);
      found_ = Balance{};
      work_.clear();
    }
  }

  // One pass: handshake, descent and listing under one seed.
  absl::Status RunPass() {
    // Handshake: the summaries, and with them (independent of them, so in
    // the same round) the first expansion of the root, which any mismatch
    // needs and whose size nothing known yet can improve on.
    pass_start_ = stats_.rounds;
    ++stats_.rounds;
    const int top_levels =
        std::clamp(options_.handshake_levels, 0, kMaxSummaryTopLevels);
    absl::StatusOr<ViewSummary> asked_a;
    absl::StatusOr<ViewSummary> asked_b;
    BothAtOnce([&] { asked_a = a_.Summary(top_levels); },
               [&] { asked_b = b_.Summary(top_levels); });
    TALLY_ASSIGN_OR_RETURN(const ViewSummary summary_a, std::move(asked_a));
    TALLY_ASSIGN_OR_RETURN(const ViewSummary summary_b, std::move(asked_b));
    Count(true, kSummaryRequestBytes, WireSize(summary_a));
    Count(false, kSummaryRequestBytes, WireSize(summary_b));
    // Known once the summaries have answered: a node from before seeds
    // answers only plain exchanges, with 64-bit fingerprints.
    mode_ = !options_.seeded || !a_.AnswersSeeded() || !b_.AnswersSeeded()
                ? AskMode::kPlain
            : options_.own_view == DiffOptions::OwnView::kNeither
                ? AskMode::kSeeded
                : AskMode::kOwnFirst;
    rows_ = std::max(summary_a.row_count, summary_b.row_count);
    leaf_level_ =
        std::clamp(std::min(summary_a.depth, summary_b.depth), 0, kTokenBits);
    roots_ =
        Balance{summary_a.root.Fingerprint() ^ summary_b.root.Fingerprint(),
                static_cast<int64_t>(summary_a.row_count) -
                    static_cast<int64_t>(summary_b.row_count)};
    const NodeRef root{0, 0};
    const uint64_t gap = summary_a.row_count > summary_b.row_count
                             ? summary_a.row_count - summary_b.row_count
                             : summary_b.row_count - summary_a.row_count;
    Planned handshake{Pending{root, summary_a.row_count, summary_b.row_count,
                              std::max<double>(1, static_cast<double>(gap))},
                      Step::kDescend, top_levels};
    const size_t top_size = size_t{1} << top_levels;
    if (top_levels > 0 && (summary_a.top.size() != top_size ||
                           summary_b.top.size() != top_size)) {
      return absl::DataLossError(absl::StrFormat(
          "a view's summary carried %d and %d top nodes; %d were asked for",
          summary_a.top.size(), summary_b.top.size(), top_size));
    }
    stats_.digests += summary_a.top.size() + summary_b.top.size();
    std::vector<Pending> next;
    if (top_levels > 0) {
      ViewResponse top_a;
      ViewResponse top_b;
      top_a.descendants = summary_a.top;
      top_b.descendants = summary_b.top;
      CompareDescendants(handshake, top_a, top_b, 0, &next);
    }
    if (summary_a.root == summary_b.root &&
        summary_a.row_count == summary_b.row_count) {
      return absl::OkStatus();
    }
    if (summary_a.row_count == 0 || summary_b.row_count == 0) {
      // Nothing to compare against: stream the side that has rows.
      ++stats_.rounds;
      std::vector<NodeRef> ranges{root};
      if (summary_a.row_count > 0) {
        TALLY_RETURN_IF_ERROR(ScanSide(true, ranges));
      }
      if (summary_b.row_count > 0) {
        TALLY_RETURN_IF_ERROR(ScanSide(false, ranges));
      }
      return absl::OkStatus();
    }
    if (handshake.levels_ahead == 0) next.push_back(handshake.pending);
    work_ = std::move(next);
    while (!work_.empty()) {
      TALLY_RETURN_IF_ERROR(RunRound());
    }
    return absl::OkStatus();
  }

 private:
  // A summary request carries little more than the keyspace name.
  static constexpr size_t kSummaryRequestBytes = 16;

  // Decides what to do with one mismatched node, with `rounds` rounds left
  // (this one included) in the budget.
  Planned Plan(const Pending& p, int rounds, CostModel& model) const {
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
    // Past the budget, keep listing cheap rather than adding rounds, except
    // for ranges too large to list.
    if (rounds <= 1 && rows > options_.max_list_rows) rounds = 2;
    const int max_levels =
        std::min(options_.max_levels_per_round, kTokenBits - p.node.level);
    const CostModel::Choice choice =
        model.Best(0.5 * static_cast<double>(p.count_a + p.count_b), p.expected,
                   std::max(rounds, 1), std::max(max_levels, 1), ToLeaf(p));
    if (choice.levels == 0 && rows <= options_.max_list_rows) return planned;
    planned.step = Step::kDescend;
    planned.levels_ahead = std::max(choice.levels, 1);
    return planned;
  }

  // Levels between `p`'s node and the shallower view's leaves (0 at or
  // below them).
  int ToLeaf(const Pending& p) const {
    return std::max(0, leaf_level_ - p.node.level);
  }

  // The bytes the model expects the frontier to cost if it must be resolved
  // within `rounds` rounds, this one included, each node planned at its
  // least cost (bytes and rows read, CostModel). Ranges streamed or listed
  // whatever the budget cost the same for every `rounds` and are left out.
  double FrontierBytes(int rounds, CostModel& model) const {
    double bytes = 0;
    for (const Pending& p : work_) {
      if (p.count_a == 0 || p.count_b == 0) continue;
      if (std::max(p.count_a, p.count_b) <= options_.list_threshold ||
          p.node.level == kTokenBits) {
        continue;
      }
      const int max_levels = std::max(1, std::min(options_.max_levels_per_round,
                                                  kTokenBits - p.node.level));
      bytes += model
                   .Best(0.5 * static_cast<double>(p.count_a + p.count_b),
                         p.expected, rounds, max_levels, ToLeaf(p))
                   .bytes;
    }
    return bytes;
  }

  // How many rounds, this one included, the rest of the diff should take:
  // the fewest after which one more round would save less than
  // `round_saving` of the bytes still to come, or less than
  // `round_price_bytes` (see DiffOptions), and at most what `max_rounds`
  // leaves. Chosen again every round, from what the earlier rounds saw.
  int ChooseRounds(CostModel& model) const {
    const int max_left =
        std::max(1, RoundBudget(rows_, options_) -
                        static_cast<int>(stats_.rounds - pass_start_) + 1);
    // Ranges too large to list need at least one more descent (Plan).
    int rounds = 1;
    for (const Pending& p : work_) {
      if (p.count_a > 0 && p.count_b > 0 &&
          std::max(p.count_a, p.count_b) > options_.max_list_rows) {
        rounds = 2;
        break;
      }
    }
    if (rounds >= max_left) return rounds;
    // Rounds are a latency traded for bytes: the rows read do not enter.
    double bytes = FrontierBytes(rounds, model);
    while (rounds < max_left) {
      const double more = FrontierBytes(rounds + 1, model);
      const double saving = bytes - more;
      if (saving <
          std::max(options_.round_saving * bytes, options_.round_price_bytes)) {
        break;
      }
      bytes = more;
      ++rounds;
    }
    return rounds;
  }

  absl::Status RunRound() {
    ++stats_.rounds;
    double expected = 0;
    for (const Pending& p : work_) expected += p.expected;
    bits_ = FingerprintBits(expected, options_.miss_probability);
    if (mode_ != AskMode::kPlain) {
      stats_.fingerprint_bits = std::max<uint64_t>(
          stats_.fingerprint_bits, static_cast<uint64_t>(RowBits()));
    }
    CostModel model(
        CostOf(mode_, bits_, RowBits(), EntryBytes(), options_.scan_row_bytes));
    const int rounds_left = ChooseRounds(model);
    // Take the frontier, up to what one round may carry; the rest waits.
    std::vector<Planned> plan;
    uint64_t budget = kMaxDescendantsPerExchange *
                      static_cast<uint64_t>(options_.max_exchanges_per_round);
    while (!work_.empty()) {
      Planned p = Plan(work_.back(), rounds_left, model);
      const uint64_t weight =
          p.step == Step::kDescend
              ? uint64_t{1} << p.levels_ahead
              : std::max(p.pending.count_a, p.pending.count_b);
      if (!plan.empty() && weight > budget) break;
      budget -= std::min(budget, weight);
      plan.push_back(std::move(p));
      work_.pop_back();
    }
    std::vector<Pending> next;
    TALLY_RETURN_IF_ERROR(RunBatches(plan, &next));
    // Deepest first keeps the stack short; `next` goes on top of what waits.
    work_.insert(work_.end(), next.begin(), next.end());
    return absl::OkStatus();
  }

  // Sends `plan` as exchanges within the per-exchange limits and appends the
  // mismatched children to `next`.
  absl::Status RunBatches(const std::vector<Planned>& plan,
                          std::vector<Pending>* next) {
    std::vector<NodeRef> scan_a;
    std::vector<NodeRef> scan_b;
    std::vector<const Planned*> descended;
    std::vector<const Planned*> listed;
    for (const Planned& p : plan) {
      switch (p.step) {
        case Step::kScanA:
          scan_a.push_back(p.pending.node);
          break;
        case Step::kScanB:
          scan_b.push_back(p.pending.node);
          break;
        case Step::kList:
          listed.push_back(&p);
          break;
        case Step::kDescend:
          descended.push_back(&p);
          break;
      }
    }
    // Streams first: they need no comparison.
    if (!scan_a.empty()) TALLY_RETURN_IF_ERROR(ScanSide(true, scan_a));
    if (!scan_b.empty()) TALLY_RETURN_IF_ERROR(ScanSide(false, scan_b));

    std::vector<Batch> batches;
    auto batch_with_room = [&](uint64_t descendants, uint64_t rows,
                               bool list) -> Batch& {
      if (batches.empty() ||
          batches.back().descendants + descendants >
              kMaxDescendantsPerExchange ||
          // Leave headroom: counts may have moved since they were read.
          batches.back().listed_rows + rows > kMaxEntriesPerExchange / 2 ||
          (list && batches.back().request.list.size() + 1 >
                       kMaxListRangesPerExchange)) {
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
              options_.dense_fraction *
                  static_cast<double>(uint64_t{1} << level)) {
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
    if (mode_ == AskMode::kPlain) return AskPlain(batches, next);
    if (mode_ == AskMode::kSeeded) return AskSeeded(batches, next);
    return AskOwnFirst(batches, next);
  }

  // Each view answers the round's batches in turn, the two views at the
  // same time: a round costs one round trip when it holds one batch.
  absl::Status AskPlain(const std::vector<Batch>& batches,
                        std::vector<Pending>* next) {
    std::vector<absl::StatusOr<ViewResponse>> answers_a;
    std::vector<absl::StatusOr<ViewResponse>> answers_b;
    auto ask = [&batches](TreeView& view,
                          std::vector<absl::StatusOr<ViewResponse>>* answers) {
      for (const Batch& batch : batches) {
        answers->push_back(view.Exchange(batch.request));
        if (!answers->back().ok()) break;
      }
    };
    BothAtOnce([&] { ask(a_, &answers_a); }, [&] { ask(b_, &answers_b); });
    for (size_t i = 0; i < batches.size(); ++i) {
      if (i < answers_a.size()) TALLY_RETURN_IF_ERROR(answers_a[i].status());
      if (i < answers_b.size()) TALLY_RETURN_IF_ERROR(answers_b[i].status());
      const size_t request_size = WireSize(batches[i].request);
      Count(true, request_size, WireSize(*answers_a[i]));
      Count(false, request_size, WireSize(*answers_b[i]));
      TALLY_RETURN_IF_ERROR(RunBatch(batches[i], std::move(*answers_a[i]),
                                     std::move(*answers_b[i]), next));
    }
    return absl::OkStatus();
  }

  SeededRequest Seeded(const ViewRequest& plain) const {
    SeededRequest request;
    request.plain = plain;
    request.seed = seed_;
    request.node_bits = bits_;
    request.row_bits = RowBits();
    return request;
  }

  // Both views at the same time, as AskPlain, with short fingerprints.
  absl::Status AskSeeded(const std::vector<Batch>& batches,
                         std::vector<Pending>* next) {
    std::vector<SeededRequest> requests;
    for (const Batch& batch : batches)
      requests.push_back(Seeded(batch.request));
    std::vector<absl::StatusOr<SeededResponse>> answers_a;
    std::vector<absl::StatusOr<SeededResponse>> answers_b;
    auto ask = [&requests](
                   TreeView& view,
                   std::vector<absl::StatusOr<SeededResponse>>* answers) {
      for (const SeededRequest& request : requests) {
        answers->push_back(view.ExchangeSeeded(request));
        if (!answers->back().ok()) break;
      }
    };
    BothAtOnce([&] { ask(a_, &answers_a); }, [&] { ask(b_, &answers_b); });
    for (size_t i = 0; i < batches.size(); ++i) {
      if (i < answers_a.size()) TALLY_RETURN_IF_ERROR(answers_a[i].status());
      if (i < answers_b.size()) TALLY_RETURN_IF_ERROR(answers_b[i].status());
      const size_t request_size = WireSize(requests[i]);
      Count(true, request_size, WireSize(*answers_a[i], requests[i]));
      Count(false, request_size, WireSize(*answers_b[i], requests[i]));
      TALLY_RETURN_IF_ERROR(RunBatch(batches[i],
                                     AsPlain(std::move(*answers_a[i])),
                                     AsPlain(std::move(*answers_b[i])), next));
    }
    return absl::OkStatus();
  }

  static ViewResponse AsPlain(SeededResponse seeded) {
    ViewResponse plain;
    plain.descendants = std::move(seeded.descendants);
    plain.entries_per_range = std::move(seeded.entries_per_range);
    plain.entries = std::move(seeded.entries);
    return plain;
  }

  // A node's own session: its own view answers first (in this process, for
  // free), and the other view is sent its fingerprints, to answer which
  // children differ and which rows. Both answers are then put in the plain
  // form the comparison reads: the other view's equal children as copies of
  // the own ones, and only the rows that differ on either side.
  absl::Status AskOwnFirst(const std::vector<Batch>& batches,
                           std::vector<Pending>* next) {
    const bool own_is_a = options_.own_view == DiffOptions::OwnView::kA;
    TreeView& own = own_is_a ? a_ : b_;
    TreeView& other = own_is_a ? b_ : a_;
    for (const Batch& batch : batches) {
      TALLY_ASSIGN_OR_RETURN(ViewResponse mine, own.Exchange(batch.request));
      TALLY_RETURN_IF_ERROR(CheckShape(batch.request, mine));
      SeededRequest request = Seeded(batch.request);
      request.known_nodes.reserve(mine.descendants.size());
      for (const NodeDigest& d : mine.descendants) {
        request.known_nodes.push_back(NodeFingerprint(seed_, d, bits_));
      }
      request.rows_known = !batch.request.list.empty();
      if (request.rows_known) {
        request.known_rows_per_range = mine.entries_per_range;
        for (const RowEntry& e : mine.entries) {
          request.known_rows.push_back(RowFingerprint(seed_, e, RowBits()));
        }
      }
      TALLY_ASSIGN_OR_RETURN(SeededResponse theirs,
                             other.ExchangeSeeded(request));
      Count(!own_is_a, WireSize(request), WireSize(theirs, request));
      if (theirs.differs.size() != mine.descendants.size() ||
          theirs.unmatched.size() != request.known_rows.size() ||
          theirs.entries_per_range.size() != batch.request.list.size()) {
        return absl::DataLossError(absl::StrFormat(
            "a view answered %d of %d children and %d of %d known rows",
            theirs.differs.size(), mine.descendants.size(),
            theirs.unmatched.size(), request.known_rows.size()));
      }
      ViewResponse other_plain;
      other_plain.descendants = mine.descendants;
      size_t k = 0;
      for (size_t i = 0; i < theirs.differs.size(); ++i) {
        if (!theirs.differs[i]) continue;
        if (k >= theirs.descendants.size()) {
          return absl::DataLossError(
              "a view marked more children as differing than it counted");
        }
        // Any fingerprint but the own one: the two differ.
        other_plain.descendants[i] = NodeDigest{
            ~mine.descendants[i].fingerprint, theirs.descendants[k++].count};
      }
      // The own rows no row of the other matched.
      ViewResponse own_rows;
      size_t pos = 0;
      for (size_t r = 0; r < mine.entries_per_range.size(); ++r) {
        uint32_t kept = 0;
        for (uint32_t j = 0; j < mine.entries_per_range[r]; ++j, ++pos) {
          if (!theirs.unmatched[pos]) continue;
          own_rows.entries.push_back(std::move(mine.entries[pos]));
          ++kept;
        }
        own_rows.entries_per_range.push_back(kept);
      }
      own_rows.descendants = std::move(mine.descendants);
      other_plain.entries_per_range = std::move(theirs.entries_per_range);
      other_plain.entries = std::move(theirs.entries);
      TALLY_RETURN_IF_ERROR(own_is_a ? RunBatch(batch, std::move(own_rows),
                                                std::move(other_plain), next)
                                     : RunBatch(batch, std::move(other_plain),
                                                std::move(own_rows), next));
    }
    return absl::OkStatus();
  }

  // Runs `on_a` on this thread and `on_b` on a thread of its own, and
  // returns when both have: each view is still used by one thread at a
  // time, and a round waits for the slower view instead of both in turn.
  template <typename OnA, typename OnB>
  static void BothAtOnce(OnA&& on_a, OnB&& on_b) {
    std::thread other(std::forward<OnB>(on_b));
    on_a();
    other.join();
  }

  absl::Status RunBatch(const Batch& batch, ViewResponse response_a,
                        ViewResponse response_b, std::vector<Pending>* next) {
    ++stats_.exchanges;
    TALLY_RETURN_IF_ERROR(CheckShape(batch.request, response_a));
    TALLY_RETURN_IF_ERROR(CheckShape(batch.request, response_b));
    stats_.digests +=
        response_a.descendants.size() + response_b.descendants.size();
    stats_.entries += response_a.entries.size() + response_b.entries.size();
    for (const RowEntry& e : response_a.entries) entry_bytes_ += WireSize(e);
    for (const RowEntry& e : response_b.entries) entry_bytes_ += WireSize(e);
    entries_seen_ += response_a.entries.size() + response_b.entries.size();

    for (const auto& [planned, slot] : batch.descended) {
      CompareDescendants(*planned, response_a, response_b, slot, next);
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
                          const ViewResponse& response_b, size_t slot,
                          std::vector<Pending>* next) {
    const uint64_t n = uint64_t{1} << p.levels_ahead;
    const size_t first = next->size();
    double count_gap = 0;
    for (uint64_t j = 0; j < n; ++j) {
      const NodeDigest& da = response_a.descendants[slot + j];
      const NodeDigest& db = response_b.descendants[slot + j];
      if (da == db) continue;
      next->push_back(Pending{p.pending.node.Descendant(p.levels_ahead, j),
                              da.count, db.count, 1});
      count_gap += std::fabs(static_cast<double>(da.count) -
                             static_cast<double>(db.count));
    }
    const size_t hit_count = next->size() - first;
    if (hit_count == 0) return;
    // Estimate the differences below from the share of children that
    // differed (Poisson occupancy). When all did, that share says only
    // "many": take it as if one had not, and keep the parent's estimate if
    // larger. Row count gaps are differences too, whatever the share says.
    const double slots = static_cast<double>(n);
    const double hit = static_cast<double>(hit_count);
    double total;
    if (hit < slots) {
      total = -slots * std::log1p(-hit / slots);
    } else {
      total = std::max({p.pending.expected, slots * std::log(2 * slots),
                        3 * slots * std::log(slots)});
    }
    total = std::max({total, hit, count_gap});
    for (size_t i = first; i < next->size(); ++i) {
      (*next)[i].expected = std::max(1.0, total / hit);
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
          // Rows travel with 64-bit digest fingerprints.
          if (ea->digest.Fingerprint() != eb->digest.Fingerprint()) {
            TALLY_RETURN_IF_ERROR(Emit(ea, eb));
          }
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
    Count(side_a, ranges.size() * 8, 0);
    auto sink = [&](const RowEntry& entry) {
      ++stats_.entries;
      Count(side_a, 0, WireSize(entry));
      return side_a ? Emit(&entry, nullptr) : Emit(nullptr, &entry);
    };
    const bool values =
        side_a ? options_.scan_values_a : options_.scan_values_b;
    return values ? view.ScanWithValues(ranges, sink) : view.Scan(ranges, sink);
  }

  // Counts modeled payload (WireSize) for one side.
  void Count(bool side_a, size_t sent, size_t received) {
    // The own view answers in this process.
    if (options_.own_view ==
        (side_a ? DiffOptions::OwnView::kA : DiffOptions::OwnView::kB)) {
      return;
    }
    ViewTraffic& t = side_a ? modeled_a_ : modeled_b_;
    t.bytes_sent += sent;
    t.bytes_received += received;
  }

 public:
  // Fills the byte counts: what a view measured where it can, the model
  // where it cannot.
  void FinishTraffic(const std::optional<ViewTraffic>& start_a,
                     const std::optional<ViewTraffic>& start_b) {
    ViewTraffic a = modeled_a_;
    ViewTraffic b = modeled_b_;
    if (std::optional<ViewTraffic> end = a_.MeasuredTraffic();
        end.has_value() && start_a.has_value()) {
      a = ViewTraffic{end->bytes_sent - start_a->bytes_sent,
                      end->bytes_received - start_a->bytes_received};
    }
    if (std::optional<ViewTraffic> end = b_.MeasuredTraffic();
        end.has_value() && start_b.has_value()) {
      b = ViewTraffic{end->bytes_sent - start_b->bytes_sent,
                      end->bytes_received - start_b->bytes_received};
    }
    stats_.bytes_sent = a.bytes_sent + b.bytes_sent;
    stats_.bytes_received = a.bytes_received + b.bytes_received;
  }

 private:
  // Every difference a pass finds goes into its balance; the sink hears of
  // each key once over all passes.
  absl::Status Emit(const RowEntry* in_a, const RowEntry* in_b) {
    if (in_a != nullptr) {
      found_.fingerprints ^= in_a->digest.Fingerprint();
      ++found_.count_gap;
    }
    if (in_b != nullptr) {
      found_.fingerprints ^= in_b->digest.Fingerprint();
      --found_.count_gap;
    }
    if (options_.max_passes > 1 && mode_ != AskMode::kPlain) {
      const std::string& key = in_a != nullptr ? in_a->key : in_b->key;
      if (!emitted_.insert(XXH3_64bits(key.data(), key.size())).second) {
        return absl::OkStatus();
      }
    }
    ++stats_.differences;
    return sink_(in_a, in_b);
  }

  // What the differences of a pass add up to, to be checked against the
  // roots: the XOR of the rows' 64-bit fingerprints (a root's fingerprint
  // is the XOR of its rows') and the gap in row counts.
  struct Balance {
    uint64_t fingerprints = 0;
    int64_t count_gap = 0;
  };

  // Rows take 16 bits more than nodes: a false match of a row with another
  // key's would report its key absent on the other side, not merely hide
  // it, so it is made rarer than a miss (docs/design/diff.md, "Short
  // fingerprints").
  int RowBits() const {
    return std::min(bits_ + kRowExtraBits, kMaxFingerprintBits);
  }

  // Mean wire size of the rows seen so far; a guess before any.
  double EntryBytes() const {
    return entries_seen_ == 0 ? options_.entry_bytes_guess
                              : static_cast<double>(entry_bytes_) /
                                    static_cast<double>(entries_seen_);
  }

  TreeView& a_;
  TreeView& b_;
  const DiffOptions& options_;
  const DifferenceSink& sink_;
  DiffStats& stats_;
  ViewTraffic modeled_a_;
  ViewTraffic modeled_b_;
  // Mismatched nodes still to examine; a stack, so that the descent goes
  // deep before wide and the stack stays bounded.
  std::vector<Pending> work_;
  uint64_t entry_bytes_ = 0;
  uint64_t entries_seen_ = 0;
  // The pass: how views are asked, its seed and fingerprint width, what
  // the roots say the differences add up to and what they do so far.
  AskMode mode_ = AskMode::kPlain;
  uint64_t seed_ = 0;
  int bits_ = kMaxFingerprintBits;
  Balance roots_;
  Balance found_;
  uint64_t rows_ = 0;        // the larger view's rows
  int leaf_level_ = 0;       // the shallower view's depth
  uint64_t pass_start_ = 0;  // rounds before this pass
  // Hashes of the keys sent to the sink, when a later pass may find them
  // again.
  absl::flat_hash_set<uint64_t> emitted_;
};

}  // namespace

std::string DiffStats::DebugString() const {
  return absl::StrFormat(
      "differences=%d rounds=%d exchanges=%d digests=%d entries=%d "
      "bytes_sent=%d bytes_received=%d passes=%d seed=%016x "
      "fingerprint_bits=%d verified=%s",
      differences, rounds, exchanges, digests, entries, bytes_sent,
      bytes_received, passes, seed, fingerprint_bits,
      verified ? "true" : "false");
}

absl::Status DiffViews(TreeView& a, TreeView& b, const DiffOptions& options,
                       const DifferenceSink& sink, DiffStats* stats) {
  DiffStats local_stats;
  DiffStats* out = stats != nullptr ? stats : &local_stats;
  *out = DiffStats{};
  const std::optional<ViewTraffic> start_a = a.MeasuredTraffic();
  const std::optional<ViewTraffic> start_b = b.MeasuredTraffic();
  Differ differ(a, b, options, sink, out);
  const absl::Status status = differ.Run();
  differ.FinishTraffic(start_a, start_b);
  return status;
}

}  // namespace tree
}  // namespace tally
