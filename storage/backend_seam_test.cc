// The backend seam (storage/row_backend.h): one ApplyRows call per commit
// group with each row's compare-and-swap token, per-row outcomes, and
// captured writes the backend is never asked to apply.
#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "storage/internal/fault_injection_env.h"
#include "storage/row_backend.h"
#include "storage/store.h"
#include "support/temp_dir.h"
#include "tree/digest.h"

namespace tally {
namespace storage {
namespace {

using ::tally::testing::TempDir;

// What the backend saw of one RowChange (its views die with the call).
struct SeenChange {
  std::string key;
  RowChange::Kind kind = RowChange::Kind::kPut;
  std::string value;
  tree::Version version;
  bool expected_exists = false;
  tree::Version expected_version;
  tree::Digest128 expected_digest;
  std::string expected_payload;
};

// The seam under test: keeps values as the embedded backend does (payload
// "P:" + value, so that the payload is seen to be the backend's), refuses
// rows whose key starts with "refuse" (the compare-and-swap), rejects those
// whose key starts with "reject" (its database refuses the row itself),
// takes no rows of the keyspace `building`, and records every call.
class RecordingBackend : public RowBackend {
 public:
  absl::string_view name() const override { return "recording"; }

  absl::Status TakesRows(absl::string_view keyspace) const override {
    absl::MutexLock lock(&threads_mu);
    if (keyspace == "building") {
      building_threads.push_back(std::this_thread::get_id());
      return absl::UnavailableError("keyspace building is being built");
    }
    return absl::OkStatus();
  }

