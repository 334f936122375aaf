#include "tree/diff/token_range_view.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "tree/status_macros.h"

namespace tally {
namespace tree {
namespace {

NodeRef ParentOf(const NodeRef& node) {
  return NodeRef{node.level - 1, node.index >> 1};
}

uint64_t DescendantsOf(const ViewRequest& request) {
  uint64_t n = 0;
  for (const DescendRequest& d : request.descend) {
    n += uint64_t{1} << d.levels_ahead;
  }
  return n;
}

// A piece of a cut node: asked as one half of its parent, added into the
// cut node's slot of the answer.
struct Piece {
  size_t slot;
  uint64_t half;
};

void AddInto(NodeDigest& sum, const NodeDigest& part) {
  sum.fingerprint ^= part.fingerprint;
  sum.count += part.count;
}

// Moves `n` items of `from` starting at `*at` to the end of `to`; kInternal
// when `from` holds fewer (a wrapped view that answered short).
template <typename T>
absl::Status TakeInto(std::vector<T>& from, size_t* at, size_t n,
                      std::vector<T>* to) {
  if (*at + n > from.size()) {
    return absl::InternalError(absl::StrFormat(
        "token range view: the wrapped view answered %d items where at least "
        "%d were due",
        from.size(), *at + n));
  }
  for (size_t i = 0; i < n; ++i) to->push_back(std::move(from[*at + i]));
  *at += n;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ViewSummary> TokenRangeView::Summary(int top_levels) {
  TALLY_RETURN_IF_ERROR(ValidateSummaryTopLevels(top_levels));
  if (range_.IsAll()) return view_.Summary(top_levels);
  TALLY_ASSIGN_OR_RETURN(const ViewSummary whole, view_.Summary(0));
  ViewSummary out;
  out.depth = whole.depth;
  // The top nodes (or the root's two halves) add up to the root: one
  // exchange answers both.
  ViewRequest request;
  request.descend.push_back({NodeRef{0, 0}, std::max(top_levels, 1)});
  TALLY_ASSIGN_OR_RETURN(ViewResponse response, Exchange(request));
  uint64_t fingerprint = 0;
  for (const NodeDigest& d : response.descendants) {
    fingerprint ^= d.fingerprint;
    out.row_count += d.count;
  }
  out.root = Digest128{0, fingerprint};
  if (top_levels > 0) out.top = std::move(response.descendants);
  return out;
}

absl::StatusOr<ViewResponse> TokenRangeView::Exchange(
    const ViewRequest& request) {
  TALLY_RETURN_IF_ERROR(ValidateViewRequest(request));
  if (range_.IsAll()) return view_.Exchange(request);

  ViewResponse out;
  out.descendants.assign(DescendantsOf(request), NodeDigest{});
  // What the wrapped view is asked: the descents that reach into the
  // range (with where their answers go), the listed ranges that do, and
  // the pieces of cut descendants.
  ViewRequest asked;
  std::vector<size_t> asked_slot;  // per asked.descend: first answer slot
  std::vector<DescendRequest> pieces_asked;
  std::vector<Piece> pieces;
  size_t slot = 0;
  for (const DescendRequest& d : request.descend) {
    const uint64_t width = uint64_t{1} << d.levels_ahead;
    if (range_.Overlaps(d.node)) {
      asked.descend.push_back(d);
      asked_slot.push_back(slot);
      if (!range_.Covers(d.node)) {
        // Only a descendant holding a boundary can be cut.
        const int level = d.node.level + d.levels_ahead;
        std::optional<uint64_t> done;
        for (Token boundary : {range_.first, range_.last}) {
          if (!d.node.Contains(boundary)) continue;
          const uint64_t child = NodeIndexOf(boundary, level) & (width - 1);
          const NodeRef cut = d.node.Descendant(d.levels_ahead, child);
          if (done == child || range_.Covers(cut)) continue;
          done = child;
          for (const NodeRef& piece : CoverOf(range_, cut)) {
            pieces_asked.push_back({ParentOf(piece), 1});
            pieces.push_back({slot + child, piece.index & 1});
          }
        }
      }
    }
    slot += width;
  }
  std::vector<size_t> listed;  // indices into request.list that are asked
  for (size_t i = 0; i < request.list.size(); ++i) {
    if (!range_.Overlaps(request.list[i])) continue;
    asked.list.push_back(request.list[i]);
    listed.push_back(i);
  }

  // One exchange when the pieces fit beside the rest (they nearly always
  // do: at most 128 per cut node), else more.
  std::vector<ViewRequest> rounds;
  if (DescendantsOf(asked) + 2 * pieces_asked.size() <=
      kMaxDescendantsPerExchange) {
    asked.descend.insert(asked.descend.end(), pieces_asked.begin(),
                         pieces_asked.end());
    rounds.push_back(std::move(asked));
  } else {
    rounds.push_back(std::move(asked));
    for (size_t i = 0; i < pieces_asked.size();) {
      ViewRequest more;
      while (i < pieces_asked.size() &&
             2 * (more.descend.size() + 1) <= kMaxDescendantsPerExchange) {
        more.descend.push_back(pieces_asked[i++]);
      }
      rounds.push_back(std::move(more));
    }
  }
  std::vector<NodeDigest> answers;  // the descents', then the pieces'
  std::vector<uint32_t> entries_per_range;
  std::vector<RowEntry> entries;
  for (ViewRequest& round : rounds) {
    if (round.descend.empty() && round.list.empty()) continue;
    TALLY_ASSIGN_OR_RETURN(ViewResponse r, view_.Exchange(round));
    if (r.descendants.size() != DescendantsOf(round) ||
        r.entries_per_range.size() != round.list.size()) {
      return absl::InternalError(absl::StrFormat(
          "token range view: the wrapped view answered %d digests and %d "
          "ranges for %d and %d",
          r.descendants.size(), r.entries_per_range.size(),
          DescendantsOf(round), round.list.size()));
    }
    answers.insert(answers.end(), r.descendants.begin(), r.descendants.end());
    if (!round.list.empty()) {
      entries_per_range = std::move(r.entries_per_range);
      entries = std::move(r.entries);
    }
  }

  // The descents: outside the range zero, cut descendants from pieces.
  // The answers of the asked descents come in the request's order.
  size_t at = 0;
  size_t k = 0;
  for (const DescendRequest& d : request.descend) {
    if (!range_.Overlaps(d.node)) continue;
    const uint64_t width = uint64_t{1} << d.levels_ahead;
    const bool covered = range_.Covers(d.node);
    for (uint64_t j = 0; j < width; ++j) {
      if (covered || range_.Covers(d.node.Descendant(d.levels_ahead, j))) {
        out.descendants[asked_slot[k] + j] = answers[at + j];
      }
    }
    at += width;
    ++k;
  }
  for (size_t p = 0; p < pieces.size(); ++p) {
    AddInto(out.descendants[pieces[p].slot],
            answers[at + 2 * p + pieces[p].half]);
  }

  // The lists: only the range's rows.
  out.entries_per_range.assign(request.list.size(), 0);
  size_t pos = 0;
  for (size_t k = 0; k < listed.size(); ++k) {
    const size_t end = pos + entries_per_range[k];
    if (end > entries.size()) {
      return absl::InternalError(
          "token range view: the wrapped view listed fewer rows than it "
          "counted");
    }
    for (size_t e = pos; e < end; ++e) {
      if (!range_.Contains(entries[e].token)) continue;
      out.entries.push_back(std::move(entries[e]));
      ++out.entries_per_range[listed[k]];
    }
    pos = end;
  }
  return out;
}

absl::StatusOr<SeededResponse> TokenRangeView::ExchangeSeeded(
    const SeededRequest& request) {
  if (range_.IsAll()) return view_.ExchangeSeeded(request);
  TALLY_RETURN_IF_ERROR(ValidateSeededRequest(request));
  // Split: what lies inside the range goes to the wrapped view seeded, as
  // it is; the rest is answered here from this view's plain answers.
  SeededRequest inside;
  SeededRequest rest;
  for (SeededRequest* part : {&inside, &rest}) {
    part->seed = request.seed;
    part->node_bits = request.node_bits;
    part->row_bits = request.row_bits;
    part->rows_known = request.rows_known;
  }
  std::vector<bool> descend_inside;
  size_t known = 0;
  for (const DescendRequest& d : request.plain.descend) {
    const bool in = range_.Covers(d.node);
    descend_inside.push_back(in);
    SeededRequest& part = in ? inside : rest;
    part.plain.descend.push_back(d);
    const size_t width = size_t{1} << d.levels_ahead;
    if (!request.known_nodes.empty()) {
      part.known_nodes.insert(part.known_nodes.end(),
                              request.known_nodes.begin() + known,
                              request.known_nodes.begin() + known + width);
    }
    known += width;
  }
  std::vector<bool> list_inside;
  size_t known_row = 0;
  for (size_t r = 0; r < request.plain.list.size(); ++r) {
    const bool in = range_.Covers(request.plain.list[r]);
    list_inside.push_back(in);
    SeededRequest& part = in ? inside : rest;
    part.plain.list.push_back(request.plain.list[r]);
    if (request.rows_known) {
      const uint32_t n = request.known_rows_per_range[r];
      part.known_rows_per_range.push_back(n);
      part.known_rows.insert(part.known_rows.end(),
                             request.known_rows.begin() + known_row,
                             request.known_rows.begin() + known_row + n);
      known_row += n;
    }
  }
  const bool any_inside =
      !inside.plain.descend.empty() || !inside.plain.list.empty();
  const bool any_rest = !rest.plain.descend.empty() || !rest.plain.list.empty();
  if (!any_rest) return view_.ExchangeSeeded(request);
  if (!any_inside) return AnswerSeeded(*this, request);

  TALLY_ASSIGN_OR_RETURN(SeededResponse from_inside,
                         view_.ExchangeSeeded(inside));
  TALLY_ASSIGN_OR_RETURN(SeededResponse from_rest, AnswerSeeded(*this, rest));
  // Merge the two answers back into the request's order.
  SeededResponse out;
  struct Cursor {
    SeededResponse* response;
    size_t descendant = 0;
    size_t differs = 0;
    size_t range = 0;
    size_t entry = 0;
    size_t unmatched = 0;
  };
  Cursor in_cursor{&from_inside};
  Cursor rest_cursor{&from_rest};
  for (size_t i = 0; i < request.plain.descend.size(); ++i) {
    Cursor& c = descend_inside[i] ? in_cursor : rest_cursor;
    const size_t width = size_t{1} << request.plain.descend[i].levels_ahead;
    size_t answered = width;
    if (!request.known_nodes.empty()) {
      const size_t first = out.differs.size();
      TALLY_RETURN_IF_ERROR(
          TakeInto(c.response->differs, &c.differs, width, &out.differs));
      answered =
          std::count(out.differs.begin() + first, out.differs.end(), true);
    }
    TALLY_RETURN_IF_ERROR(TakeInto(c.response->descendants, &c.descendant,
                                   answered, &out.descendants));
  }
  for (size_t r = 0; r < request.plain.list.size(); ++r) {
    Cursor& c = list_inside[r] ? in_cursor : rest_cursor;
    if (c.range >= c.response->entries_per_range.size()) {
      return absl::InternalError(
          "token range view: a seeded answer lacks a listed range");
    }
    const uint32_t n = c.response->entries_per_range[c.range++];
    out.entries_per_range.push_back(n);
    TALLY_RETURN_IF_ERROR(
        TakeInto(c.response->entries, &c.entry, n, &out.entries));
    if (request.rows_known) {
      TALLY_RETURN_IF_ERROR(TakeInto(c.response->unmatched, &c.unmatched,
                                     request.known_rows_per_range[r],
                                     &out.unmatched));
    }
  }
  return out;
}

std::vector<NodeRef> TokenRangeView::Clip(
    absl::Span<const NodeRef> ranges) const {
  std::vector<NodeRef> out;
  for (const NodeRef& range : ranges) {
    const std::vector<NodeRef> pieces = CoverOf(range_, range);
    out.insert(out.end(), pieces.begin(), pieces.end());
  }
  return out;
}

absl::Status TokenRangeView::Scan(absl::Span<const NodeRef> ranges,
                                  const EntrySink& sink) {
  if (range_.IsAll()) return view_.Scan(ranges, sink);
  const std::vector<NodeRef> clipped = Clip(ranges);
  if (clipped.empty()) return absl::OkStatus();
  return view_.Scan(clipped, sink);
}

absl::Status TokenRangeView::ScanWithValues(absl::Span<const NodeRef> ranges,
                                            const EntrySink& sink) {
  if (range_.IsAll()) return view_.ScanWithValues(ranges, sink);
  const std::vector<NodeRef> clipped = Clip(ranges);
  if (clipped.empty()) return absl::OkStatus();
  return view_.ScanWithValues(clipped, sink);
}

}  // namespace tree
}  // namespace tally
