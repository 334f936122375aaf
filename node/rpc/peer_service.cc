#include "node/rpc/peer_service.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "node/client/grpc_status.h"
#include "node/client/wire.h"
#include "node/feed/read_ahead.h"
#include "node/rpc/internal/chunk_stream.h"
#include "node/rpc/internal/unary.h"
#include "node/rpc/internal/write_stream.h"
#include "node/rpc/stream_limiter.h"
#include "tree/status_macros.h"

namespace tally {
namespace node {
namespace {

using internal::FinishNow;
using internal::FinishOnPool;
using internal::Overloaded;

// The store's kNotFound does not say which node answered; a person reading
// the error on the other side of a session needs to know.
absl::Status KeyspaceNotFound(const storage::Store& store,
                              absl::string_view keyspace) {
  return absl::NotFoundError(
      absl::StrFormat("keyspace '%s' does not exist on node '%s'", keyspace,
                      store.node_name()));
}

absl::StatusOr<std::unique_ptr<tree::TreeView>> OpenView(
    storage::Store& store, absl::string_view keyspace) {
  absl::StatusOr<std::unique_ptr<tree::TreeView>> view =
      store.NewTreeView(keyspace);
  if (absl::IsNotFound(view.status())) {
    return KeyspaceNotFound(store, keyspace);
  }
  return view;
}

absl::Status HandshakeOnPool(storage::Store& store,
                             const HandshakeObserver& observer,
                             const std::string& peer_address,
                             const v1::HandshakeRequest& request,
                             v1::HandshakeResponse* response) {
  const int top_levels = static_cast<int>(request.top_levels());
  std::vector<std::string> names;
  if (request.keyspaces().empty()) {
    for (const storage::KeyspaceInfo& info : store.ListKeyspaces()) {
      names.push_back(info.name);
    }
  } else {
    names.assign(request.keyspaces().begin(), request.keyspaces().end());
  }
  response->set_protocol_version(kProtocolVersion);
  response->set_node_name(store.node_name());
  response->set_epoch(store.epoch());
  response->set_clock_unix_ms(store.clock().PhysicalMillis());
  response->set_seeded_exchange(true);
  for (const storage::DroppedKeyspaceInfo& dropped :
       store.ListDroppedKeyspaces()) {
    response->add_dropped_keyspaces(dropped.name);
  }
  size_t bytes = response->ByteSizeLong();
  for (const std::string& name : names) {
    absl::StatusOr<std::unique_ptr<tree::TreeView>> view =
        store.NewTreeView(name);
    // A keyspace the caller asks about and this node lacks is left out of
    // the answer rather than failing the handshake.
    if (absl::IsNotFound(view.status())) continue;
    TALLY_RETURN_IF_ERROR(view.status());
    v1::KeyspaceSummary* summary = response->add_keyspaces();
    TALLY_RETURN_IF_ERROR(SummaryToProto(**view, name, top_levels, summary));
    // The caller compares it with its own (node/sync/schema_check.h).
    TALLY_ASSIGN_OR_RETURN(*summary->mutable_schema_fingerprint(),
                           store.SchemaFingerprint(name));
    summary->set_schema_description(store.SchemaDescription(name));
    // Counted as it grows (a tag and a length prefix per summary), so that
    // an answer too large is never built whole.
    bytes += summary->ByteSizeLong() + 6;
    TALLY_RETURN_IF_ERROR(CheckAnswerSize(
        bytes, "handshake", "ask for fewer keyspaces or fewer top levels"));
  }
  if (observer != nullptr && !request.node_name().empty() &&
      request.scheduled()) {
    observer(peer_address, request.node_name(), request.epoch());
  }
  return absl::OkStatus();
}

absl::Status ExchangeOnPool(storage::Store& store, absl::string_view keyspace,
                            const tree::ViewRequest& query,
                            v1::ExchangeResponse* response) {
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<tree::TreeView> view,
                         OpenView(store, keyspace));
  TALLY_ASSIGN_OR_RETURN(tree::ViewResponse answer, view->Exchange(query));
  ToProto(answer, response);
  const absl::Status size = CheckAnswerSize(
      response->ByteSizeLong(), "exchange",
      "the rows listed are too large for one answer: list fewer ranges");
  // An answer that will not be sent is not kept until the call ends.
  if (!size.ok()) response->Clear();
  return size;
}

// A seeded exchange: the same questions, answered with short seeded
// fingerprints and, when the caller sent its own, with what differs.
absl::Status SeededExchangeOnPool(storage::Store& store,
                                  absl::string_view keyspace,
                                  const tree::SeededRequest& query,
                                  v1::ExchangeResponse* response) {
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<tree::TreeView> view,
                         OpenView(store, keyspace));
  TALLY_ASSIGN_OR_RETURN(tree::SeededResponse answer,
                         view->ExchangeSeeded(query));
  ToProto(answer, query, response);
  const absl::Status size = CheckAnswerSize(
      response->ByteSizeLong(), "exchange",
      "the rows listed are too large for one answer: list fewer ranges");
  if (!size.ok()) response->Clear();
  return size;
}

absl::Status ValidateHandshake(const v1::HandshakeRequest& request) {
  if (request.protocol_version() != kProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "peer speaks protocol version %d; this node speaks version %d",
        request.protocol_version(), kProtocolVersion));
  }
  if (request.top_levels() >
      static_cast<uint32_t>(tree::kMaxSummaryTopLevels)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "handshake asks for %d levels below the root; the limit is %d",
        request.top_levels(), tree::kMaxSummaryTopLevels));
  }
  if (!request.node_name().empty()) {
    TALLY_RETURN_IF_ERROR(storage::ValidateNodeName(request.node_name()));
  }
  if (request.keyspaces_size() > kMaxHandshakeKeyspaces) {
    return absl::InvalidArgumentError(
        absl::StrFormat("handshake names %d keyspaces; the limit is %d",
                        request.keyspaces_size(), kMaxHandshakeKeyspaces));
  }
  // A name given twice would be summarised twice: 100,000 copies of one
  // name once made a 234 MB answer.
  absl::flat_hash_set<absl::string_view> seen;
  for (const std::string& name : request.keyspaces()) {
    TALLY_RETURN_IF_ERROR(storage::ValidateKeyspaceName(name));
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "keyspace '%s' is named twice in the handshake; name each once",
          name));
    }
  }
  return absl::OkStatus();
}