  absl::Status ApplyRows(absl::Span<const RowChange> rows,
                         std::vector<RowOutcome>* outcomes) override {
    {
      absl::MutexLock lock(&threads_mu);
      apply_threads.push_back(std::this_thread::get_id());
    }
    if (hold_first_apply != nullptr && calls.empty()) {
      applying.Notify();
      hold_first_apply->WaitForNotification();
    }
    calls.emplace_back();
    outcomes->resize(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      const RowChange& c = rows[i];
      SeenChange seen;
      seen.key = std::string(c.row.key);
      seen.kind = c.kind;
      seen.value = std::string(c.value);
      seen.version = *c.version;
      seen.expected_exists = c.expected.exists;
      if (c.expected.exists) {
        seen.expected_version = *c.expected.version;
        seen.expected_digest = c.expected.digest;
        seen.expected_payload = std::string(c.expected.payload);
      }
      calls.back().push_back(std::move(seen));
      (*outcomes)[i].applied = !absl::StartsWith(c.row.key, "refuse") &&
                               !absl::StartsWith(c.row.key, "reject");
      if (absl::StartsWith(c.row.key, "reject")) {
        (*outcomes)[i].rejected =
            absl::InvalidArgumentError("invalid input syntax for type integer");
      }
      (*outcomes)[i].payload = absl::StrCat("P:", c.value);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> ReadValue(
      const RowLocation&, absl::string_view payload) const override {
    ++read_calls;
    return Decode(payload);
  }

  absl::StatusOr<std::vector<absl::StatusOr<std::string>>> ReadValues(
      absl::Span<const RowLocation> rows,
      absl::Span<const absl::string_view> payloads) const override {
    ++read_calls;
    std::vector<absl::StatusOr<std::string>> values;
    for (size_t i = 0; i < rows.size(); ++i) {
      values.push_back(Decode(payloads[i]));
    }
    return values;
  }

  absl::StatusOr<std::string> SchemaFingerprint(
      absl::string_view) const override {
    return std::string("recording/1");
  }

  std::vector<std::vector<SeenChange>> calls;
  // When set, the first ApplyRows notifies `applying` and waits for it: the
  // writers queued meanwhile commit as one group after it.
  absl::Notification* hold_first_apply = nullptr;
  absl::Notification applying;
  // The threads TakesRows refused `building` on and ApplyRows was called
  // on, in call order.
  mutable absl::Mutex threads_mu;
  mutable std::vector<std::thread::id> building_threads
      ABSL_GUARDED_BY(threads_mu);
  std::vector<std::thread::id> apply_threads ABSL_GUARDED_BY(threads_mu);
  // Values read back (ReadValue, and ReadValues row by row).
  mutable int reads = 0;
  // Reads of the backend: ReadValue and ReadValues calls (for a PostgreSQL
  // backend, each is a round trip).
  mutable int read_calls = 0;

 private:
  absl::StatusOr<std::string> Decode(absl::string_view payload) const {
    ++reads;
    if (!absl::StartsWith(payload, "P:")) {
      return absl::DataLossError("not a recording payload");
    }
    return std::string(payload.substr(2));
  }
};

class BackendSeam : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = std::make_shared<RecordingBackend>();
    StoreOptions options;
    options.node_name = "node-a";
    options.sync = false;
    options.default_depth = 8;
    options.backend = backend_;
    auto store = Store::Open(dir_.path(), options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }

  WriteResult Write(std::vector<Mutation> mutations,
                    ApplyMode mode = ApplyMode::kLastWriterWins) {
    WriteRequest request;
    request.mutations = std::move(mutations);
    request.mode = mode;
    auto result = store_->Write(std::move(request));
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *std::move(result) : WriteResult{};
  }

  void ExpectVerified() {
    auto report = store_->Verify();
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_TRUE(report->ok()) << report->problems.front();
  }

  TempDir dir_;
  std::shared_ptr<RecordingBackend> backend_;
  std::unique_ptr<Store> store_;
};

TEST_F(BackendSeam, OneCallPerGroupAndARefusedRowChangesNothing) {
  const WriteResult r = Write({Mutation::Put("ks", "a", "1"),
                               Mutation::Put("ks", "refuse-b", "2"),
                               Mutation::Put("ks", "c", "3")});
  ASSERT_EQ(backend_->calls.size(), 1u);
  ASSERT_EQ(backend_->calls[0].size(), 3u);
  EXPECT_FALSE(backend_->calls[0][0].expected_exists);  // an insert
  EXPECT_EQ(r.applied, (std::vector<bool>{true, false, true}));
  EXPECT_EQ(r.refused, (std::vector<size_t>{1}));
  // The refused row is in neither the index nor the tree nor the log.
  EXPECT_EQ(store_->Get("ks", "refuse-b").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Get("ks", "a")->value, "1");
  EXPECT_EQ(store_->GetKeyspace("ks")->row_count, 2u);
  EXPECT_EQ(store_->last_sequence(), 2u);
  auto changes = store_->ReadChanges(0, 10);
  ASSERT_TRUE(changes.ok());
  ASSERT_EQ(changes->size(), 2u);
  EXPECT_EQ((*changes)[1].key, "c");
  ExpectVerified();
}

// A row the backend's database refused (RowOutcome::rejected) is reported
// with its reason in `rejected`, not in `refused` (the settled
// compare-and-swap), changes nothing, and leaves the rest of the call and
// the request's progress committed.
TEST_F(BackendSeam, ARowTheDatabaseRejectsIsReportedWithItsReason) {
  WriteRequest request;
  request.mutations = {
      Mutation::Put("ks", "a", "1"), Mutation::Put("ks", "reject-b", "2"),
      Mutation::Put("ks", "refuse-c", "3"), Mutation::Put("other", "d", "4")};
  request.progress = UpstreamProgress{"node-up", 1, 9};
  absl::StatusOr<WriteResult> r = store_->Write(std::move(request));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->applied, (std::vector<bool>{true, false, false, true}));
  EXPECT_EQ(r->refused, (std::vector<size_t>{2}));
  ASSERT_EQ(r->rejected.size(), 1u);
  EXPECT_EQ(r->rejected[0].index, 1u);
  EXPECT_EQ(r->rejected[0].keyspace, "ks");
  EXPECT_EQ(r->rejected[0].key, "reject-b");
  EXPECT_FALSE(r->rejected[0].not_taken);
  EXPECT_TRUE(absl::IsInvalidArgument(r->rejected[0].status));
  EXPECT_TRUE(absl::StrContains(r->rejected[0].status.message(), "integer"));
  EXPECT_TRUE(absl::IsNotFound(store_->Get("ks", "reject-b").status()));
  EXPECT_EQ(store_->Get("other", "d")->value, "4");
  EXPECT_EQ(store_->GetProgress("node-up")->sequence, 9u);
  EXPECT_EQ(store_->last_sequence(), 2u);
  ExpectVerified();
}

TEST_F(BackendSeam, TheCasTokenIsTheIndexedRowAndItsPayload) {
  const WriteResult first = Write({Mutation::Put("ks", "k", "v1")});
  const WriteResult second = Write({Mutation::Put("ks", "k", "v2")});
  ASSERT_EQ(backend_->calls.size(), 2u);
  const SeenChange& seen = backend_->calls[1][0];
  EXPECT_TRUE(seen.expected_exists);
  EXPECT_EQ(seen.expected_version, first.versions[0]);
  EXPECT_EQ(seen.expected_digest,
            tree::RowDigest("ks", "k", first.versions[0], false, "v1"));
  EXPECT_EQ(seen.expected_payload, "P:v1");  // what ApplyRows returned
  EXPECT_EQ(seen.version, second.versions[0]);
  EXPECT_EQ(store_->Get("ks", "k")->value, "v2");  // read through ReadValue
}

// A key written twice in one group reaches the backend once: the last
// change, against the row as the index held it before the group. Refused,
// both writes are refused (the second was decided against the first).
TEST_F(BackendSeam, AKeyWrittenTwiceInAGroupIsOneChangeForTheBackend) {
  Write({Mutation::Put("ks", "k", "old"),
         Mutation::Put("ks", "refuse-k", "old")});
  backend_->calls.clear();
  const WriteResult r = Write(
      {Mutation::Put("ks", "k", "mid"), Mutation::Put("ks", "refuse-k", "x"),
       Mutation::Put("ks", "k", "new"), Mutation::Delete("ks", "refuse-k")});
  ASSERT_EQ(backend_->calls.size(), 1u);
  ASSERT_EQ(backend_->calls[0].size(), 2u);
  // In the order of each key's last change.
  EXPECT_EQ(backend_->calls[0][0].key, "k");
  EXPECT_EQ(backend_->calls[0][0].value, "new");
  EXPECT_EQ(backend_->calls[0][0].expected_payload, "P:old");
  EXPECT_EQ(backend_->calls[0][1].key, "refuse-k");
  EXPECT_EQ(backend_->calls[0][1].kind, RowChange::Kind::kDelete);
  EXPECT_FALSE(backend_->calls[0][1].expected_exists);
  EXPECT_EQ(r.applied, (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(r.refused, (std::vector<size_t>{1, 3}));
  EXPECT_EQ(store_->Get("ks", "k")->value, "new");
  // refuse-k was refused by its first write already: it was never stored.
  EXPECT_EQ(store_->Get("ks", "refuse-k").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->last_sequence(), 3u);  // old, mid, new
  ExpectVerified();
}

TEST_F(BackendSeam, CapturedChangesAreIndexedWithoutAskingTheBackend) {
  Mutation m = Mutation::Put("ks", "app-row", "from-the-app");
  const tree::Version version{store_->clock().Now(), "node-a"};
  m.version = version;
  m.captured_payload = "P:from-the-app";
  const WriteResult r = Write({m}, ApplyMode::kCaptured);
  EXPECT_TRUE(backend_->calls.empty());
  EXPECT_EQ(r.applied, (std::vector<bool>{true}));
  auto row = store_->Get("ks", "app-row");
  ASSERT_TRUE(row.ok()) << row.status();
  EXPECT_EQ(row->value, "from-the-app");
  EXPECT_EQ(row->version, version);
  // Replayed: nothing changes.
  const Sequence before = store_->last_sequence();
  EXPECT_EQ(Write({m}, ApplyMode::kCaptured).applied,
            (std::vector<bool>{false}));
  EXPECT_EQ(store_->last_sequence(), before);
  // A later apply of the key carries the captured payload as its token.
  Write({Mutation::Put("ks", "app-row", "local")});
  ASSERT_EQ(backend_->calls.size(), 1u);
  EXPECT_EQ(backend_->calls[0][0].expected_payload, "P:from-the-app");
  EXPECT_EQ(backend_->calls[0][0].expected_version, version);
  ExpectVerified();
}

// A change the backend committed after the stored row (an application
// updated a row a peer's version had set, that peer's clock ahead) orders
// after it, keeping its origin, however old its own stamp; without the
// mark the same stamp would be a replay and change nothing.
TEST_F(BackendSeam, ACapturedChangeThatSupersedesTheStoredRowOrdersAfterIt) {
  const tree::HlcTimestamp ahead =
      tree::HlcTimestamp::FromParts(store_->clock().PhysicalMillis() + 5000, 7);
  Mutation peer = Mutation::Put("ks", "k", "from-a-peer");
  peer.version = tree::Version{ahead, "peer-clock-ahead"};
  peer.captured_payload = "P:from-a-peer";
  ASSERT_EQ(Write({peer}, ApplyMode::kCaptured).applied,
            (std::vector<bool>{true}));

  const tree::Version commit_time{
      tree::HlcTimestamp::FromParts(store_->clock().PhysicalMillis(), 0),
      "node-a"};
  Mutation replay = Mutation::Put("ks", "k", "old");
  replay.version = commit_time;
  replay.captured_payload = "P:old";
  EXPECT_EQ(Write({replay}, ApplyMode::kCaptured).applied,
            (std::vector<bool>{false}));
  EXPECT_EQ(store_->Get("ks", "k")->value, "from-a-peer");

  Mutation app = Mutation::Put("ks", "k", "app-update");
  app.version = commit_time;
  app.supersedes_stored = true;
  app.captured_payload = "P:app-update";
  const WriteResult r = Write({app}, ApplyMode::kCaptured);
  EXPECT_EQ(r.applied, (std::vector<bool>{true}));
  ASSERT_EQ(r.versions.size(), 1u);
  EXPECT_EQ(r.versions[0].timestamp.raw(), ahead.raw() + 1);
  EXPECT_EQ(r.versions[0].origin, "node-a");
  auto row = store_->Get("ks", "k");
  ASSERT_TRUE(row.ok()) << row.status();
  EXPECT_EQ(row->value, "app-update");
  EXPECT_EQ(row->version, r.versions[0]);
  // A later stamp is kept as it is.
  Mutation later = Mutation::Put("ks", "k", "later");
  later.version = tree::Version{
      tree::HlcTimestamp::FromParts(ahead.physical_millis() + 1, 0), "node-a"};
  later.supersedes_stored = true;
  later.captured_payload = "P:later";
  EXPECT_EQ(Write({later}, ApplyMode::kCaptured).versions[0], *later.version);
  // And replaying it (its very version and digest) changes nothing.
  const Sequence before = store_->last_sequence();
  EXPECT_EQ(Write({later}, ApplyMode::kCaptured).applied,
            (std::vector<bool>{false}));
  EXPECT_EQ(store_->last_sequence(), before);
  ExpectVerified();

  // Only a captured write takes the mark.
  Mutation put = Mutation::Put("ks", "k", "v");
  put.supersedes_stored = true;
  WriteRequest request;
  request.mutations.push_back(put);
  EXPECT_EQ(store_->Write(std::move(request)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(BackendSeam, ScanIndexListsTheRecordsWithoutReadingValues) {
  Write({Mutation::Put("ks", "a", "va"), Mutation::Put("ks", "b", "vb")});
  Write({Mutation::Delete("ks", "b")});
  backend_->reads = 0;
  std::vector<std::string> seen;
  const absl::Status s =
      store_->ScanIndex("ks", [&](const IndexRecord& r) -> absl::Status {
        seen.push_back(std::string(r.key));
        EXPECT_EQ(r.version.origin, "node-a");
        EXPECT_EQ(r.digest, tree::RowDigest("ks", r.key, r.version, r.deleted,
                                            r.deleted ? "" : "va"));
        EXPECT_EQ(r.deleted, r.key == "b");
        if (r.key == "a") {
          EXPECT_EQ(r.payload, "P:va");
        }
        return absl::OkStatus();
      });
  ASSERT_TRUE(s.ok()) << s;
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(backend_->reads, 0);
  // The visitor's error stops the scan; an unknown keyspace is kNotFound.
  int visits = 0;
  EXPECT_EQ(store_
                ->ScanIndex("ks",
                            [&](const IndexRecord&) {
                              ++visits;
                              return absl::CancelledError("enough");
                            })
                .code(),
            absl::StatusCode::kCancelled);
  EXPECT_EQ(visits, 1);
  EXPECT_EQ(store_
                ->ScanIndex("nope",
                            [](const IndexRecord&) { return absl::OkStatus(); })
                .code(),
            absl::StatusCode::kNotFound);
}

// A diff lists whole leaves (and scans whole ranges); each row's value is
// checked against its digest, but read with the rest of its batch: for a
// PostgreSQL backend a read is a round trip, and row by row a warm diff
// of a large table paid one per row of every listed leaf.
TEST_F(BackendSeam, ATreeViewReadsTheValuesOfAListingInOneCall) {
  constexpr int kRows = 300;
  std::vector<Mutation> mutations;
  for (int i = 0; i < kRows; ++i) {
    mutations.push_back(
        Mutation::Put("ks", absl::StrCat("k", i), absl::StrCat("v", i)));
  }
  Write(std::move(mutations));
  auto view = store_->NewTreeView("ks");
  ASSERT_TRUE(view.ok()) << view.status();

  backend_->reads = 0;
  backend_->read_calls = 0;
  tree::ViewRequest request;
  request.list.push_back(tree::NodeRef{0, 0});
  auto response = (*view)->Exchange(request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->entries.size(), kRows);
  EXPECT_EQ(backend_->reads, kRows);
  EXPECT_EQ(backend_->read_calls, 1);

  backend_->reads = 0;
  backend_->read_calls = 0;
  int scanned = 0;
  const tree::NodeRef root{0, 0};
  const absl::Status s =
      (*view)->Scan(absl::MakeConstSpan(&root, 1), [&](const tree::RowEntry&) {
        ++scanned;
        return absl::OkStatus();
      });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(scanned, kRows);
  EXPECT_EQ(backend_->read_calls, 1);
}

// A diff lists about as many small ranges as there are differences in one
// exchange: their rows are checked together, with one backend read for the
// exchange, not one per range (a PostgreSQL round trip each), and each
// range still gets its own rows.
TEST_F(BackendSeam, ATreeViewReadsTheValuesOfManyListedRangesInOneCall) {
  constexpr int kRows = 300;
  constexpr int kLevel = 6;  // 64 ranges of ~5 rows
  std::vector<Mutation> mutations;
  for (int i = 0; i < kRows; ++i) {
    mutations.push_back(
        Mutation::Put("ks", absl::StrCat("k", i), absl::StrCat("v", i)));
  }
  Write(std::move(mutations));
  auto view = store_->NewTreeView("ks");
  ASSERT_TRUE(view.ok()) << view.status();

  // What each range holds, asked one range per exchange.
  std::vector<tree::NodeRef> ranges;
  std::vector<std::vector<std::string>> alone;
  for (uint64_t i = 0; i < (uint64_t{1} << kLevel); ++i) {
    ranges.push_back(tree::NodeRef{kLevel, i});
    tree::ViewRequest one;
    one.list.push_back(ranges.back());
    auto response = (*view)->Exchange(one);
    ASSERT_TRUE(response.ok()) << response.status();
    alone.emplace_back();
    for (const tree::RowEntry& e : response->entries) {
      alone.back().push_back(e.key);
    }
  }

  backend_->reads = 0;
  backend_->read_calls = 0;
  tree::ViewRequest request;
  request.list = ranges;
  auto response = (*view)->Exchange(request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->entries.size(), kRows);
  EXPECT_EQ(backend_->reads, kRows);
  EXPECT_EQ(backend_->read_calls, 1);
  ASSERT_EQ(response->entries_per_range.size(), ranges.size());
  size_t at = 0;
  for (size_t r = 0; r < ranges.size(); ++r) {
    std::vector<std::string> keys;
    for (uint32_t i = 0; i < response->entries_per_range[r]; ++i) {
      keys.push_back(response->entries[at++].key);
    }
    EXPECT_EQ(keys, alone[r]) << ranges[r].DebugString();
  }

  backend_->read_calls = 0;
  std::vector<std::string> scanned;
  const absl::Status s = (*view)->Scan(ranges, [&](const tree::RowEntry& e) {
    scanned.push_back(e.key);
    return absl::OkStatus();
  });
  ASSERT_TRUE(s.ok()) << s;
  std::vector<std::string> listed;
  for (const tree::RowEntry& e : response->entries) listed.push_back(e.key);
  EXPECT_EQ(scanned, listed);
  EXPECT_EQ(backend_->read_calls, 1);
}

// The mutations of a keyspace the backend does not take now are rejected
// one by one with the backend's status, and never reach ApplyRows; the
// request's other keyspaces and its progress commit (a feed batch carries
// every keyspace of the upstream: one keyspace being built must not hold
// back the others). Captured rows of that keyspace are still taken.
TEST_F(BackendSeam, AKeyspaceTheBackendDoesNotTakeIsRejectedAloneInARequest) {
  WriteRequest request;
  request.mutations.push_back(Mutation::Put("ks", "k", "v"));
  request.mutations.push_back(Mutation::Put("building", "k1", "v"));
  request.mutations.push_back(Mutation::Put("ks", "k2", "v"));
  request.mutations.push_back(Mutation::Put("building", "k3", "v"));
  request.progress = UpstreamProgress{"node-up", 7, 42};
  absl::StatusOr<WriteResult> r = store_->Write(std::move(request));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->applied, (std::vector<bool>{true, false, true, false}));
  EXPECT_TRUE(r->refused.empty());
  ASSERT_EQ(r->rejected.size(), 2u);
  EXPECT_EQ(r->rejected[0].index, 1u);
  EXPECT_EQ(r->rejected[0].keyspace, "building");
  EXPECT_EQ(r->rejected[0].key, "k1");
  EXPECT_TRUE(absl::IsUnavailable(r->rejected[0].status));
  EXPECT_TRUE(r->rejected[0].not_taken);
  EXPECT_EQ(r->rejected[1].index, 3u);
  EXPECT_EQ(r->rejected[1].key, "k3");
  EXPECT_EQ(r->versions.size(), 4u);
  // RejectionError answers them as one error naming the first.
  const absl::Status one = RejectionError(*r);
  EXPECT_TRUE(absl::IsUnavailable(one)) << one;
  EXPECT_TRUE(absl::StrContains(one.message(), "2 row(s)")) << one;
  EXPECT_TRUE(absl::StrContains(one.message(), "'k1'")) << one;
  EXPECT_TRUE(absl::StrContains(one.message(), "building")) << one;
  // ApplyRows saw only ks's rows.
  ASSERT_EQ(backend_->calls.size(), 1u);
  ASSERT_EQ(backend_->calls[0].size(), 2u);
  EXPECT_EQ(backend_->calls[0][0].key, "k");
  EXPECT_EQ(backend_->calls[0][1].key, "k2");
  EXPECT_EQ(store_->Get("ks", "k")->value, "v");
  EXPECT_EQ(store_->Get("ks", "k2")->value, "v");
  EXPECT_TRUE(absl::IsNotFound(store_->Get("building", "k1").status()));
  EXPECT_TRUE(absl::IsNotFound(store_->GetKeyspace("building").status()));
  absl::StatusOr<UpstreamProgress> progress = store_->GetProgress("node-up");
  ASSERT_TRUE(progress.ok()) << progress.status();
  EXPECT_EQ(progress->sequence, 42u);
  EXPECT_EQ(store_->last_sequence(), 2u);

  Mutation captured = Mutation::Put("building", "k", "from-the-table");
  captured.version = tree::Version{store_->clock().Now(), "node-a"};
  captured.captured_payload = "P:from-the-table";
  EXPECT_EQ(Write({captured}, ApplyMode::kCaptured).applied,
            (std::vector<bool>{true}));
  EXPECT_EQ(store_->Get("building", "k")->value, "from-the-table");
  ExpectVerified();
}

// With refuse_when_none_taken, a request none of whose keyspaces the
// backend takes is refused whole (its progress not moved: the cause is
// most likely the backend's); with one keyspace taken, only the others are
// rejected.
TEST_F(BackendSeam,
       RefuseWhenNoneTakenRefusesARequestNoKeyspaceOfWhichIsTaken) {
  WriteRequest none;
  none.mutations.push_back(Mutation::Put("building", "k", "v"));
  none.progress = UpstreamProgress{"node-up", 1, 5};
  none.refuse_when_none_taken = true;
  EXPECT_TRUE(absl::IsUnavailable(store_->Write(std::move(none)).status()));
  EXPECT_TRUE(absl::IsNotFound(store_->GetProgress("node-up").status()));

  WriteRequest some;
  some.mutations.push_back(Mutation::Put("building", "k", "v"));
  some.mutations.push_back(Mutation::Put("ks", "k", "v"));
  some.progress = UpstreamProgress{"node-up", 1, 6};
  some.refuse_when_none_taken = true;
  absl::StatusOr<WriteResult> r = store_->Write(std::move(some));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->applied, (std::vector<bool>{false, true}));
  EXPECT_EQ(r->rejected.size(), 1u);
  EXPECT_EQ(store_->GetProgress("node-up")->sequence, 6u);
}

// The rejection is the request's alone: the other requests its commit group
// holds commit (a sidecar's build writes its keyspace's captured rows while
// peers' sessions are refused; were the whole group failed, the build
// failed with it and restarted, over and over).
TEST_F(BackendSeam, ARefusedRequestDoesNotFailTheOthersOfItsGroup) {
  absl::Notification release;
  backend_->hold_first_apply = &release;
  std::thread first([&] {
    EXPECT_EQ(Write({Mutation::Put("ks", "first", "1")}).applied,
              (std::vector<bool>{true}));
  });
  backend_->applying.WaitForNotification();
  // Queued behind `first`, which holds the queue's head in ApplyRows.
  absl::StatusOr<WriteResult> refused, captured, other;
  std::thread t1([&] {
    WriteRequest r;
    r.mutations.push_back(Mutation::Put("building", "peer", "x"));
    refused = store_->Write(std::move(r));
  });
  std::thread t2([&] {
    WriteRequest r;
    r.mode = ApplyMode::kCaptured;
    r.mutations.push_back(Mutation::Put("building", "app", "y"));
    r.mutations.back().version = tree::Version{store_->clock().Now(), "node-a"};
    r.mutations.back().captured_payload = "P:y";
    captured = store_->Write(std::move(r));
  });
  std::thread t3([&] {
    WriteRequest r;
    r.mutations.push_back(Mutation::Put("ks", "other", "z"));
    other = store_->Write(std::move(r));
  });
  // Long enough for the three to queue (a group takes what is queued when
  // its leader starts; the checks below say whether they were one).
  absl::SleepFor(absl::Milliseconds(300));
  release.Notify();
  for (std::thread* t : {&first, &t1, &t2, &t3}) t->join();

  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->applied, (std::vector<bool>{false}));
  ASSERT_EQ(refused->rejected.size(), 1u);
  EXPECT_TRUE(absl::IsUnavailable(refused->rejected[0].status));
  ASSERT_TRUE(captured.ok()) << captured.status();
  EXPECT_EQ(captured->applied, (std::vector<bool>{true}));
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->applied, (std::vector<bool>{true}));
  // One group: the leader that refused `building` also applied `other`
  // (a thread leads at most the one group of its own write).
  {
    absl::MutexLock lock(&backend_->threads_mu);
    ASSERT_EQ(backend_->apply_threads.size(), 2u);
    ASSERT_EQ(backend_->building_threads.size(), 1u);
    EXPECT_EQ(backend_->building_threads[0], backend_->apply_threads[1]);
  }
  EXPECT_TRUE(absl::IsNotFound(store_->Get("building", "peer").status()));
  EXPECT_EQ(store_->Get("building", "app")->value, "y");
  EXPECT_EQ(store_->Get("ks", "other")->value, "z");
  ExpectVerified();
}

// A peer's row the backend refuses, and in the same commit group after it
// the application's write of the same key that the capture brings (the
// refusal's very cause: the application's row was in the table first).
// The captured row was decided against the peer's, which never came to
// be: it must be indexed against the row as it really stood (here: none).
// It was not: the key went into no leaf count and its token into no row
// filter, so every later write of the key was sent to the backend as an
// insert of an absent row, refused against the application's row for
// good (PgSidecarTest.RingOfThree under load: 1,000 shared keys that
// sessions found different and never moved), and the leaf kept the
// refused row's digest (diffs of it never balanced).
TEST_F(BackendSeam, ACapturedRowAfterARefusedOneIsIndexedAgainstTheRealRow) {
  absl::Notification release;
  backend_->hold_first_apply = &release;
  std::thread first([&] {
    EXPECT_EQ(Write({Mutation::Put("ks", "first", "1")}).applied,
              (std::vector<bool>{true}));
  });
  backend_->applying.WaitForNotification();
  // Queued behind `first` in this order: the peer's row, then the capture's.
  absl::StatusOr<WriteResult> from_peer, captured;
  std::thread peer([&] {
    WriteRequest r;
    r.mutations.push_back(Mutation::Put("ks", "refuse-k", "peer"));
    r.mutations.back().version =
        tree::Version{tree::HlcTimestamp::FromParts(
                          store_->clock().PhysicalMillis() + 100, 0),
                      "peer"};
    from_peer = store_->Write(std::move(r));
  });
  absl::SleepFor(absl::Milliseconds(200));
  std::thread capture([&] {
    WriteRequest r;
    r.mode = ApplyMode::kCaptured;
    Mutation m = Mutation::Put("ks", "refuse-k", "app");
    m.version = tree::Version{store_->clock().Now(), "node-a"};
    m.supersedes_stored = true;
    m.captured_payload = "P:app";
    r.mutations.push_back(std::move(m));
    captured = store_->Write(std::move(r));
  });
  absl::SleepFor(absl::Milliseconds(200));
  release.Notify();
  for (std::thread* t : {&first, &peer, &capture}) t->join();
  ASSERT_TRUE(from_peer.ok()) << from_peer.status();
  ASSERT_TRUE(captured.ok()) << captured.status();
  // One group (the two threads' writes in one ApplyRows), the peer's row
  // refused, the application's indexed.
  ASSERT_EQ(backend_->calls.size(), 2u);
  EXPECT_EQ(from_peer->refused, (std::vector<size_t>{0}));
  EXPECT_EQ(captured->applied, (std::vector<bool>{true}));
  EXPECT_EQ(store_->Get("ks", "refuse-k")->value, "app");
  // The leaf counts it, with its own digest: the store verifies.
  EXPECT_EQ(store_->GetKeyspace("ks")->row_count, 2u);
  ExpectVerified();
  // A later write of the key is sent against the application's row.
  Mutation later = Mutation::Put("ks", "refuse-k", "later");
  later.version = tree::Version{
      tree::HlcTimestamp::FromParts(store_->clock().PhysicalMillis() + 200, 0),
      "peer"};
  Write({later});
  ASSERT_EQ(backend_->calls.size(), 3u);
  ASSERT_EQ(backend_->calls[2].size(), 1u);
  EXPECT_TRUE(backend_->calls[2][0].expected_exists);
  EXPECT_EQ(backend_->calls[2][0].expected_payload, "P:app");
}

TEST_F(BackendSeam, ACapturedWriteNeedsAVersion) {
  WriteRequest unversioned;
  unversioned.mode = ApplyMode::kCaptured;
  unversioned.mutations.push_back(Mutation::Put("ks", "k", "v"));
  EXPECT_EQ(store_->Write(std::move(unversioned)).status().code(),
            absl::StatusCode::kInvalidArgument);
  WriteRequest payload_outside;
  payload_outside.mutations.push_back(Mutation::Put("ks", "k", "v"));
  payload_outside.mutations.back().captured_payload = "P:v";
  EXPECT_EQ(store_->Write(std::move(payload_outside)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A captured erase (the backend's table is gone): the index forgets the
// rows, leaving no tombstone, without asking the backend; the change log
// marks them erased, which the feed never sends.
TEST_F(BackendSeam, ACapturedEraseForgetsTheRowWithoutATombstone) {
  Mutation m = Mutation::Put("ks", "k", "v");
  m.version = tree::Version{store_->clock().Now(), "node-a"};
  m.captured_payload = "P:v";
  Mutation gone = Mutation::Delete("ks", "gone");
  gone.version = m.version;
  Write({m, gone}, ApplyMode::kCaptured);
  ASSERT_EQ(store_->GetKeyspace("ks")->row_count, 2u);

  Mutation erase = Mutation::Erase("ks", "k");
  erase.version = tree::Version{store_->clock().Now(), "node-a"};
  Mutation erase_tombstone = Mutation::Erase("ks", "gone");
  erase_tombstone.version = erase.version;
  const WriteResult r = Write({erase, erase_tombstone}, ApplyMode::kCaptured);
  EXPECT_EQ(r.applied, (std::vector<bool>{true, true}));
  EXPECT_TRUE(backend_->calls.empty());
  EXPECT_EQ(store_->Get("ks", "k").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->GetKeyspace("ks")->row_count, 0u);
  auto changes = store_->ReadChanges(0, 100);
  ASSERT_TRUE(changes.ok()) << changes.status();
  ASSERT_FALSE(changes->empty());
  EXPECT_TRUE(changes->back().erased);
  ExpectVerified();
}

// Captured changes with the backend's position, the embedded backend real:
// a commit carries the position in its batch; a crash loses both or
// neither; replaying from the position read back (and before it) changes
// nothing that is already there.
TEST(BackendPositionTest, ReplayingCapturedChangesAfterACrashIsIdempotent) {
  TempDir dir;
  internal::FaultInjectionEnv env;
  StoreOptions options;
  options.node_name = "node-a";
  options.default_depth = 8;
  options.env = &env;
  const auto open = [&](bool sync) {
    StoreOptions o = options;
    o.sync = sync;
    auto store = Store::Open(dir.path(), o);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  };
  // What the capture delivers: two transactions, each with its end position.
  std::vector<WriteRequest> captured(2);
  {
    std::unique_ptr<Store> store = open(/*sync=*/true);
    ASSERT_NE(store, nullptr);
    auto none = store->backend_position();
    ASSERT_TRUE(none.ok());
    EXPECT_FALSE(none->has_value());
    for (int t = 0; t < 2; ++t) {
      captured[t].mode = ApplyMode::kCaptured;
      captured[t].backend_position = BackendPosition{absl::StrCat("lsn-", t)};
      for (int i = 0; i < 3; ++i) {
        Mutation m = Mutation::Put("ks", absl::StrCat("t", t, "-", i), "v");
        m.version = tree::Version{store->clock().Now(), "node-a"};
        captured[t].mutations.push_back(std::move(m));
      }
    }
    // Transaction 0 in a durable commit.
    ASSERT_TRUE(store->Write(captured[0]).ok());
  }
  {
    // Transaction 1 in a commit the crash loses.
    std::unique_ptr<Store> store = open(/*sync=*/false);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Write(captured[1]).ok());
  }
  ASSERT_TRUE(env.DropUnsyncedData().ok());

  std::unique_ptr<Store> store = open(/*sync=*/true);
  ASSERT_NE(store, nullptr);
  auto position = store->backend_position();
  ASSERT_TRUE(position.ok()) << position.status();
  ASSERT_TRUE(position->has_value());
  EXPECT_EQ((*position)->bytes, "lsn-0");  // with transaction 0's rows only
  EXPECT_TRUE(store->Get("ks", "t0-2").ok());
  EXPECT_EQ(store->Get("ks", "t1-0").status().code(),
            absl::StatusCode::kNotFound);
  const Sequence after_crash = store->last_sequence();
  const auto root_after_crash = store->GetKeyspace("ks")->root;

  // The capture resends from an older position (it may): transaction 0
  // again changes nothing; transaction 1 is applied once.
  auto again = store->Write(captured[0]);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->applied, (std::vector<bool>{false, false, false}));
  EXPECT_EQ(store->last_sequence(), after_crash);
  EXPECT_EQ(store->GetKeyspace("ks")->root, root_after_crash);
  ASSERT_TRUE(store->Write(captured[1]).ok());
  EXPECT_EQ(store->last_sequence(), after_crash + 3);
  EXPECT_EQ((*store->backend_position())->bytes, "lsn-1");
  const auto root = store->GetKeyspace("ks")->root;
  // Both replayed once more: nothing changes.
  for (const WriteRequest& request : captured) {
    auto replay = store->Write(request);
    ASSERT_TRUE(replay.ok()) << replay.status();
    EXPECT_EQ(replay->applied, (std::vector<bool>{false, false, false}));
  }
  EXPECT_EQ(store->last_sequence(), after_crash + 3);
  EXPECT_EQ(store->GetKeyspace("ks")->root, root);
  auto report = store->Verify();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->ok()) << report->problems.front();
}

TEST(BackendPositionTest, AnEmptyPositionIsRefused) {
  TempDir dir;
  StoreOptions options;
  options.node_name = "node-a";
  options.sync = false;
  auto store = Store::Open(dir.path(), options);
  ASSERT_TRUE(store.ok()) << store.status();
  WriteRequest request;
  request.backend_position = BackendPosition{""};
  EXPECT_EQ((*store)->Write(std::move(request)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace storage
}  // namespace tally
