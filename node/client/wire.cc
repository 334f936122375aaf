#include "node/client/wire.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "tree/fingerprint.h"
#include "tree/status_macros.h"

namespace tally {
namespace node {
namespace {

absl::StatusOr<tree::Digest128> DigestFromBytes(const std::string& bytes,
                                                absl::string_view what) {
  if (bytes.size() != 16) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s is %d bytes; digests are 16 bytes", what, bytes.size()));
  }
  return tree::Digest128::Load(bytes.data());
}

std::string DigestBytes(const tree::Digest128& d) {
  std::string out;
  d.AppendTo(&out);
  return out;
}

}  // namespace

uint32_t OriginDictionary::Index(const std::string& origin) {
  auto [it, inserted] =
      index_.emplace(origin, static_cast<uint32_t>(names_.size()));
  if (inserted) names_.push_back(origin);
  return it->second;
}

void OriginDictionary::MoveTo(
    google::protobuf::RepeatedPtrField<std::string>* out) {
  for (std::string& name : names_) out->Add(std::move(name));
  names_.clear();
  index_.clear();
}

void ToProto(const tree::Version& version, v1::Version* out) {
  out->set_hlc(version.timestamp.raw());
  out->set_origin(version.origin);
}

absl::StatusOr<tree::Version> FromProto(const v1::Version& version) {
  TALLY_RETURN_IF_ERROR(storage::ValidateNodeName(version.origin()));
  if (version.hlc() == 0) {
    return absl::InvalidArgumentError("version has a zero timestamp");
  }
  return tree::Version{tree::HlcTimestamp::FromRaw(version.hlc()),
                       version.origin()};
}

void ToProto(const tree::NodeRef& node, v1::NodeRef* out) {
  out->set_level(static_cast<uint32_t>(node.level));
  out->set_index(node.index);
}

absl::StatusOr<tree::NodeRef> FromProto(const v1::NodeRef& node) {
  const tree::NodeRef ref{
      static_cast<int>(std::min<uint32_t>(node.level(), 65)), node.index()};
  if (node.level() > 64 || !ref.IsValid()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "invalid token range: level %d, index %d (level must be 0..64 and "
        "index below 2^level)",
        node.level(), node.index()));
  }
  return ref;
}

void ToProto(const tree::RowEntry& entry, OriginDictionary* origins,
             v1::RowEntry* out) {
  out->set_key(entry.key);
  out->set_hlc(entry.version.timestamp.raw());
  out->set_origin(origins->Index(entry.version.origin));
  out->set_deleted(entry.deleted);
  out->set_fingerprint(entry.digest.Fingerprint());
  if (entry.value.has_value()) out->set_value(*entry.value);
}

absl::StatusOr<tree::RowEntry> FromProto(
    const v1::RowEntry& entry,
    const google::protobuf::RepeatedPtrField<std::string>& origins) {
  if (entry.origin() >= static_cast<uint32_t>(origins.size())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "row entry names origin %d of %d", entry.origin(), origins.size()));
  }
  if (entry.key().empty()) {
    return absl::InvalidArgumentError("row entry has an empty key");
  }
  tree::RowEntry out;
  out.key = entry.key();
  out.token = tree::TokenOf(out.key);
  out.version.timestamp = tree::HlcTimestamp::FromRaw(entry.hlc());
  out.version.origin = origins.Get(static_cast<int>(entry.origin()));
  out.deleted = entry.deleted();
  // Only the fingerprint travels; the diff compares fingerprints.
  out.digest = tree::Digest128{0, entry.fingerprint()};
  if (entry.has_value()) {
    if (entry.deleted() && !entry.value().empty()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("row entry '%s' is a tombstone that carries a value",
                          absl::CHexEscape(entry.key().substr(0, 64))));
    }
    out.value = entry.value();
  }
  return out;
}

void ToProto(const storage::Row& row, v1::Row* out) {
  out->set_key(row.key);
  out->set_value(row.value);
  ToProto(row.version, out->mutable_version());
  out->set_deleted(row.deleted);
}

