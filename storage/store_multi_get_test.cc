// Store::MultiGet: many keys of one keyspace in one call, each answered as
// Get() answers it, with the backend's values read in one batch.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/row_backend.h"
#include "storage/store.h"
#include "support/temp_dir.h"
#include "tests/disk_damage.h"
#include "tree/status_macros.h"

namespace tally {
namespace storage {
namespace {

using ::tally::testing::FlipByteInTable;
using ::tally::testing::TempDir;
using ::testing::HasSubstr;

// The embedded backend, counting its reads; it answers kDataLoss for the
// payload Refuse() names (as for a payload that cannot be the backend's),
// in batches and alone (the scrub that marks a row reads it alone).
class CountingBackend : public RowBackend {
 public:
  absl::string_view name() const override { return "counting"; }
  absl::Status ApplyRows(absl::Span<const RowChange> rows,
                         std::vector<RowOutcome>* outcomes) override {
    return inner_->ApplyRows(rows, outcomes);
  }
  absl::StatusOr<std::string> ReadValue(
      const RowLocation& row, absl::string_view payload) const override {
    absl::MutexLock lock(&mu_);
    ++single_reads_;
    if (payload == refused_) {
      return absl::DataLossError("not a payload of this backend");
    }
    return inner_->ReadValue(row, payload);
  }
  absl::StatusOr<std::vector<absl::StatusOr<std::string>>> ReadValues(
      absl::Span<const RowLocation> rows,
      absl::Span<const absl::string_view> payloads) const override {
    absl::MutexLock lock(&mu_);
    batch_sizes_.push_back(rows.size());
    TALLY_ASSIGN_OR_RETURN(auto values, inner_->ReadValues(rows, payloads));
    for (size_t i = 0; i < payloads.size(); ++i) {
      if (payloads[i] == refused_) {
        values[i] = absl::DataLossError("not a payload of this backend");
      }
    }
    return values;
  }

  absl::StatusOr<std::string> SchemaFingerprint(
      absl::string_view keyspace) const override {
    return inner_->SchemaFingerprint(keyspace);
  }

  void Refuse(std::string payload) {
    absl::MutexLock lock(&mu_);
    refused_ = std::move(payload);
  }
  std::vector<size_t> batch_sizes() const {
    absl::MutexLock lock(&mu_);
    return batch_sizes_;
  }
  int single_reads() const {
    absl::MutexLock lock(&mu_);
    return single_reads_;
  }

 private:
  const std::unique_ptr<RowBackend> inner_ = NewEmbeddedBackend();
  mutable absl::Mutex mu_;
  mutable std::vector<size_t> batch_sizes_ ABSL_GUARDED_BY(mu_);
  mutable int single_reads_ ABSL_GUARDED_BY(mu_) = 0;
  std::string refused_ ABSL_GUARDED_BY(mu_);
};

StoreOptions Options(std::shared_ptr<RowBackend> backend = nullptr) {
  StoreOptions options;
  options.node_name = "node-a";
  options.sync = false;
  options.default_depth = 10;
  options.backend = std::move(backend);
  return options;
}

std::unique_ptr<Store> OpenOrDie(const std::string& dir,
                                 StoreOptions options = Options()) {
  auto store = Store::Open(dir, std::move(options));
  EXPECT_TRUE(store.ok()) << store.status();
  return std::move(store).value();
}

void PutRows(Store& store, int rows) {
  WriteRequest request;
  for (int i = 0; i < rows; ++i) {
    request.mutations.push_back(
        Mutation::Put("ks", absl::StrCat("k", i), absl::StrCat("value-", i)));
  }
  ASSERT_TRUE(store.Write(std::move(request)).ok());
}

TEST(StoreMultiGet, AnswersEveryKeyInTheOrderAskedAsGetDoes) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  PutRows(*store, 20);
  WriteRequest del;
  del.mutations.push_back(Mutation::Delete("ks", "k3"));
  ASSERT_TRUE(store->Write(std::move(del)).ok());

  const std::vector<absl::string_view> keys = {"k9", "absent", "k3", "k0",
                                               "k19"};
  auto rows = store->MultiGet("ks", keys);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    absl::StatusOr<Row> one = store->Get("ks", keys[i]);
    const absl::StatusOr<Row>& many = (*rows)[i];
    ASSERT_EQ(many.status().code(), one.status().code()) << keys[i];
    if (!one.ok()) continue;
    EXPECT_EQ(many->key, one->key);
    EXPECT_EQ(many->value, one->value);
    EXPECT_EQ(many->version, one->version);
    EXPECT_EQ(many->deleted, one->deleted);
    EXPECT_EQ(many->digest, one->digest);
  }
  EXPECT_EQ((*rows)[0]->value, "value-9");
  EXPECT_EQ((*rows)[1].status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT((*rows)[1].status().message(), HasSubstr("absent"));
  // The tombstone is a row.
  EXPECT_TRUE((*rows)[2]->deleted);
  EXPECT_EQ((*rows)[2]->key, "k3");
  EXPECT_EQ((*rows)[4]->value, "value-19");
}

TEST(StoreMultiGet, AKeyGivenTwiceIsAnsweredTwice) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  PutRows(*store, 5);
  const std::vector<absl::string_view> keys = {"k1",   "k2",   "k1",
                                               "nope", "nope", "k1"};
  auto rows = store->MultiGet("ks", keys);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 6u);
  for (size_t i : {0, 2, 5}) {
    ASSERT_TRUE((*rows)[i].ok()) << i << ": " << (*rows)[i].status();
    EXPECT_EQ((*rows)[i]->key, "k1");
    EXPECT_EQ((*rows)[i]->value, "value-1");
  }
  EXPECT_EQ((*rows)[1]->value, "value-2");
  EXPECT_EQ((*rows)[3].status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*rows)[4].status().code(), absl::StatusCode::kNotFound);
}

