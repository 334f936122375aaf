#include "storage/row_backend.h"

namespace tally {
namespace storage {
namespace {

class EmbeddedBackend : public RowBackend {
 public:
  absl::string_view name() const override { return "embedded"; }

  absl::StatusOr<std::string> StageValue(const RowLocation&,
                                         absl::string_view value) override {
    return std::string(value);
  }

  absl::Status StageCommit(leveldb::WriteBatch*) override {
    // The row records carry everything; there is no position to keep.
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> ReadValue(
      const RowLocation&, absl::string_view stored_payload) const override {
    return std::string(stored_payload);
  }
};

}  // namespace

std::unique_ptr<RowBackend> NewEmbeddedBackend() {
  return std::make_unique<EmbeddedBackend>();
}

}  // namespace storage
}  // namespace tally