absl::StatusOr<storage::Mutation> MutationFromProto(const std::string& keyspace,
                                                    const v1::Row& row) {
  if (!row.has_version()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("row '%s' has no version; replicated rows keep theirs",
                        absl::CHexEscape(row.key().substr(0, 64))));
  }
  if (row.deleted() && !row.value().empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tombstone '%s' carries a value",
                        absl::CHexEscape(row.key().substr(0, 64))));
  }
  storage::Mutation m;
  m.keyspace = keyspace;
  m.key = row.key();
  m.value = row.value();
  m.deleted = row.deleted();
  TALLY_ASSIGN_OR_RETURN(m.version, FromProto(row.version()));
  return m;
}

namespace {

// Appends `node` to the last group when it continues it (same level and
// expansion, index not below the last), else starts a group.
void AddToGroups(const tree::NodeRef& node, int levels_ahead,
                 google::protobuf::RepeatedPtrField<v1::NodeGroup>* groups,
                 uint64_t* last_index) {
  v1::NodeGroup* group =
      groups->empty() ? nullptr : &groups->at(groups->size() - 1);
  if (group == nullptr || group->level() != static_cast<uint32_t>(node.level) ||
      group->levels_ahead() != static_cast<uint32_t>(levels_ahead) ||
      node.index < *last_index) {
    group = groups->Add();
    group->set_level(static_cast<uint32_t>(node.level));
    group->set_levels_ahead(static_cast<uint32_t>(levels_ahead));
    group->add_index_deltas(node.index);
  } else {
    group->add_index_deltas(node.index - *last_index);
  }
  *last_index = node.index;
}

// Expands groups into nodes, validating each.
absl::Status ExpandGroups(
    const google::protobuf::RepeatedPtrField<v1::NodeGroup>& groups,
    const std::function<absl::Status(const tree::NodeRef&, int)>& add) {
  for (const v1::NodeGroup& group : groups) {
    uint64_t index = 0;
    for (int i = 0; i < group.index_deltas_size(); ++i) {
      const uint64_t next = index + group.index_deltas(i);
      if (i > 0 && next < index) {
        return absl::InvalidArgumentError("node group indexes overflow");
      }
      index = i == 0 ? group.index_deltas(0) : next;
      v1::NodeRef ref;
      ref.set_level(group.level());
      ref.set_index(index);
      TALLY_ASSIGN_OR_RETURN(tree::NodeRef node, FromProto(ref));
      TALLY_RETURN_IF_ERROR(add(node, static_cast<int>(std::min<uint32_t>(
                                          group.levels_ahead(), 1000))));
    }
  }
  return absl::OkStatus();
}

}  // namespace

void ToProto(const tree::ViewRequest& request, v1::ExchangeRequest* out) {
  uint64_t last = 0;
  for (const tree::DescendRequest& d : request.descend) {
    AddToGroups(d.node, d.levels_ahead, out->mutable_descend_groups(), &last);
  }
  last = 0;
  for (const tree::NodeRef& range : request.list) {
    AddToGroups(range, 0, out->mutable_list_groups(), &last);
  }
}

