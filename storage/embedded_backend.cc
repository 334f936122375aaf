#include "absl/strings/str_format.h"
#include "storage/row_backend.h"

namespace tally {
namespace storage {
namespace {

// The store's own LevelDB holds the value in the row record: a row is
// applied by the store's WriteBatch itself, so nothing is ever refused and
// the payload is the value.
class EmbeddedBackend : public RowBackend {
 public:
  absl::string_view name() const override { return "embedded"; }

  absl::Status ApplyRows(absl::Span<const RowChange> rows,
                         std::vector<RowOutcome>* outcomes) override {
    outcomes->resize(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      RowOutcome& outcome = (*outcomes)[i];
      outcome.applied = true;
      if (rows[i].kind == RowChange::Kind::kPut) {
        outcome.payload.assign(rows[i].value.data(), rows[i].value.size());
      } else {
        outcome.payload.clear();
      }
    }
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
