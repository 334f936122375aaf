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
};

}  // namespace

std::unique_ptr<RowBackend> NewEmbeddedBackend() {
  return std::make_unique<EmbeddedBackend>();
}

}  // namespace storage
}  // namespace tally
