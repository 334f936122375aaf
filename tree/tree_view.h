// TreeView: what the diff algorithm needs from one side of a comparison.
//
// A view answers batched questions about one replica's keyspace: its summary
// (depth, root digest, row count); the digests of descendants of a set of
// nodes several levels down, computed from the stored tree above its leaves
// and by range scans below them; the rows (key, version, digest) of small
// token ranges; and a streaming scan of large ranges. Every call is one round
// trip when the view is remote, so the diff batches everything it can.
//
//   ViewRequest request;
//   request.descend.push_back({NodeRef{0, 0}, 4});  // 16 children of root
//   request.list.push_back(NodeRef{20, 1234});      // rows of one range
//   absl::StatusOr<ViewResponse> response = view.Exchange(request);
//
// Implementations: MemoryTreeView (tree/memory_tree_view.h) over rows held in
// memory, the store's view over one LevelDB snapshot per call, and the remote
// view that carries the same calls over gRPC.
//
// Thread-safety: a view is used by one diff at a time; implementations say
// whether more is allowed.
#ifndef TALLY_TREE_TREE_VIEW_H_
#define TALLY_TREE_TREE_VIEW_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tree/digest.h"
#include "tree/token.h"
#include "tree/version.h"

namespace tally {
namespace tree {

// One row as a comparison sees it. `digest` is RowDigest() of the row, so it
// covers version, deleted flag and value. Over a network only its
// Fingerprint() travels (the high half is then zero): compare entries by
// Fingerprint().
//
// `value` is set only by a scan asked to carry values
// (TreeView::ScanWithValues), and only where the view could: the repair
// then writes the row without fetching it again by key. It is the value at
// the same snapshot as the version and digest beside it.
struct RowEntry {
  Token token = 0;
  std::string key;
  Version version;
  bool deleted = false;
  Digest128 digest;
  std::optional<std::string> value;
};

// What travels for one node: a 64-bit fingerprint of its digest and its row
// count. The fingerprint of a XOR is the XOR of the fingerprints.
struct NodeDigest {
  uint64_t fingerprint = 0;
  uint64_t count = 0;

  friend bool operator==(const NodeDigest& a, const NodeDigest& b) {
    return a.fingerprint == b.fingerprint && a.count == b.count;
  }
  friend bool operator!=(const NodeDigest& a, const NodeDigest& b) {
    return !(a == b);
  }
};

struct ViewSummary {
  int depth = 0;
  Digest128 root;
  uint64_t row_count = 0;
  // The 2^top_levels nodes `top_levels` below the root, when asked for:
  // the first descent step travels with the summary, in the same round.
  std::vector<NodeDigest> top;
};

// Bytes a view moved over a network, as serialized.
struct ViewTraffic {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
};

// The most levels a summary may carry below the root.
inline constexpr int kMaxSummaryTopLevels = 8;

// Asks for the 2^levels_ahead descendants of `node` at level
// node.level + levels_ahead, in index order.
struct DescendRequest {
  NodeRef node;
  int levels_ahead = 1;
};

struct ViewRequest {
  std::vector<DescendRequest> descend;
  // Token ranges whose rows to list, each expected to hold few rows.
  std::vector<NodeRef> list;
};

struct ViewResponse {
  // For each descend request in order, its 2^levels_ahead descendants.
  std::vector<NodeDigest> descendants;
  // For each list range in order, how many of `entries` belong to it; the
  // entries of a range are sorted by (token, key).
  std::vector<uint32_t> entries_per_range;
  std::vector<RowEntry> entries;
};

// A seeded exchange: the questions of `plain`, answered with fingerprints of
// `node_bits` and `row_bits` under `seed` (tree/fingerprint.h) instead of
// the fixed 64-bit ones; and, when the caller sends its own fingerprints,
// with only what differs from them. The diff uses it when both views answer
// it (TreeView::AnswersSeeded): a node from before it answers only Exchange.
struct SeededRequest {
  ViewRequest plain;
  uint64_t seed = 0;
  int node_bits = 64;  // kMinFingerprintBits..kMaxFingerprintBits
  int row_bits = 64;
  // The caller's NodeFingerprint of every descendant `plain.descend` asks
  // for, in answer order; or empty, to be sent this view's.
  std::vector<uint64_t> known_nodes;
  // Whether the caller sends the RowFingerprint of its own rows of each
  // listed range (known_rows_per_range[i] of them, in known_rows), to be
  // sent only the rows that differ; else every row is listed.
  bool rows_known = false;
  std::vector<uint32_t> known_rows_per_range;
  std::vector<uint64_t> known_rows;
};

struct SeededResponse {
  // Without known_nodes: every descendant, its fingerprint its
  // NodeFingerprint. With known_nodes: differs[i] for every descendant, and
  // in `descendants` only those that differ, in order, with this view's
  // counts (and fingerprint 0: the caller knows they differ).
  std::vector<NodeDigest> descendants;
  std::vector<bool> differs;
  // For each listed range, how many of `entries` belong to it: every row,
  // or with rows_known only the rows no known row of the range matches.
  // Entries carry their 64-bit digest fingerprint.
  std::vector<uint32_t> entries_per_range;
  std::vector<RowEntry> entries;
  // With rows_known: for every known row, that no row here matches it.
  std::vector<bool> unmatched;
};

// Limits every view enforces on one Exchange, so that a request and its
// answer stay bounded in memory (and under gRPC's 4 MB message default).
inline constexpr int kMaxLevelsAhead = 16;
inline constexpr uint64_t kMaxDescendantsPerExchange = 1 << 16;
inline constexpr uint64_t kMaxListRangesPerExchange = 1 << 14;
inline constexpr uint64_t kMaxEntriesPerExchange = 1 << 15;
// Listed rows carry their keys (up to 16 KiB each): an answer stops at this
// many bytes of rows (WireSize) however few they are.
inline constexpr uint64_t kMaxEntryBytesPerExchange = 4 << 20;

// Receives rows streamed by TreeView::Scan, in (token, key) order per range.
using EntrySink = std::function<absl::Status(const RowEntry&)>;

class TreeView {
 public:
  virtual ~TreeView() = default;

