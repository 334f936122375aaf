#include "tree/tree_view.h"

#include "absl/strings/str_format.h"
#include "tree/fingerprint.h"
#include "tree/status_macros.h"

namespace tally {
namespace tree {
namespace {

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

// A length-delimited field: tag, length, payload.
size_t FieldSize(size_t payload) { return 1 + VarintSize(payload) + payload; }

}  // namespace

absl::Status ValidateViewRequest(const ViewRequest& request) {
  uint64_t descendants = 0;
  for (const DescendRequest& d : request.descend) {
    if (!d.node.IsValid()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "descend request names an invalid node: level %d, index %d "
          "(level must be 0..64 and index below 2^level)",
          d.node.level, d.node.index));
    }
    if (d.levels_ahead < 1 || d.levels_ahead > kMaxLevelsAhead ||
        d.node.level + d.levels_ahead > kTokenBits) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "descend request for %s asks for %d levels ahead; it must be 1..%d "
          "and not go below level 64",
          d.node.DebugString(), d.levels_ahead, kMaxLevelsAhead));
    }
    descendants += uint64_t{1} << d.levels_ahead;
  }
  if (descendants > kMaxDescendantsPerExchange) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "request asks for %d node digests; the limit is %d per exchange",
        descendants, kMaxDescendantsPerExchange));
  }
  if (request.list.size() > kMaxListRangesPerExchange) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("request lists %d ranges; the limit is %d per exchange",
                        request.list.size(), kMaxListRangesPerExchange));
  }
  for (const NodeRef& range : request.list) {
    if (!range.IsValid()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "list request names an invalid range: level %d, index %d",
          range.level, range.index));
    }
  }
  return absl::OkStatus();
}

namespace {

uint64_t DescendantCount(const ViewRequest& request) {
  uint64_t n = 0;
  for (const DescendRequest& d : request.descend) {
    n += uint64_t{1} << d.levels_ahead;
  }
  return n;
}

}  // namespace

absl::Status ValidateSeededRequest(const SeededRequest& request) {
  TALLY_RETURN_IF_ERROR(ValidateViewRequest(request.plain));
  for (const int bits : {request.node_bits, request.row_bits}) {
    if (bits < kMinFingerprintBits || bits > kMaxFingerprintBits) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "seeded exchange asks for %d-bit fingerprints; widths are %d..%d",
          bits, kMinFingerprintBits, kMaxFingerprintBits));
    }
  }
  const uint64_t descendants = DescendantCount(request.plain);
  if (!request.known_nodes.empty() &&
      request.known_nodes.size() != descendants) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "seeded exchange sends %d known node fingerprints for %d descendants",
        request.known_nodes.size(), descendants));
  }
  if (request.rows_known) {
    uint64_t rows = 0;
    for (uint32_t n : request.known_rows_per_range) rows += n;
    if (request.known_rows_per_range.size() != request.plain.list.size() ||
        rows != request.known_rows.size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "seeded exchange sends %d known rows in %d ranges for %d listed "
          "ranges",
          request.known_rows.size(), request.known_rows_per_range.size(),
          request.plain.list.size()));
    }
    if (rows > kMaxEntriesPerExchange) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "seeded exchange sends %d known rows; the limit is %d", rows,
          kMaxEntriesPerExchange));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<SeededResponse> AnswerSeeded(TreeView& view,
                                            const SeededRequest& request) {
  TALLY_RETURN_IF_ERROR(ValidateSeededRequest(request));
  TALLY_ASSIGN_OR_RETURN(ViewResponse plain, view.Exchange(request.plain));
  if (plain.descendants.size() != DescendantCount(request.plain) ||
      plain.entries_per_range.size() != request.plain.list.size()) {
    return absl::InternalError(absl::StrFormat(
        "view answered %d digests and %d ranges for %d and %d",
        plain.descendants.size(), plain.entries_per_range.size(),
        DescendantCount(request.plain), request.plain.list.size()));
  }
  SeededResponse out;
  if (request.known_nodes.empty()) {
    out.descendants.reserve(plain.descendants.size());
    for (const NodeDigest& d : plain.descendants) {
      out.descendants.push_back(NodeDigest{
          NodeFingerprint(request.seed, d, request.node_bits), d.count});
    }
  } else {
    out.differs.resize(plain.descendants.size());
    for (size_t i = 0; i < plain.descendants.size(); ++i) {
      const NodeDigest& d = plain.descendants[i];
      const uint64_t f = NodeFingerprint(request.seed, d, request.node_bits);
      if (f == request.known_nodes[i]) continue;
      out.differs[i] = true;
      // Only the count travels: the caller knows the two differ.
      out.descendants.push_back(NodeDigest{0, d.count});
    }
  }
  if (!request.rows_known) {
    out.entries_per_range = std::move(plain.entries_per_range);
    out.entries = std::move(plain.entries);
    return out;
  }
  out.unmatched.assign(request.known_rows.size(), true);
  size_t pos = 0;
  size_t known = 0;
  for (size_t r = 0; r < request.plain.list.size(); ++r) {
    const size_t end = pos + plain.entries_per_range[r];
    const size_t known_end = known + request.known_rows_per_range[r];
    // Ranges hold a few rows (the diff lists only small ones): compare
    // every pair rather than build a set.
    uint32_t sent = 0;
    for (size_t i = pos; i < end; ++i) {
      const uint64_t f =
          RowFingerprint(request.seed, plain.entries[i], request.row_bits);
      bool matched = false;
      for (size_t k = known; k < known_end; ++k) {
        if (request.known_rows[k] == f) {
          out.unmatched[k] = false;
          matched = true;
        }
      }
      if (!matched) {
        out.entries.push_back(std::move(plain.entries[i]));
        ++sent;
      }
    }
    out.entries_per_range.push_back(sent);
    pos = end;
    known = known_end;
  }
  return out;
}