// ------------------------------------------------------------------ Scan

// The token ranges that cover what is left of `range` after the entry
// (token, key), in (token, key) order: the one-token range of `token` (rows
// sharing it sort by key, and the caller skips keys up to `key`), then the
// aligned ranges that tile (token, range.last_token()]. At most 65 ranges.
std::vector<tree::NodeRef> RemainderAfter(const tree::NodeRef& range,
                                          tree::Token token) {
  std::vector<tree::NodeRef> out;
  out.push_back(tree::NodeRef{tree::kTokenBits, token});
  const tree::Token last = range.last_token();
  if (token == last) return out;
  tree::Token first = token + 1;
  while (true) {
    // The largest aligned block that starts at `first` and ends by `last`:
    // 2^bits tokens, bits no more than first's trailing zero bits.
    int bits = first == 0 ? tree::kTokenBits : __builtin_ctzll(first);
    auto span = [](int b) -> tree::Token {
      return b >= tree::kTokenBits ? ~tree::Token{0}
                                   : (tree::Token{1} << b) - 1;
    };
    while (bits > 0 && span(bits) > last - first) --bits;
    out.push_back(tree::NodeRef{tree::kTokenBits - bits,
                                bits >= tree::kTokenBits ? 0 : first >> bits});
    if (span(bits) == last - first) return out;
    first += span(bits) + 1;
  }
}