absl::StatusOr<tree::ViewRequest> FromProto(
    const v1::ExchangeRequest& request) {
  // Check sizes before building anything from them.
  if (static_cast<uint64_t>(request.descend_size()) >
          tree::kMaxDescendantsPerExchange ||
      static_cast<uint64_t>(request.list_size()) >
          tree::kMaxListRangesPerExchange) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "exchange names %d nodes and %d ranges; the limits are %d and %d",
        request.descend_size(), request.list_size(),
        tree::kMaxDescendantsPerExchange, tree::kMaxListRangesPerExchange));
  }
  uint64_t grouped_descend = 0;
  uint64_t grouped_list = 0;
  for (const v1::NodeGroup& g : request.descend_groups()) {
    grouped_descend += g.index_deltas_size();
  }
  for (const v1::NodeGroup& g : request.list_groups()) {
    grouped_list += g.index_deltas_size();
  }
  if ((grouped_descend > 0 || grouped_list > 0) &&
      (request.descend_size() > 0 || request.list_size() > 0)) {
    return absl::InvalidArgumentError(
        "an exchange names its nodes one by one or in groups, not both");
  }
  if (grouped_descend > tree::kMaxDescendantsPerExchange ||
      grouped_list > tree::kMaxListRangesPerExchange) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "exchange names %d nodes and %d ranges; the limits are %d and %d",
        grouped_descend, grouped_list, tree::kMaxDescendantsPerExchange,
        tree::kMaxListRangesPerExchange));
  }
  tree::ViewRequest out;
  TALLY_RETURN_IF_ERROR(ExpandGroups(
      request.descend_groups(), [&](const tree::NodeRef& node, int ahead) {
        out.descend.push_back(tree::DescendRequest{node, ahead});
        return absl::OkStatus();
      }));
  TALLY_RETURN_IF_ERROR(
      ExpandGroups(request.list_groups(), [&](const tree::NodeRef& node, int) {
        out.list.push_back(node);
        return absl::OkStatus();
      }));
  for (const v1::DescendRequest& d : request.descend()) {
    TALLY_ASSIGN_OR_RETURN(tree::NodeRef node, FromProto(d.node()));
    const int ahead =
        static_cast<int>(std::min<uint32_t>(d.levels_ahead(), 1000));
    out.descend.push_back(tree::DescendRequest{node, ahead});
  }
  for (const v1::NodeRef& range : request.list()) {
    TALLY_ASSIGN_OR_RETURN(tree::NodeRef node, FromProto(range));
    out.list.push_back(node);
  }
  TALLY_RETURN_IF_ERROR(tree::ValidateViewRequest(out));
  return out;
}

void ToProto(const tree::ViewResponse& response, v1::ExchangeResponse* out) {
  out->mutable_fingerprints()->Reserve(
      static_cast<int>(response.descendants.size()));
  out->mutable_counts()->Reserve(static_cast<int>(response.descendants.size()));
  for (const tree::NodeDigest& d : response.descendants) {
    out->add_fingerprints(d.fingerprint);
    out->add_counts(d.count);
  }
  for (uint32_t n : response.entries_per_range) out->add_entries_per_range(n);
  OriginDictionary origins;
  for (const tree::RowEntry& e : response.entries) {
    ToProto(e, &origins, out->add_entries());
  }
  origins.MoveTo(out->mutable_origins());
}

absl::StatusOr<tree::ViewResponse> FromProto(
    const v1::ExchangeResponse& response) {
  if (response.fingerprints_size() != response.counts_size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("exchange answer has %d fingerprints but %d counts",
                        response.fingerprints_size(), response.counts_size()));
  }
  tree::ViewResponse out;
  out.descendants.reserve(response.fingerprints_size());
  for (int i = 0; i < response.fingerprints_size(); ++i) {
    out.descendants.push_back(
        tree::NodeDigest{response.fingerprints(i), response.counts(i)});
  }
  out.entries_per_range.assign(response.entries_per_range().begin(),
                               response.entries_per_range().end());
  out.entries.reserve(response.entries_size());
  for (const v1::RowEntry& e : response.entries()) {
    TALLY_ASSIGN_OR_RETURN(tree::RowEntry entry,
                           FromProto(e, response.origins()));
    out.entries.push_back(std::move(entry));
  }
  return out;
}

namespace {

std::string PackFlags(const std::vector<bool>& flags) {
  std::vector<uint64_t> values(flags.begin(), flags.end());
  return tree::PackBits(values, 1);
}

absl::StatusOr<std::vector<bool>> UnpackFlags(const std::string& packed,
                                              size_t count) {
  TALLY_ASSIGN_OR_RETURN(std::vector<uint64_t> values,
                         tree::UnpackBits(packed, 1, count));
  return std::vector<bool>(values.begin(), values.end());
}

uint64_t DescendantsAskedFor(const tree::ViewRequest& request) {
  uint64_t n = 0;
  for (const tree::DescendRequest& d : request.descend) {
    n += uint64_t{1} << d.levels_ahead;
  }
  return n;
}

}  // namespace