absl::StatusOr<SeededResponse> TreeView::ExchangeSeeded(
    const SeededRequest& request) {
  return AnswerSeeded(*this, request);
}

absl::Status ValidateSummaryTopLevels(int top_levels) {
  if (top_levels < 0 || top_levels > kMaxSummaryTopLevels) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a summary carries 0..%d levels below the root, not %d",
                        kMaxSummaryTopLevels, top_levels));
  }
  return absl::OkStatus();
}

DescendantAccumulator::DescendantAccumulator(const DescendRequest& request,
                                             std::vector<NodeDigest>* out)
    : out_(out),
      base_(out->size()),
      level_(request.node.level + request.levels_ahead),
      mask_((uint64_t{1} << request.levels_ahead) - 1) {
  out->resize(out->size() + (size_t{1} << request.levels_ahead));
}

// Nodes travel in groups: runs of one level and expansion with ascending
// indexes, each index as the delta from the one before (node/client/wire.cc).
class GroupSizer {
 public:
  void Add(const NodeRef& node, int levels_ahead) {
    if (!open_ || node.level != level_ || levels_ahead != ahead_ ||
        node.index < last_) {
      Close();
      open_ = true;
      level_ = node.level;
      ahead_ = levels_ahead;
      deltas_ = VarintSize(node.index);
    } else {
      deltas_ += VarintSize(node.index - last_);
    }
    last_ = node.index;
  }
  size_t Finish() {
    Close();
    return size_;
  }

 private:
  void Close() {
    if (!open_) return;
    // Protobuf leaves out fields that are zero.
    size_ += FieldSize((level_ != 0 ? 1 + VarintSize(level_) : 0) +
                       (ahead_ != 0 ? 1 + VarintSize(ahead_) : 0) +
                       FieldSize(deltas_));
    open_ = false;
  }
  bool open_ = false;
  int level_ = 0;
  int ahead_ = 0;
  uint64_t last_ = 0;
  size_t deltas_ = 0;
  size_t size_ = 0;
};

size_t WireSize(const ViewRequest& request) {
  GroupSizer descend;
  for (const DescendRequest& d : request.descend) {
    descend.Add(d.node, d.levels_ahead);
  }
  GroupSizer list;
  for (const NodeRef& range : request.list) list.Add(range, 0);
  return descend.Finish() + list.Finish();
}

size_t WireSize(const RowEntry& entry) {
  // Key, HLC (fixed64), origin as an index into the message's origin list
  // (names travel once per message), deleted flag, digest fingerprint.
  // A value, when the entry carries one, is one more bytes field.
  return FieldSize(
      FieldSize(entry.key.size()) + 1 + 8 + 2 + (entry.deleted ? 2 : 0) + 1 +
      8 + (entry.value.has_value() ? FieldSize(entry.value->size()) : 0));
}

size_t WireSize(const ViewResponse& response) {
  size_t size = 0;
  if (!response.descendants.empty()) {
    // Packed fixed64 fingerprints and packed varint counts.
    size_t counts = 0;
    for (const NodeDigest& d : response.descendants) {
      counts += VarintSize(d.count);
    }
    size += FieldSize(8 * response.descendants.size()) + FieldSize(counts);
  }
  if (!response.entries_per_range.empty()) {
    size_t counts = 0;
    for (uint32_t n : response.entries_per_range) counts += VarintSize(n);
    size += FieldSize(counts);
  }
  for (const RowEntry& e : response.entries) size += WireSize(e);
  return size;
}

size_t WireSize(const ViewSummary& summary) {
  size_t size = 1 + VarintSize(summary.depth) + FieldSize(16) + 1 +
                VarintSize(summary.row_count);
  if (!summary.top.empty()) {
    size_t counts = 0;
    for (const NodeDigest& d : summary.top) counts += VarintSize(d.count);
    size += FieldSize(8 * summary.top.size()) + FieldSize(counts);
  }
  return size;
}

size_t WireSize(const SeededRequest& request) {
  // The plain part, a flag, the seed (fixed64) and the two widths.
  size_t size = WireSize(request.plain) + 2 + 9 + 2 + 2;
  if (!request.known_nodes.empty()) {
    size +=
        FieldSize(PackedBytes(request.known_nodes.size(), request.node_bits));
  }
  if (request.rows_known) {
    size_t counts = 0;
    for (uint32_t n : request.known_rows_per_range) counts += VarintSize(n);
    size += 2 + FieldSize(counts) +
            FieldSize(PackedBytes(request.known_rows.size(), request.row_bits));
  }
  return size;
}

size_t WireSize(const SeededResponse& response, const SeededRequest& request) {
  size_t size = 0;
  if (!response.descendants.empty()) {
    size_t counts = 0;
    for (const NodeDigest& d : response.descendants) {
      counts += VarintSize(d.count);
    }
    // With known nodes the fingerprints of those that differ stay home.
    if (request.known_nodes.empty()) {
      size += FieldSize(
          PackedBytes(response.descendants.size(), request.node_bits));
    }
    size += FieldSize(counts);
  }
  if (!response.differs.empty()) {
    size += FieldSize(PackedBytes(response.differs.size(), 1));
  }
  if (!response.entries_per_range.empty()) {
    size_t counts = 0;
    for (uint32_t n : response.entries_per_range) counts += VarintSize(n);
    size += FieldSize(counts);
  }
  for (const RowEntry& e : response.entries) size += WireSize(e);
  if (!response.unmatched.empty()) {
    size += FieldSize(PackedBytes(response.unmatched.size(), 1));
  }
  return size;
}

}  // namespace tree
}  // namespace tally