// Streams the entries of a set of token ranges (internal/chunk_stream.h
// has the steps).
//
// Validate refuses overlapping ranges: one small request naming the whole
// keyspace 16,384 times would make the node read it that often. Each chunk
// scans from where the last one stopped — range next_range_, after the
// entry resume_ — and reads its own snapshot: the rows of a range come in
// (token, key) order with none repeated or skipped, and a row written
// during the scan may or may not be seen (anti-entropy's next round sees
// it). Steps never overlap, so the fields below need no lock.
class ScanReactor final
    : public internal::ChunkStreamReactor<v1::ScanResponse> {
 public:
  ScanReactor(storage::Store* store, WorkerPool* pool, StreamLimiter* limiter,
              grpc::CallbackServerContext* context,
              const v1::ScanRequest* request)
      : ChunkStreamReactor(pool, limiter, context, "scan"),
        store_(store),
        request_(request) {}

 private:
  // Where the last chunk stopped inside ranges_[next_range_].
  struct Resume {
    tree::Token token = 0;
    std::string key;
  };

  absl::Status Validate() override {
    TALLY_RETURN_IF_ERROR(storage::ValidateKeyspaceName(request_->keyspace()));
    if (static_cast<size_t>(request_->ranges_size()) > kMaxScanRanges) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("scan names %d ranges; the limit is %d",
                          request_->ranges_size(), kMaxScanRanges));
    }
    ranges_.reserve(request_->ranges_size());
    for (const v1::NodeRef& range : request_->ranges()) {
      TALLY_ASSIGN_OR_RETURN(tree::NodeRef ref, FromProto(range));
      if (!ref.IsValid()) {
        return absl::InvalidArgumentError(
            absl::StrCat("scan names an invalid range: ", ref.DebugString()));
      }
      ranges_.push_back(ref);
    }
    std::vector<tree::NodeRef> sorted = ranges_;
    std::sort(sorted.begin(), sorted.end(),
              [](const tree::NodeRef& a, const tree::NodeRef& b) {
                return a.first_token() < b.first_token();
              });
    for (size_t i = 1; i < sorted.size(); ++i) {
      if (sorted[i].first_token() <= sorted[i - 1].last_token()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "scan ranges %s and %s overlap; name each row's range once",
            sorted[i - 1].DebugString(), sorted[i].DebugString()));
      }
    }
    return absl::OkStatus();
  }

  absl::Status FillChunk(v1::ScanResponse* message, bool* last) override {
    absl::StatusOr<std::unique_ptr<tree::TreeView>> view =
        OpenView(*store_, request_->keyspace());
    if (!view.ok()) return view.status();
    OriginDictionary origins;
    size_t bytes = 0;
    while (next_range_ < ranges_.size() && bytes < kStreamChunkBytes) {
      std::vector<tree::NodeRef> pieces;
      if (resume_.has_value()) {
        pieces = RemainderAfter(ranges_[next_range_], resume_->token);
      } else {
        pieces.push_back(ranges_[next_range_]);
      }
      bool full = false;
      auto sink = [&](const tree::RowEntry& entry) -> absl::Status {
        if (resume_.has_value() &&
            (entry.token < resume_->token ||
             (entry.token == resume_->token && entry.key <= resume_->key))) {
          return absl::OkStatus();  // sent by an earlier chunk
        }
        v1::RowEntry* out = message->add_entries();
        ToProto(entry, &origins, out);
        bytes += tree::WireSize(entry);
        if (out->has_value() && out->value().size() > kMaxScanValueBytes) {
          // Left out: the repair fetches it by key.
          bytes -= out->value().size();
          out->clear_value();
        }
        if (bytes < kStreamChunkBytes) return absl::OkStatus();
        full = true;
        resume_ = Resume{entry.token, entry.key};
        // Stops the view's scan; not an error.
        return absl::CancelledError("chunk full");
      };
      const absl::Status status = request_->with_values()
                                      ? (*view)->ScanWithValues(pieces, sink)
                                      : (*view)->Scan(pieces, sink);
      if (full) break;
      if (!status.ok()) return status;
      ++next_range_;
      resume_.reset();
    }
    origins.MoveTo(message->mutable_origins());
    *last = next_range_ == ranges_.size();
    return absl::OkStatus();
  }

  // Constant after construction.
  storage::Store* const store_;
  const v1::ScanRequest* const request_;

  // Used by one step at a time (see above).
  std::vector<tree::NodeRef> ranges_;
  size_t next_range_ = 0;
  std::optional<Resume> resume_;
};

