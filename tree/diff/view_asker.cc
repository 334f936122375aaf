#include "tree/diff/view_asker.h"

#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "tree/fingerprint.h"
#include "tree/status_macros.h"

namespace tally {
namespace tree {
namespace internal {
namespace {

// A summary request carries little more than the keyspace name.
constexpr size_t kSummaryRequestBytes = 16;

// Runs `on_a` on this thread and `on_b` on a thread of its own, and returns
// when both have: each view is still used by one thread at a time, and a
// round waits for the slower view instead of both in turn.
template <typename OnA, typename OnB>
void BothAtOnce(OnA&& on_a, OnB&& on_b) {
  std::thread other(std::forward<OnB>(on_b));
  on_a();
  other.join();
}

SeededRequest Seeded(const ViewRequest& plain,
                     const SeededFingerprints& fingerprints) {
  SeededRequest request;
  request.plain = plain;
  request.seed = fingerprints.seed;
  request.node_bits = fingerprints.node_bits;
  request.row_bits = fingerprints.row_bits;
  return request;
}

ViewResponse AsPlain(SeededResponse seeded) {
  ViewResponse plain;
  plain.descendants = std::move(seeded.descendants);
  plain.entries_per_range = std::move(seeded.entries_per_range);
  plain.entries = std::move(seeded.entries);
  return plain;
}

// The bytes `view` moved since `start`, when it measures them.
std::optional<ViewTraffic> MeasuredSince(
    const TreeView& view, const std::optional<ViewTraffic>& start) {
  std::optional<ViewTraffic> end = view.MeasuredTraffic();
  if (!end.has_value() || !start.has_value()) return std::nullopt;
  return ViewTraffic{end->bytes_sent - start->bytes_sent,
                     end->bytes_received - start->bytes_received};
}

}  // namespace

ViewAsker::ViewAsker(TreeView& a, TreeView& b, const DiffOptions& options)
    : a_(a),
      b_(b),
      options_(options),
      start_a_(a.MeasuredTraffic()),
      start_b_(b.MeasuredTraffic()) {}

absl::Status ViewAsker::AskSummaries(int top_levels, ViewSummary* summary_a,
                                     ViewSummary* summary_b) {
  absl::StatusOr<ViewSummary> asked_a;
  absl::StatusOr<ViewSummary> asked_b;
  BothAtOnce([&] { asked_a = a_.Summary(top_levels); },
             [&] { asked_b = b_.Summary(top_levels); });
  TALLY_ASSIGN_OR_RETURN(*summary_a, std::move(asked_a));
  TALLY_ASSIGN_OR_RETURN(*summary_b, std::move(asked_b));
  Count(Side::kA, kSummaryRequestBytes, WireSize(*summary_a));
  Count(Side::kB, kSummaryRequestBytes, WireSize(*summary_b));
  return absl::OkStatus();
}

absl::Status ViewAsker::AskBatches(AskMode mode,
                                   const SeededFingerprints& fingerprints,
                                   const std::vector<Batch>& batches,
                                   const BatchAnswersSink& on_answers) {
  switch (mode) {
    case AskMode::kPlain:
      return AskPlain(batches, on_answers);
    case AskMode::kSeeded:
      return AskSeeded(fingerprints, batches, on_answers);
    case AskMode::kOwnFirst:
      return AskOwnFirst(fingerprints, batches, on_answers);
  }
  return absl::InternalError("unknown way of asking the views");
}

absl::Status ViewAsker::AskPlain(const std::vector<Batch>& batches,
                                 const BatchAnswersSink& on_answers) {
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
    Count(Side::kA, request_size, WireSize(*answers_a[i]));
    Count(Side::kB, request_size, WireSize(*answers_b[i]));
    TALLY_RETURN_IF_ERROR(on_answers(batches[i], std::move(*answers_a[i]),
                                     std::move(*answers_b[i])));
  }
  return absl::OkStatus();
}

absl::Status ViewAsker::AskSeeded(const SeededFingerprints& fingerprints,
                                  const std::vector<Batch>& batches,
                                  const BatchAnswersSink& on_answers) {
  std::vector<SeededRequest> requests;
  for (const Batch& batch : batches) {
    requests.push_back(Seeded(batch.request, fingerprints));
  }
  std::vector<absl::StatusOr<SeededResponse>> answers_a;
  std::vector<absl::StatusOr<SeededResponse>> answers_b;
  auto ask = [&requests](TreeView& view,
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
    Count(Side::kA, request_size, WireSize(*answers_a[i], requests[i]));
    Count(Side::kB, request_size, WireSize(*answers_b[i], requests[i]));
    TALLY_RETURN_IF_ERROR(on_answers(batches[i],
                                     AsPlain(std::move(*answers_a[i])),
                                     AsPlain(std::move(*answers_b[i]))));
  }
  return absl::OkStatus();
}

absl::Status ViewAsker::AskOwnFirst(const SeededFingerprints& fingerprints,
                                    const std::vector<Batch>& batches,
                                    const BatchAnswersSink& on_answers) {
  const bool own_is_a = options_.own_view == DiffOptions::OwnView::kA;
  TreeView& own = own_is_a ? a_ : b_;
  TreeView& other = own_is_a ? b_ : a_;
  for (const Batch& batch : batches) {
    TALLY_ASSIGN_OR_RETURN(ViewResponse mine, own.Exchange(batch.request));
    TALLY_RETURN_IF_ERROR(CheckAnswerShape(batch.request, mine));
    SeededRequest request = Seeded(batch.request, fingerprints);
    request.known_nodes.reserve(mine.descendants.size());
    for (const NodeDigest& d : mine.descendants) {
      request.known_nodes.push_back(
          NodeFingerprint(fingerprints.seed, d, fingerprints.node_bits));
    }
    request.rows_known = !batch.request.list.empty();
    if (request.rows_known) {
      request.known_rows_per_range = mine.entries_per_range;
      for (const RowEntry& e : mine.entries) {
        request.known_rows.push_back(
            RowFingerprint(fingerprints.seed, e, fingerprints.row_bits));
      }
    }
    TALLY_ASSIGN_OR_RETURN(SeededResponse theirs,
                           other.ExchangeSeeded(request));
    Count(own_is_a ? Side::kB : Side::kA, WireSize(request),
          WireSize(theirs, request));
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
      other_plain.descendants[i] = NodeDigest{~mine.descendants[i].fingerprint,
                                              theirs.descendants[k++].count};
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
    TALLY_RETURN_IF_ERROR(
        own_is_a
            ? on_answers(batch, std::move(own_rows), std::move(other_plain))
            : on_answers(batch, std::move(other_plain), std::move(own_rows)));
  }
  return absl::OkStatus();
}

absl::Status ViewAsker::ScanSide(Side side, const std::vector<NodeRef>& ranges,
                                 const EntrySink& on_row) {
  TreeView& view = side == Side::kA ? a_ : b_;
  Count(side, ranges.size() * 8, 0);
  auto counted = [&](const RowEntry& entry) {
    Count(side, 0, WireSize(entry));
    return on_row(entry);
  };
  const bool values =
      side == Side::kA ? options_.scan_values_a : options_.scan_values_b;
  return values ? view.ScanWithValues(ranges, counted)
                : view.Scan(ranges, counted);
}

void ViewAsker::Count(Side side, size_t sent, size_t received) {
  // The own view answers in this process.
  if (options_.own_view == (side == Side::kA ? DiffOptions::OwnView::kA
                                             : DiffOptions::OwnView::kB)) {
    return;
  }
  ViewTraffic& t = side == Side::kA ? modeled_a_ : modeled_b_;
  t.bytes_sent += sent;
  t.bytes_received += received;
}

ViewTraffic ViewAsker::Traffic() const {
  const ViewTraffic a = MeasuredSince(a_, start_a_).value_or(modeled_a_);
  const ViewTraffic b = MeasuredSince(b_, start_b_).value_or(modeled_b_);
  return ViewTraffic{a.bytes_sent + b.bytes_sent,
                     a.bytes_received + b.bytes_received};
}

}  // namespace internal
}  // namespace tree
}  // namespace tally