void ToProto(const tree::SeededRequest& request, v1::ExchangeRequest* out) {
  ToProto(request.plain, out);
  out->set_seeded(true);
  out->set_seed(request.seed);
  out->set_node_bits(static_cast<uint32_t>(request.node_bits));
  out->set_row_bits(static_cast<uint32_t>(request.row_bits));
  if (!request.known_nodes.empty()) {
    out->set_known_nodes(
        tree::PackBits(request.known_nodes, request.node_bits));
  }
  if (request.rows_known) {
    out->set_rows_known(true);
    for (uint32_t n : request.known_rows_per_range) {
      out->add_known_rows_per_range(n);
    }
    out->set_known_rows(tree::PackBits(request.known_rows, request.row_bits));
  }
}

absl::StatusOr<tree::SeededRequest> SeededFromProto(
    const v1::ExchangeRequest& request) {
  if (!request.seeded()) {
    return absl::InvalidArgumentError("exchange request is not seeded");
  }
  tree::SeededRequest out;
  TALLY_ASSIGN_OR_RETURN(out.plain, FromProto(request));
  out.seed = request.seed();
  out.node_bits = static_cast<int>(std::min<uint32_t>(request.node_bits(), 65));
  out.row_bits = static_cast<int>(std::min<uint32_t>(request.row_bits(), 65));
  for (const int bits : {out.node_bits, out.row_bits}) {
    if (bits < tree::kMinFingerprintBits || bits > tree::kMaxFingerprintBits) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "seeded exchange asks for %d-bit fingerprints; widths are %d..%d",
          bits, tree::kMinFingerprintBits, tree::kMaxFingerprintBits));
    }
  }
  if (!request.known_nodes().empty()) {
    TALLY_ASSIGN_OR_RETURN(
        out.known_nodes, tree::UnpackBits(request.known_nodes(), out.node_bits,
                                          DescendantsAskedFor(out.plain)));
  }
  if (request.rows_known()) {
    out.rows_known = true;
    uint64_t rows = 0;
    for (uint32_t n : request.known_rows_per_range()) rows += n;
    if (rows > tree::kMaxEntriesPerExchange) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "seeded exchange sends %d known rows; the limit is %d", rows,
          tree::kMaxEntriesPerExchange));
    }
    out.known_rows_per_range.assign(request.known_rows_per_range().begin(),
                                    request.known_rows_per_range().end());
    TALLY_ASSIGN_OR_RETURN(out.known_rows,
                           tree::UnpackBits(request.known_rows(), out.row_bits,
                                            static_cast<size_t>(rows)));
  }
  TALLY_RETURN_IF_ERROR(tree::ValidateSeededRequest(out));
  return out;
}

void ToProto(const tree::SeededResponse& response,
             const tree::SeededRequest& request, v1::ExchangeResponse* out) {
  if (request.known_nodes.empty()) {
    std::vector<uint64_t> fingerprints;
    fingerprints.reserve(response.descendants.size());
    for (const tree::NodeDigest& d : response.descendants) {
      fingerprints.push_back(d.fingerprint);
    }
    if (!fingerprints.empty()) {
      out->set_packed_fingerprints(
          tree::PackBits(fingerprints, request.node_bits));
    }
  } else {
    out->set_differs(PackFlags(response.differs));
  }
  out->mutable_counts()->Reserve(static_cast<int>(response.descendants.size()));
  for (const tree::NodeDigest& d : response.descendants) {
    out->add_counts(d.count);
  }
  for (uint32_t n : response.entries_per_range) out->add_entries_per_range(n);
  OriginDictionary origins;
  for (const tree::RowEntry& e : response.entries) {
    ToProto(e, &origins, out->add_entries());
  }
  origins.MoveTo(out->mutable_origins());
  if (request.rows_known) out->set_unmatched(PackFlags(response.unmatched));
}