// ------------------------------------------------------------- FetchRows

// Streams the rows of a list of keys (internal/chunk_stream.h has the
// steps). The first chunk checks that the keyspace exists; each takes the
// rows of the keys from next_key_ until the message is full, reading them
// ahead a window at a time with one Store::MultiGet (internal/read_ahead.h).
// Steps never overlap, so the fields below need no lock.
class FetchRowsReactor final
    : public internal::ChunkStreamReactor<v1::FetchRowsResponse> {
 public:
  FetchRowsReactor(storage::Store* store, WorkerPool* pool,
                   StreamLimiter* limiter, grpc::CallbackServerContext* context,
                   const v1::FetchRowsRequest* request)
      : ChunkStreamReactor(pool, limiter, context, "fetch"),
        store_(store),
        request_(request) {}

 private:
  absl::Status Validate() override {
    TALLY_RETURN_IF_ERROR(storage::ValidateKeyspaceName(request_->keyspace()));
    if (static_cast<size_t>(request_->keys_size()) > kMaxKeysPerFetch) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("fetch names %d keys; the limit is %d per request",
                          request_->keys_size(), kMaxKeysPerFetch));
    }
    for (int i = 0; i < request_->keys_size(); ++i) {
      if (request_->keys(i).empty()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "key %d of the fetch is empty; keys need 1 byte", i));
      }
    }
    return absl::OkStatus();
  }

  absl::Status FillChunk(v1::FetchRowsResponse* message, bool* last) override {
    if (next_key_ == 0) {
      absl::StatusOr<storage::KeyspaceInfo> info =
          store_->GetKeyspace(request_->keyspace());
      if (absl::IsNotFound(info.status())) {
        return KeyspaceNotFound(*store_, request_->keyspace());
      }
      TALLY_RETURN_IF_ERROR(info.status());
    }
    size_t bytes = 0;
    while (next_key_ < request_->keys_size() && bytes < kStreamChunkBytes) {
      if (read_next_ == read_.size()) {
        TALLY_RETURN_IF_ERROR(ReadKeys(kStreamChunkBytes - bytes));
      }
      const std::string& key = request_->keys(next_key_++);
      const absl::StatusOr<storage::Row>& row = read_[read_next_++];
      // A damaged row (DATA_LOSS, now marked for repair) is not sent: to
      // the fetcher it is missing here, as it is from this node's tree.
      if (absl::IsNotFound(row.status()) || absl::IsDataLoss(row.status())) {
        message->add_missing(key);
        bytes += key.size() + 8;
        continue;
      }
      // Changed in the backend since it was indexed (an application wrote
      // the sidecar's table): not sent, and the fetcher counts it; this
      // node's capture indexes the newer write.
      if (absl::IsAborted(row.status()) || absl::IsUnavailable(row.status())) {
        message->add_changed(key);
        bytes += key.size() + 8;
        continue;
      }
      TALLY_RETURN_IF_ERROR(row.status());
      ToProto(*row, message->add_rows());
      bytes +=
          row->key.size() + row->value.size() + row->version.origin.size() + 32;
    }
    *last = next_key_ == request_->keys_size();
    return absl::OkStatus();
  }

  // Reads the rows of the keys after next_key_ in one MultiGet, about as
  // many as fill `budget` bytes (rows read beyond the message wait in read_
  // for the next one).
  absl::Status ReadKeys(size_t budget) {
    const int count = static_cast<int>(std::min<size_t>(
        read_ahead_.Keys(budget),
        static_cast<size_t>(request_->keys_size() - next_key_)));
    const std::vector<absl::string_view> keys(
        request_->keys().begin() + next_key_,
        request_->keys().begin() + next_key_ + count);
    absl::StatusOr<std::vector<absl::StatusOr<storage::Row>>> rows =
        store_->MultiGet(request_->keyspace(), keys);
    if (absl::IsNotFound(rows.status())) {
      // No keyspace (checked at the first chunk): every key is missing.
      read_.assign(keys.size(), rows.status());
    } else {
      TALLY_RETURN_IF_ERROR(rows.status());
      read_ = *std::move(rows);
    }
    read_next_ = 0;
    size_t bytes = 0;
    for (size_t i = 0; i < read_.size(); ++i) {
      bytes += read_[i].ok() ? read_[i]->key.size() + read_[i]->value.size() +
                                   read_[i]->version.origin.size() + 32
                             : keys[i].size() + 8;
    }
    read_ahead_.Saw(read_.size(), bytes);
    return absl::OkStatus();
  }

  // Constant after construction.
  storage::Store* const store_;
  const v1::FetchRowsRequest* const request_;

  // Used by one step at a time (see above).
  int next_key_ = 0;
  // Rows of the keys from next_key_ on, read ahead: read_[read_next_] is
  // the row of request_->keys(next_key_).
  std::vector<absl::StatusOr<storage::Row>> read_;
  size_t read_next_ = 0;
  internal::ReadAhead read_ahead_;
};