TEST(StoreMultiGet, AMissingKeyspaceOrABadKeyFailsTheCall) {
  TempDir dir;
  auto store = OpenOrDie(dir.path());
  PutRows(*store, 3);
  const std::vector<absl::string_view> keys = {"k1"};
  EXPECT_EQ(store->MultiGet("other", keys).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(store->MultiGet("other", keys).status().message()),
              HasSubstr("keyspace 'other' does not exist"));
  EXPECT_EQ(store->MultiGet("bad name!", keys).status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::string too_long(70000, 'x');
  const std::vector<absl::string_view> bad = {"k1", "", "k2"};
  EXPECT_EQ(store->MultiGet("ks", bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<absl::string_view> long_key = {"k1", too_long};
  EXPECT_EQ(store->MultiGet("ks", long_key).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto none = store->MultiGet("ks", {});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
}

TEST(StoreMultiGet, TheBackendReadsTheRowsFoundInOneBatch) {
  TempDir dir;
  auto backend = std::make_shared<CountingBackend>();
  auto store = OpenOrDie(dir.path(), Options(backend));
  PutRows(*store, 100);
  std::vector<std::string> owned;
  for (int i = 0; i < 100; i += 3) owned.push_back(absl::StrCat("k", i));
  owned.push_back("absent");
  const std::vector<absl::string_view> keys(owned.begin(), owned.end());
  auto rows = store->MultiGet("ks", keys);
  ASSERT_TRUE(rows.ok()) << rows.status();
  // One batch of the 34 rows found; the missing key is not asked for.
  EXPECT_THAT(backend->batch_sizes(), ::testing::ElementsAre(34u));
  EXPECT_EQ(backend->single_reads(), 0);
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    ASSERT_TRUE((*rows)[i].ok()) << keys[i];
    EXPECT_EQ((*rows)[i]->value, absl::StrCat("value-", i * 3));
  }
}

TEST(StoreMultiGet, ARowTheBackendRefusesIsDataLossAndMarked) {
  TempDir dir;
  auto backend = std::make_shared<CountingBackend>();
  auto store = OpenOrDie(dir.path(), Options(backend));
  PutRows(*store, 10);
  const uint64_t rows_before = store->GetKeyspace("ks")->row_count;
  backend->Refuse("value-4");
  const std::vector<absl::string_view> keys = {"k3", "k4", "k5"};
  auto rows = store->MultiGet("ks", keys);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_TRUE((*rows)[0].ok());
  EXPECT_EQ((*rows)[1].status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE((*rows)[2].ok());
  // Marked and out of its leaf, as Get() leaves a damaged row.
  EXPECT_EQ(store->damaged_rows(), 1u);
  EXPECT_EQ(store->GetKeyspace("ks")->row_count, rows_before - 1);
}

// Incompressible, so that a flipped byte in a table stays one.
std::string BigValueOf(int i) {
  return ::tally::testing::IncompressibleValue(1000 + i, 48,
                                               absl::StrCat("value-", i, "-"));
}

TEST(StoreMultiGet, ADamagedRowOnDiskIsDataLossTheOthersAreServed) {
  TempDir dir;
  {
    auto store = OpenOrDie(dir.path());
    WriteRequest request;
    for (int i = 0; i < 50; ++i) {
      request.mutations.push_back(
          Mutation::Put("ks", absl::StrCat("k", i), BigValueOf(i)));
    }
    ASSERT_TRUE(store->Write(std::move(request)).ok());
  }
  OpenOrDie(dir.path());  // the log becomes a table
  ASSERT_TRUE(FlipByteInTable(dir.path(), BigValueOf(7)));

  auto store = OpenOrDie(dir.path());
  const tree::Digest128 root_before = store->GetKeyspace("ks")->root;
  std::vector<std::string> owned;
  for (int i = 0; i < 50; ++i) owned.push_back(absl::StrCat("k", i));
  const std::vector<absl::string_view> keys(owned.begin(), owned.end());
  auto rows = store->MultiGet("ks", keys);
  ASSERT_TRUE(rows.ok()) << rows.status();
  for (int i = 0; i < 50; ++i) {
    if (i == 7) {
      EXPECT_EQ((*rows)[i].status().code(), absl::StatusCode::kDataLoss)
          << ((*rows)[i].ok() ? (*rows)[i]->value : "");
      EXPECT_THAT((*rows)[i].status().message(), HasSubstr("damaged"));
      continue;
    }
    ASSERT_TRUE((*rows)[i].ok()) << i << ": " << (*rows)[i].status();
    EXPECT_EQ((*rows)[i]->value, BigValueOf(i));
  }
  EXPECT_EQ(store->damaged_rows(), 1u);
  EXPECT_NE(store->GetKeyspace("ks")->root, root_before);
  // Asked again (now marked): still refused, never the damaged value.
  const std::vector<absl::string_view> again = {"k7", "k8"};
  auto second = store->MultiGet("ks", again);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*second)[0].status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ((*second)[1]->value, BigValueOf(8));
  EXPECT_EQ(store->Get("ks", "k7").status().code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace storage
}  // namespace tally
