#include "absl/strings/str_format.h"
#include "storage/row_backend.h"

namespace tally {
namespace storage {
namespace {

constexpr absl::string_view kEmbeddedFingerprint = "embedded/1";

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

  absl::StatusOr<std::vector<absl::StatusOr<std::string>>> ReadValues(
      absl::Span<const RowLocation> rows,
      absl::Span<const absl::string_view> stored_payloads) const override {
    if (rows.size() != stored_payloads.size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "ReadValues given %d rows and %d payloads; it needs one per row",
          rows.size(), stored_payloads.size()));
    }
    // The payload is the value: nothing is read but the records the store
    // has already read.
    std::vector<absl::StatusOr<std::string>> values;
    values.reserve(stored_payloads.size());
    for (absl::string_view payload : stored_payloads) {
      values.emplace_back(std::string(payload));
    }
    return values;
  }

  absl::StatusOr<std::string> SchemaFingerprint(
      absl::string_view) const override {
    // Values are opaque bytes in one record format, the same for every
    // keyspace; the name carries the format's version, to change when a
    // format comes that nodes cannot exchange rows across.
    return std::string(kEmbeddedFingerprint);
  }
};

}  // namespace

std::unique_ptr<RowBackend> NewEmbeddedBackend() {
  return std::make_unique<EmbeddedBackend>();
}

}  // namespace storage
}  // namespace tally