// -------------------------------------------------------------- PushRows

// Rows from a peer or a repair: each message is one atomic store write
// under last writer wins or source override (internal/write_stream.h has
// the steps).
class PushRowsReactor final
    : public internal::WriteStreamReactor<v1::PushRowsRequest,
                                          v1::PushRowsResponse> {
 public:
  PushRowsReactor(storage::Store* store, WorkerPool* pool,
                  StreamLimiter* limiter, grpc::CallbackServerContext* context,
                  grpc::ByteBuffer* out)
      : WriteStreamReactor(pool, "push", out), store_(store) {
    Start(limiter, context);
  }

 private:
  absl::Status CheckMessage(const v1::PushRowsRequest& request) override {
    const size_t mutations =
        static_cast<size_t>(request.rows_size() + request.erase_size());
    if (mutations > kMaxRowsPerMessage) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "push message has %d rows and %d erases; the limit is %d per "
          "message",
          request.rows_size(), request.erase_size(), kMaxRowsPerMessage));
    }
    // proto3 keeps an enum value it does not know: without this check an
    // unknown mode was applied as last writer wins.
    if (request.mode() != v1::APPLY_MODE_LAST_WRITER_WINS &&
        request.mode() != v1::APPLY_MODE_SOURCE_OVERRIDE) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "push message has apply mode %d; this node knows %d (last writer "
          "wins) and %d (source override)",
          static_cast<int>(request.mode()), v1::APPLY_MODE_LAST_WRITER_WINS,
          v1::APPLY_MODE_SOURCE_OVERRIDE));
    }
    if (request.erase_size() > 0 &&
        request.mode() != v1::APPLY_MODE_SOURCE_OVERRIDE) {
      return absl::InvalidArgumentError(
          "erase is only allowed with APPLY_MODE_SOURCE_OVERRIDE; under last "
          "writer wins, send tombstones");
    }
    return absl::OkStatus();
  }

  absl::Status WriteMessage(v1::PushRowsRequest& request) override {
    storage::WriteRequest write;
    write.mode = request.mode() == v1::APPLY_MODE_SOURCE_OVERRIDE
                     ? storage::ApplyMode::kSourceOverride
                     : storage::ApplyMode::kLastWriterWins;
    write.mutations.reserve(request.rows_size() + request.erase_size());
    for (const v1::Row& row : request.rows()) {
      TALLY_ASSIGN_OR_RETURN(storage::Mutation m,
                             MutationFromProto(keyspace(), row));
      write.mutations.push_back(std::move(m));
    }
    for (const std::string& key : request.erase()) {
      write.mutations.push_back(storage::Mutation::Erase(keyspace(), key));
    }
    if (write.mutations.empty()) return absl::OkStatus();
    TALLY_ASSIGN_OR_RETURN(storage::WriteResult result,
                           store_->Write(std::move(write)));
    // Rows this node's backend did not take are still owed: the repair
    // that sent them fails for the keyspace, and a later one retries.
    TALLY_RETURN_IF_ERROR(storage::RejectionError(result));
    const size_t rows = static_cast<size_t>(request.rows_size());
    v1::PushRowsResponse& counts = response();
    for (size_t i = 0; i < result.applied.size(); ++i) {
      if (!result.applied[i]) {
        counts.set_ignored(counts.ignored() + 1);
      } else if (i < rows) {
        counts.set_applied(counts.applied() + 1);
      } else {
        counts.set_erased(counts.erased() + 1);
      }
    }
    return absl::OkStatus();
  }

  std::string DescribeCommitted() const override {
    return absl::StrFormat("%d rows applied, %d ignored, %d erased",
                           response().applied(), response().ignored(),
                           response().erased());
  }

  storage::Store* const store_;
};

}  // namespace