  // Depth, root digest (all 128 bits) and row count, and the nodes
  // `top_levels` (0..kMaxSummaryTopLevels) below the root. Returns
  // kInvalidArgument for top_levels out of range.
  virtual absl::StatusOr<ViewSummary> Summary(int top_levels) = 0;

  // What this view has moved over a network so far: zero for a local view,
  // the serialized sizes for a remote one, or nullopt when the view cannot
  // tell (the diff then counts bytes with WireSize(), as if it were remote).
  virtual std::optional<ViewTraffic> MeasuredTraffic() const {
    return std::nullopt;
  }

  // Answers one batch. Returns kInvalidArgument for a malformed request
  // (invalid node, levels_ahead outside 1..kMaxLevelsAhead or past level 64)
  // and kResourceExhausted when the request exceeds a kMax*PerExchange limit.
  virtual absl::StatusOr<ViewResponse> Exchange(const ViewRequest& request) = 0;

  // Answers a seeded exchange. The default answers it in this process from
  // Exchange(request.plain) (AnswerSeeded below); a remote view sends it to
  // its node. Returns kInvalidArgument for a malformed request
  // (ValidateSeededRequest) and what Exchange returns.
  virtual absl::StatusOr<SeededResponse> ExchangeSeeded(
      const SeededRequest& request);

  // Whether ExchangeSeeded can be used: true, except for a remote view whose
  // node predates it (known once Summary() has answered).
  virtual bool AnswersSeeded() const { return true; }

  // Streams every row of `ranges` to `sink`, range by range. Stops at and
  // returns the first error of the sink. Memory stays bounded whatever the
  // number of rows.
  virtual absl::Status Scan(absl::Span<const NodeRef> ranges,
                            const EntrySink& sink) = 0;

  // Scan, with each entry's value where the view can carry it
  // (RowEntry::value): a diff asks for it in ranges empty on the other
  // side, whose every row the repair is about to copy. An entry without a
  // value is still a row like any other: the caller fetches it by key. The
  // default is Scan (no values).
  virtual absl::Status ScanWithValues(absl::Span<const NodeRef> ranges,
                                      const EntrySink& sink) {
    return Scan(ranges, sink);
  }
};

// Checks a request against the limits above; views call it first.
absl::Status ValidateViewRequest(const ViewRequest& request);

// Checks a seeded request: its plain part, the widths, and that the known
// fingerprints match the nodes and ranges asked for.
absl::Status ValidateSeededRequest(const SeededRequest& request);

// Answers a seeded request from `view`'s plain answer to request.plain.
absl::StatusOr<SeededResponse> AnswerSeeded(TreeView& view,
                                            const SeededRequest& request);

// Checks Summary()'s argument.
absl::Status ValidateSummaryTopLevels(int top_levels);

// Adds rows of `node`'s range into the digests of its descendants
// `levels_ahead` below: the way views answer a descend request below their
// stored leaves.
class DescendantAccumulator {
 public:
  // Appends 2^levels_ahead zero digests to `out`, to be filled by Add().
  // REQUIRES: the request passed ValidateViewRequest().
  DescendantAccumulator(const DescendRequest& request,
                        std::vector<NodeDigest>* out);

  // REQUIRES: request.node.Contains(token).
  void Add(Token token, const Digest128& digest) {
    NodeDigest& d = (*out_)[base_ + (NodeIndexOf(token, level_) & mask_)];
    d.fingerprint ^= digest.Fingerprint();
    d.count += 1;
  }

 private:
  std::vector<NodeDigest>* out_;
  size_t base_;
  int level_;
  uint64_t mask_;
};

// Payload sizes of the messages above in tally's wire encoding (protobuf:
// varint lengths and counts, fixed 64-bit fingerprints), so that every view
// and the diff count bytes the same way.
size_t WireSize(const ViewRequest& request);
size_t WireSize(const ViewResponse& response);
size_t WireSize(const RowEntry& entry);
size_t WireSize(const ViewSummary& summary);
size_t WireSize(const SeededRequest& request);
size_t WireSize(const SeededResponse& response, const SeededRequest& request);

}  // namespace tree
}  // namespace tally

#endif  // TALLY_TREE_TREE_VIEW_H_
