// Conversions between tally's types (tree/, storage/) and tally.v1 messages,
// with the validation every message from the network needs.
//
// Everything decoded here comes from another process: a malformed field
// gives kInvalidArgument naming it, never a crash.
//
// Thread-safe: pure functions; OriginDictionary is thread-compatible.
#ifndef TALLY_NODE_CLIENT_WIRE_H_
#define TALLY_NODE_CLIENT_WIRE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "storage/store.h"
#include "tally/v1/tally.pb.h"
#include "tree/tree_view.h"

namespace tally {
namespace node {

namespace v1 = ::tally::v1;

// Carried in every handshake; a peer speaking another version is refused.
inline constexpr uint32_t kProtocolVersion = 1;

// Per-message limits, so that every message stays under gRPC's 4 MB default.
inline constexpr size_t kMaxRowsPerMessage = 10'000;
inline constexpr size_t kMaxKeysPerFetch = 10'000;
inline constexpr size_t kMaxScanRanges = tree::kMaxListRangesPerExchange;
// Rows and entries are streamed in messages of about this many bytes.
inline constexpr size_t kStreamChunkBytes = 1 << 20;
// A Scan asked for values carries those of up to this size; a larger one
// is left out (the repair fetches it by key), so that one entry never
// stretches a chunk of kStreamChunkBytes much.
inline constexpr size_t kMaxScanValueBytes = 256 << 10;
// gRPC's default receive limit; requests and answers stay below it.
inline constexpr int kMaxMessageBytes = 4 * 1024 * 1024;
// Keyspaces one Handshake may name (each named once): with top_levels 8 a
// summary is up to ~4.7 KB, so the answer stays under kMaxMessageBytes.
inline constexpr int kMaxHandshakeKeyspaces = 1024;

// kResourceExhausted when an answer of `bytes` would pass kMaxMessageBytes,
// the limit every request is held to: the node refuses to send (or keep)
// what no client would accept. `what` names the call, `hint` what to ask
// for instead.
absl::Status CheckAnswerSize(size_t bytes, absl::string_view what,
                             absl::string_view hint);

// Each origin name travels once per message; entries carry an index.
class OriginDictionary {
 public:
  uint32_t Index(const std::string& origin);
  // Moves the names, in index order, into `out` and clears the dictionary.
  void MoveTo(google::protobuf::RepeatedPtrField<std::string>* out);
  bool empty() const { return names_.empty(); }

 private:
  absl::flat_hash_map<std::string, uint32_t> index_;
  std::vector<std::string> names_;
};

void ToProto(const tree::Version& version, v1::Version* out);
absl::StatusOr<tree::Version> FromProto(const v1::Version& version);

void ToProto(const tree::NodeRef& node, v1::NodeRef* out);
absl::StatusOr<tree::NodeRef> FromProto(const v1::NodeRef& node);

void ToProto(const tree::RowEntry& entry, OriginDictionary* origins,
             v1::RowEntry* out);
absl::StatusOr<tree::RowEntry> FromProto(
    const v1::RowEntry& entry,
    const google::protobuf::RepeatedPtrField<std::string>& origins);

void ToProto(const storage::Row& row, v1::Row* out);
// A row received from a peer, as a mutation that keeps its version.
// Returns kInvalidArgument for a row without a version or with a value on
// a tombstone.
absl::StatusOr<storage::Mutation> MutationFromProto(const std::string& keyspace,
                                                    const v1::Row& row);

void ToProto(const tree::ViewRequest& request, v1::ExchangeRequest* out);
// Also validates the request against tree::ValidateViewRequest.
absl::StatusOr<tree::ViewRequest> FromProto(const v1::ExchangeRequest& request);

void ToProto(const tree::ViewResponse& response, v1::ExchangeResponse* out);
absl::StatusOr<tree::ViewResponse> FromProto(
    const v1::ExchangeResponse& response);

// A seeded exchange (tree::SeededRequest) as ExchangeRequest.seeded, and
// back; decoding validates it (tree::ValidateSeededRequest).
void ToProto(const tree::SeededRequest& request, v1::ExchangeRequest* out);
absl::StatusOr<tree::SeededRequest> SeededFromProto(
    const v1::ExchangeRequest& request);

// Its answer; decoding checks it against the request it answers.
void ToProto(const tree::SeededResponse& response,
             const tree::SeededRequest& request, v1::ExchangeResponse* out);
absl::StatusOr<tree::SeededResponse> SeededFromProto(
    const v1::ExchangeResponse& response, const tree::SeededRequest& request);

// Summary of one keyspace, with the fingerprints and counts of the nodes
// `top_levels` below the root when top_levels > 0.
absl::Status SummaryToProto(tree::TreeView& view, absl::string_view name,
                            int top_levels, v1::KeyspaceSummary* out);
absl::StatusOr<tree::ViewSummary> SummaryFromProto(
    const v1::KeyspaceSummary& summary);

}  // namespace node
}  // namespace tally

#endif  // TALLY_NODE_CLIENT_WIRE_H_