PeerService::PeerService(storage::Store* store, WorkerPool* pool,
                         HandshakeObserver observer, FeedOptions feed_options,
                         StreamLimiter* limiter)
    : store_(store),
      pool_(pool),
      limiter_(limiter),
      observer_(std::move(observer)),
      feed_(store, feed_options) {}

grpc::ServerWriteReactor<v1::FeedBatch>* PeerService::Subscribe(
    grpc::CallbackServerContext* context, const v1::SubscribeRequest* request) {
  return feed_.Subscribe(context, request);
}

grpc::ServerUnaryReactor* PeerService::Handshake(
    grpc::CallbackServerContext* context, const v1::HandshakeRequest* request,
    v1::HandshakeResponse* response) {
  absl::Status status = ValidateHandshake(*request);
  if (!status.ok()) return FinishNow(context, status);
  std::string peer_address;
  if (observer_ != nullptr && !request->node_name().empty()) {
    peer_address = context->peer();
  }
  return FinishOnPool(
      context, pool_,
      [this, peer_address = std::move(peer_address), request, response] {
        return HandshakeOnPool(*store_, observer_, peer_address, *request,
                               response);
      });
}

grpc::ServerUnaryReactor* PeerService::Exchange(
    grpc::CallbackServerContext* context, const v1::ExchangeRequest* request,
    v1::ExchangeResponse* response) {
  absl::Status status = storage::ValidateKeyspaceName(request->keyspace());
  if (!status.ok()) return FinishNow(context, status);
  if (request->seeded()) {
    absl::StatusOr<tree::SeededRequest> seeded = SeededFromProto(*request);
    if (!seeded.ok()) return FinishNow(context, seeded.status());
    return FinishOnPool(
        context, pool_,
        [this, request, response, query = std::move(*seeded)] {
          return SeededExchangeOnPool(*store_, request->keyspace(), query,
                                      response);
        },
        WorkerPool::Lane::kBulk);
  }
  absl::StatusOr<tree::ViewRequest> view_request = FromProto(*request);
  if (!view_request.ok()) return FinishNow(context, view_request.status());
  // Bulk: an exchange may scan many rows below the stored leaves.
  return FinishOnPool(
      context, pool_,
      [this, request, response, query = std::move(*view_request)] {
        return ExchangeOnPool(*store_, request->keyspace(), query, response);
      },
      WorkerPool::Lane::kBulk);
}

grpc::ServerWriteReactor<v1::ScanResponse>* PeerService::Scan(
    grpc::CallbackServerContext* context, const v1::ScanRequest* request) {
  auto* reactor = new ScanReactor(store_, pool_, limiter_, context, request);
  reactor->Start();
  return reactor;
}

grpc::ServerWriteReactor<v1::FetchRowsResponse>* PeerService::FetchRows(
    grpc::CallbackServerContext* context, const v1::FetchRowsRequest* request) {
  auto* reactor =
      new FetchRowsReactor(store_, pool_, limiter_, context, request);
  reactor->Start();
  return reactor;
}

grpc::ServerReadReactor<grpc::ByteBuffer>* PeerService::PushRows(
    grpc::CallbackServerContext* context, grpc::ByteBuffer* response) {
  return new PushRowsReactor(store_, pool_, limiter_, context, response);
}

}  // namespace node
}  // namespace tally