absl::StatusOr<tree::SeededResponse> SeededFromProto(
    const v1::ExchangeResponse& response, const tree::SeededRequest& request) {
  tree::SeededResponse out;
  const uint64_t asked = DescendantsAskedFor(request.plain);
  if (request.known_nodes.empty()) {
    TALLY_ASSIGN_OR_RETURN(
        const std::vector<uint64_t> fingerprints,
        tree::UnpackBits(response.packed_fingerprints(), request.node_bits,
                         static_cast<size_t>(asked)));
    if (static_cast<uint64_t>(response.counts_size()) != asked) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "seeded exchange answer has %d counts for %d descendants",
          response.counts_size(), asked));
    }
    out.descendants.reserve(fingerprints.size());
    for (size_t i = 0; i < fingerprints.size(); ++i) {
      out.descendants.push_back(tree::NodeDigest{
          fingerprints[i], response.counts(static_cast<int>(i))});
    }
  } else {
    TALLY_ASSIGN_OR_RETURN(
        out.differs,
        UnpackFlags(response.differs(), static_cast<size_t>(asked)));
    const int differing = static_cast<int>(
        std::count(out.differs.begin(), out.differs.end(), true));
    if (response.counts_size() != differing) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "seeded exchange answer has %d counts for %d differing descendants",
          response.counts_size(), differing));
    }
    for (uint64_t count : response.counts()) {
      out.descendants.push_back(tree::NodeDigest{0, count});
    }
  }
  out.entries_per_range.assign(response.entries_per_range().begin(),
                               response.entries_per_range().end());
  uint64_t entries = 0;
  for (uint32_t n : out.entries_per_range) entries += n;
  if (out.entries_per_range.size() != request.plain.list.size() ||
      entries != static_cast<uint64_t>(response.entries_size())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "seeded exchange answer has %d ranges of %d entries for %d ranges",
        out.entries_per_range.size(), response.entries_size(),
        request.plain.list.size()));
  }
  out.entries.reserve(response.entries_size());
  for (const v1::RowEntry& e : response.entries()) {
    TALLY_ASSIGN_OR_RETURN(tree::RowEntry entry,
                           FromProto(e, response.origins()));
    out.entries.push_back(std::move(entry));
  }
  if (request.rows_known) {
    TALLY_ASSIGN_OR_RETURN(
        out.unmatched,
        UnpackFlags(response.unmatched(), request.known_rows.size()));
  }
  return out;
}

absl::Status SummaryToProto(tree::TreeView& view, absl::string_view name,
                            int top_levels, v1::KeyspaceSummary* out) {
  TALLY_ASSIGN_OR_RETURN(tree::ViewSummary summary, view.Summary(top_levels));
  out->set_name(std::string(name));
  out->set_depth(static_cast<uint32_t>(summary.depth));
  out->set_root(DigestBytes(summary.root));
  out->set_row_count(summary.row_count);
  for (const tree::NodeDigest& d : summary.top) {
    out->add_top_fingerprints(d.fingerprint);
    out->add_top_counts(d.count);
  }
  return absl::OkStatus();
}

absl::StatusOr<tree::ViewSummary> SummaryFromProto(
    const v1::KeyspaceSummary& summary) {
  if (summary.top_fingerprints_size() != summary.top_counts_size()) {
    return absl::InvalidArgumentError(
        "keyspace summary has mismatched top fingerprints and counts");
  }
  tree::ViewSummary out;
  out.depth = static_cast<int>(summary.depth());
  TALLY_ASSIGN_OR_RETURN(out.root,
                         DigestFromBytes(summary.root(), "root digest"));
  out.row_count = summary.row_count();
  for (int i = 0; i < summary.top_fingerprints_size(); ++i) {
    out.top.push_back(
        tree::NodeDigest{summary.top_fingerprints(i), summary.top_counts(i)});
  }
  return out;
}

absl::Status CheckAnswerSize(size_t bytes, absl::string_view what,
                             absl::string_view hint) {
  if (bytes <= static_cast<size_t>(kMaxMessageBytes)) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrFormat(
      "the %s answer would be %d bytes or more; the limit is %d bytes (%s)",
      what, bytes, kMaxMessageBytes, hint));
}

}  // namespace node
}  // namespace tally
