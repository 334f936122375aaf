#include "node/client/replica.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_format.h"
#include "node/client/client.h"
#include "node/client/wire.h"
#include "tree/status_macros.h"

namespace tally {
namespace node {
namespace {

// Rows per store write when applying a repair batch locally.
constexpr size_t kLocalApplyBatch = 1000;
// Keys per Store::MultiGet when reading rows locally (the caller keeps every
// row it asks for: this bounds only what one call holds besides).
constexpr size_t kLocalReadBatch = 1000;

class LocalReplica : public Replica {
 public:
  explicit LocalReplica(storage::Store* store) : store_(store) {}

  std::string name() const override {
    return absl::StrFormat("local (%s)", store_->node_name());
  }

  absl::StatusOr<std::unique_ptr<tree::TreeView>> NewView(
      const std::string& keyspace) override {
    return store_->NewTreeView(keyspace);
  }

  absl::StatusOr<FetchResult> FetchRows(
      const std::string& keyspace, const std::vector<std::string>& keys,
      const std::function<absl::Status(const storage::Row&)>& sink) override {
    FetchResult result;
    for (size_t start = 0; start < keys.size(); start += kLocalReadBatch) {
      const std::vector<absl::string_view> batch(
          keys.begin() + start,
          keys.begin() + std::min(keys.size(), start + kLocalReadBatch));
      absl::StatusOr<std::vector<absl::StatusOr<storage::Row>>> rows =
          store_->MultiGet(keyspace, batch);
      // No keyspace here: every key is missing.
      if (absl::IsNotFound(rows.status())) return result;
      TALLY_RETURN_IF_ERROR(rows.status());
      for (const absl::StatusOr<storage::Row>& row : *rows) {
        // Damaged here (now marked for repair): not sent, as if missing.
        if (absl::IsNotFound(row.status()) || absl::IsDataLoss(row.status())) {
          continue;
        }
        // Changed in the backend since indexed (storage/store.h, MultiGet):
        // the capture indexes the newer write.
        if (absl::IsAborted(row.status()) ||
            absl::IsUnavailable(row.status())) {
          ++result.changed;
          continue;
        }
        if (!row.ok()) return row.status();
        TALLY_RETURN_IF_ERROR(sink(*row));
      }
    }
    return result;
  }

  absl::StatusOr<ApplyResult> ApplyRows(const std::string& keyspace,
                                        const std::vector<storage::Row>& rows,
                                        const std::vector<std::string>& erase,
                                        storage::ApplyMode mode) override {
    ApplyResult result;
    storage::WriteRequest request;
    request.mode = mode;
    auto flush = [&]() -> absl::Status {
      if (request.mutations.empty()) return absl::OkStatus();
      std::vector<bool> is_erase;
      for (const storage::Mutation& m : request.mutations) {
        is_erase.push_back(m.erase);
      }
      TALLY_ASSIGN_OR_RETURN(storage::WriteResult written,
                             store_->Write(std::move(request)));
      // Rows the backend did not take are still owed: the keyspace's sync
      // fails with the reason, and the next session retries it.
      TALLY_RETURN_IF_ERROR(storage::RejectionError(written));
      for (size_t i = 0; i < written.applied.size(); ++i) {
        if (!written.applied[i]) {
          ++result.ignored;
        } else if (is_erase[i]) {
          ++result.erased;
        } else {
          ++result.applied;
        }
      }
      request = storage::WriteRequest{};
      request.mode = mode;
      return absl::OkStatus();
    };
    for (const storage::Row& row : rows) {
      storage::Mutation m;
      m.keyspace = keyspace;
      m.key = row.key;
      m.value = row.value;
      m.deleted = row.deleted;
      m.version = row.version;
      request.mutations.push_back(std::move(m));
      if (request.mutations.size() >= kLocalApplyBatch) {
        TALLY_RETURN_IF_ERROR(flush());
      }
    }
    for (const std::string& key : erase) {
      request.mutations.push_back(storage::Mutation::Erase(keyspace, key));
      if (request.mutations.size() >= kLocalApplyBatch) {
        TALLY_RETURN_IF_ERROR(flush());
      }
    }
    TALLY_RETURN_IF_ERROR(flush());
    return result;
  }

 private:
  storage::Store* const store_;
};

class RemoteReplica : public Replica {
 public:
  explicit RemoteReplica(NodeClient* client) : client_(client) {}

  std::string name() const override { return client_->address(); }

  absl::StatusOr<std::unique_ptr<tree::TreeView>> NewView(
      const std::string& keyspace) override {
    // Whether the keyspace exists is learnt from the view's summary, in the
    // same round trip as the rest of the handshake.
    return client_->NewTreeView(keyspace);
  }

  absl::StatusOr<FetchResult> FetchRows(
      const std::string& keyspace, const std::vector<std::string>& keys,
      const std::function<absl::Status(const storage::Row&)>& sink) override {
    FetchResult result;
    for (size_t start = 0; start < keys.size(); start += kMaxKeysPerFetch) {
      v1::FetchRowsRequest request;
      request.set_keyspace(keyspace);
      for (size_t i = start;
           i < std::min(keys.size(), start + kMaxKeysPerFetch); ++i) {
        request.add_keys(keys[i]);
      }
      TALLY_RETURN_IF_ERROR(client_->FetchRows(
          request, [&](const v1::FetchRowsResponse& response) -> absl::Status {
            for (const v1::Row& r : response.rows()) {
              storage::Row row;
              row.key = r.key();
              row.value = r.value();
              row.deleted = r.deleted();
              TALLY_ASSIGN_OR_RETURN(row.version, FromProto(r.version()));
              TALLY_RETURN_IF_ERROR(sink(row));
            }
            result.changed += response.changed_size();
            return absl::OkStatus();
          }));
    }
    return result;
  }

  absl::StatusOr<ApplyResult> ApplyRows(const std::string& keyspace,
                                        const std::vector<storage::Row>& rows,
                                        const std::vector<std::string>& erase,
                                        storage::ApplyMode mode) override {
    std::vector<v1::Row> protos;
    protos.reserve(rows.size());
    for (const storage::Row& row : rows) {
      protos.emplace_back();
      ToProto(row, &protos.back());
    }
    TALLY_ASSIGN_OR_RETURN(
        v1::PushRowsResponse response,
        client_->PushRows(keyspace,
                          mode == storage::ApplyMode::kSourceOverride
                              ? v1::APPLY_MODE_SOURCE_OVERRIDE
                              : v1::APPLY_MODE_LAST_WRITER_WINS,
                          protos, erase));
    return ApplyResult{response.applied(), response.ignored(),
                       response.erased()};
  }

 private:
  NodeClient* const client_;
};

}  // namespace

std::unique_ptr<Replica> NewLocalReplica(storage::Store* store) {
  return std::make_unique<LocalReplica>(store);
}

std::unique_ptr<Replica> NewRemoteReplica(NodeClient* client) {
  return std::make_unique<RemoteReplica>(client);
}

}  // namespace node
}  // namespace tally
