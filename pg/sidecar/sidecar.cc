#include "pg/sidecar/sidecar.h"

#include <algorithm>
#include <atomic>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "pg/schema/names.h"
#include "pg/schema/preflight.h"
#include "pg/schema/schema_difference.h"
#include "pg/schema/table_schema.h"
#include "pg/sidecar/apply/pg_backend.h"
#include "pg/sidecar/bootstrap.h"
#include "pg/sidecar/build_marker.h"
#include "pg/sidecar/capture.h"
#include "pg/sidecar/capture_position.h"
#include "pg/sidecar/index_decision.h"
#include "pg/sidecar/lifecycle.h"
#include "pg/wire/replication_messages.h"
#include "pg/wire/replication_stream.h"
#include "storage/names.h"
#include "tree/progress_meter.h"
#include "tree/status_macros.h"

namespace tally {
namespace pg {
namespace {

constexpr absl::Duration kSlotPollInterval = absl::Seconds(2);
// The least time between two catalog checks the backend asked for (a
// dropped table's rows keep failing until the check finds it missing).
constexpr absl::Duration kRequestedCheckSpacing = absl::Seconds(1);

// Keyspaces whose rows the index does not describe yet (building,
// rebuilding): their fingerprint is unavailable, so peers' sessions refuse
// them until they are ready. And keyspaces whose table is missing from the
// database (dropped): they take no rows and show peers a fingerprint no
// table has, so that sessions refuse that keyspace alone.
class KeyspaceGate {
 public:
  void Close(const std::string& ks) {
    absl::MutexLock lock(&mu_);
    closed_.insert(ks);
  }
  // Opens every keyspace but the missing ones.
  void OpenAll() {
    absl::MutexLock lock(&mu_);
    closed_.clear();
  }
  void SetMissing(absl::flat_hash_set<std::string> missing) {
    absl::MutexLock lock(&mu_);
    missing_ = std::move(missing);
  }
  bool closed(absl::string_view ks) const {
    absl::MutexLock lock(&mu_);
    return closed_.contains(ks);
  }
  bool missing(absl::string_view ks) const {
    absl::MutexLock lock(&mu_);
    return missing_.contains(ks);
  }
  // Refused (rows over the value limit), why; empty `why`: not refused.
  void SetRefused(const std::string& ks, std::string why) {
    absl::MutexLock lock(&mu_);
    if (why.empty()) {
      refused_.erase(ks);
    } else {
      refused_[ks] = std::move(why);
    }
  }
  std::string refused(absl::string_view ks) const {
    absl::MutexLock lock(&mu_);
    auto it = refused_.find(ks);
    return it == refused_.end() ? "" : it->second;
  }
  // The backend met a table that does not exist (a peer's row refused, a
  // read failed): the catalog check should run now rather than at its next
  // interval, so that a dropped table becomes missing within seconds.
  void RequestCatalogCheck() { catalog_check_requested_.store(true); }
  bool TakeCatalogCheckRequest() {
    return catalog_check_requested_.exchange(false);
  }

 private:
  std::atomic<bool> catalog_check_requested_{false};
  mutable absl::Mutex mu_;
  absl::flat_hash_set<std::string> closed_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> missing_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::string> refused_ ABSL_GUARDED_BY(mu_);
};

// The same for a keyspace refused for rows over the value limit.
constexpr absl::string_view kRefusedFingerprint =
    "postgresql/refused (rows of this node's table are over the value limit)";

// The fingerprint a missing table's keyspace shows peers: no table has it
// (it lacks kFingerprintPrefix), so their sessions refuse that keyspace
// alone, naming it, and exchange no row of it either way.
constexpr absl::string_view kMissingFingerprint =
    "postgresql/missing (the table was dropped from this node's database)";

// The backend the store gets: the PgBackend, counting what it applied and
// refused, and answering kUnavailable for keyspaces being (re)built — and
// for everything while the database has not been reached yet (it was down
// when tallyd started: the PgBackend comes once the thread reaches it).
class SidecarBackend final : public storage::RowBackend {
 public:
  SidecarBackend(std::shared_ptr<PgBackend> inner,
                 std::shared_ptr<KeyspaceGate> gate)
      : gate_(std::move(gate)), inner_(std::move(inner)) {}

  void set_inner(std::shared_ptr<PgBackend> inner) {
    absl::MutexLock lock(&mu_);
    inner_ = std::move(inner);
  }

  absl::string_view name() const override { return "postgresql"; }
  absl::Status ApplyRows(absl::Span<const storage::RowChange> rows,
                         std::vector<storage::RowOutcome>* outcomes) override {
    TALLY_ASSIGN_OR_RETURN(std::shared_ptr<PgBackend> in, inner());
    const absl::Status applied = in->ApplyRows(rows, outcomes);
    if (absl::IsNotFound(applied)) gate_->RequestCatalogCheck();
    TALLY_RETURN_IF_ERROR(applied);
    bool any = false;
    for (const storage::RowOutcome& o : *outcomes) {
      (o.applied ? applied_ : refused_).fetch_add(1);
      any = any || o.applied;
      if (absl::IsNotFound(o.rejected)) gate_->RequestCatalogCheck();
    }
    // The store commits these rows next (its commit leader is serial).
    if (any) apply_awaits_store_.store(true);
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ReadValue(
      const storage::RowLocation& row,
      absl::string_view stored_payload) const override {
    TALLY_ASSIGN_OR_RETURN(std::shared_ptr<PgBackend> in, inner());
    return in->ReadValue(row, stored_payload);
  }
  absl::StatusOr<std::vector<absl::StatusOr<std::string>>> ReadValues(
      absl::Span<const storage::RowLocation> rows,
      absl::Span<const absl::string_view> stored_payloads) const override {
    TALLY_ASSIGN_OR_RETURN(std::shared_ptr<PgBackend> in, inner());
    absl::StatusOr<std::vector<absl::StatusOr<std::string>>> values =
        in->ReadValues(rows, stored_payloads);
    if (absl::IsNotFound(values.status())) gate_->RequestCatalogCheck();
    return values;
  }
  // A keyspace being (re)built takes no rows from outside: its index does
  // not describe the table yet (after a lost index it is empty, so every
  // row would look new, and a peer's copy of a key the application deleted
  // while the index was lost would put that key back before the build
  // could see the delete). Refused per request, inside the store's commit:
  // the build's own writes, committed in the same groups, go on.
  absl::Status TakesRows(absl::string_view keyspace) const override {
    if (gate_->missing(keyspace)) {
      // kNotFound, not kUnavailable: waiting does not help, and a feed
      // leaves this keyspace's changes out instead of stopping for all
      // (node/feed/feed_subscriber.h).
      return absl::NotFoundError(absl::StrCat(
          "keyspace ", keyspace,
          " is missing: its table was dropped from the database; it takes "
          "no rows until a table of that name exists again"));
    }
    if (gate_->closed(keyspace)) {
      return absl::UnavailableError(
          absl::StrCat("keyspace ", keyspace,
                       " is rebuilding (its index is being built from the "
                       "table); it takes no rows until then"));
    }
    if (const std::string why = gate_->refused(keyspace); !why.empty()) {
      // kNotFound as for a missing table: this keyspace alone is left out.
      return absl::NotFoundError(why);
    }
    return inner().status();
  }
  absl::StatusOr<std::string> SchemaFingerprint(
      absl::string_view keyspace) const override {
    if (gate_->missing(keyspace)) return std::string(kMissingFingerprint);
    if (!gate_->refused(keyspace).empty()) {
      return std::string(kRefusedFingerprint);
    }
    if (gate_->closed(keyspace)) {
      return absl::UnavailableError(
          absl::StrCat("keyspace ", keyspace,
                       " is rebuilding (its index is being built "
                       "from the table)"));
    }
    TALLY_ASSIGN_OR_RETURN(std::shared_ptr<PgBackend> in, inner());
    return in->SchemaFingerprint(keyspace);
  }
  std::string SchemaDescription(absl::string_view keyspace) const override {
    if (gate_->missing(keyspace)) return "";
    absl::StatusOr<std::shared_ptr<PgBackend>> in = inner();
    return in.ok() ? (*in)->SchemaDescription(keyspace) : "";
  }

  uint64_t applied() const { return applied_.load(); }
  uint64_t refused() const { return refused_.load(); }
  // True once per apply with applied rows, after it: at the store's next
  // change-log notification that apply's rows are committed.
  bool TakeApplyAwaitingStore() { return apply_awaits_store_.exchange(false); }

 private:
  absl::StatusOr<std::shared_ptr<PgBackend>> inner() const {
    absl::MutexLock lock(&mu_);
    if (inner_ == nullptr) {
      return absl::UnavailableError(
          "the database has not been reached since tallyd started (see "
          "`tally status`: postgres phase and last error)");
    }
    return inner_;
  }

  const std::shared_ptr<KeyspaceGate> gate_;
  std::atomic<uint64_t> applied_{0};
  std::atomic<uint64_t> refused_{0};
  std::atomic<bool> apply_awaits_store_{false};
  mutable absl::Mutex mu_;
  std::shared_ptr<PgBackend> inner_ ABSL_GUARDED_BY(mu_);
};

// What reaching the database gives: the tables' schemas (after the
// preflight checks) and the backend.
struct Reached {
  std::vector<TableSchema> tables;
  // Kept tables not in the database on a later start (dropped since).
  absl::flat_hash_set<std::string> missing;
  std::shared_ptr<PgBackend> pg;
};

// Connects, runs the preflight checks and opens the backend. The
// connection's kUnavailable means the database is down or unreachable.
absl::StatusOr<Reached> ReachDatabase(const SidecarOptions& options,
                                      const ReplicationNames& names) {
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn,
                         Connection::Open(options.conninfo, {}));
  PreflightOptions pre;
  pre.tables = options.tables;
  pre.slot_name = names.slot;
  pre.origin_name = names.origin;
  Reached out;
  std::vector<std::string> missing;
  TALLY_ASSIGN_OR_RETURN(out.tables, Preflight(*conn, pre, &missing));
  out.missing.insert(missing.begin(), missing.end());
  PgBackendOptions bo;
  bo.conninfo = options.conninfo;
  bo.tables = options.tables;
  bo.missing = out.missing;
  bo.origin_name = names.origin;
  bo.fault_points = options.fault_points;
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<PgBackend> pg, PgBackend::Open(bo));
  out.pg = std::move(pg);
  return out;
}

// Whether the node's publication publishes a partitioned table's changes
// via the root (false when it does not exist). A build sets it
// (EnsurePublication) before creating its slot.
absl::StatusOr<bool> PublishesViaRoot(Connection& conn,
                                      absl::string_view publication) {
  TALLY_ASSIGN_OR_RETURN(
      Result r, conn.ExecParams("SELECT pubviaroot FROM pg_publication WHERE "
                                "pubname = $1",
                                {Param::Text(std::string(publication))}));
  return r.rows() == 1 && r.Value(0, 0) == "t";
}

}  // namespace

class Sidecar::Impl {
 public:
  Impl(SidecarOptions options, ReplicationNames names,
       std::vector<TableSchema> tables,
       absl::flat_hash_set<std::string> missing, std::shared_ptr<PgBackend> pg,
       std::shared_ptr<KeyspaceGate> gate)
      : options_(std::move(options)),
        names_(std::move(names)),
        pg_(std::move(pg)),
        gate_(std::move(gate)),
        backend_(std::make_shared<SidecarBackend>(pg_, gate_)),
        tables_(std::move(tables)),
        missing_(std::move(missing)) {
    loop_.database_reached = pg_ != nullptr;
    status_.slot = names_.slot;
    status_.publication = names_.publication;
    status_.origin = names_.origin;
    for (const TableSchema& t : tables_) {
      status_.keyspaces.push_back(
          SidecarKeyspaceStatus{t.name(), t.fingerprint(), "building", 0});
    }
    for (const std::string& name : missing_) {
      status_.keyspaces.push_back(
          SidecarKeyspaceStatus{name, "", "missing", 0});
    }
    if (pg_ == nullptr) {
      // Not reached yet: the names are known, the schemas are not.
      for (const std::string& name : options_.tables) {
        status_.keyspaces.push_back(
            SidecarKeyspaceStatus{name, "", "building", 0});
      }
    }
  }

  ~Impl() { Stop(); }

  std::shared_ptr<storage::RowBackend> backend() { return backend_; }

  absl::Status Start(storage::Store* store) {
    absl::MutexLock lock(&mu_);
    if (store_ != nullptr) {
      return absl::FailedPreconditionError("the sidecar is started already");
    }
    store_ = store;
    for (const std::string& name : missing_) {
      Log(absl::StrCat(
          "table ", name,
          " is missing: not in the database at start (dropped since the "
          "last start; if it never existed, check --table); its keyspace "
          "takes no rows until a table of that name exists"));
    }
    if (options_.fault_points != nullptr &&
        options_.fault_points->armed().has_value()) {
      const FaultPoint p = *options_.fault_points->armed();
      Log(absl::StrFormat("FOR TESTS: fault point %s armed (time %d)",
                          FaultPointName(p), options_.fault_points->count()));
      if (p == FaultPoint::kApplyAfterStoreCommit) {
        listener_ = store->AddChangeListener([this](storage::Sequence) {
          if (backend_->TakeApplyAwaitingStore()) {
            options_.fault_points->Reach(FaultPoint::kApplyAfterStoreCommit);
          }
        });
      }
    }
    thread_ = std::thread([this] { Run(); });
    return absl::OkStatus();
  }

  void Stop() {
    stopping_.store(true);
    std::thread t;
    {
      absl::MutexLock lock(&mu_);
      t = std::move(thread_);
    }
    if (t.joinable()) t.join();
    std::optional<int> listener;
    storage::Store* store;
    {
      absl::MutexLock lock(&mu_);
      listener.swap(listener_);
      store = store_;
    }
    if (listener.has_value()) store->RemoveChangeListener(*listener);
  }

  SidecarStatus status() const {
    absl::MutexLock lock(&mu_);
    SidecarStatus s = status_;
    s.phase = std::string(SidecarPhaseName(loop_.phase));
    if (loop_.phase == SidecarPhase::kBuilding) {
      const tree::ProgressEstimate e = build_meter_.Estimate(absl::Now());
      s.build_rows_per_second = e.rate;
      s.build_remaining = e.remaining;
      s.build_elapsed = e.elapsed;
    }
    s.rows_applied = backend_->applied();
    s.rows_refused = backend_->refused();
    if (store_ != nullptr) {
      for (SidecarKeyspaceStatus& k : s.keyspaces) {
        absl::StatusOr<storage::KeyspaceInfo> info =
            store_->GetKeyspace(k.name);
        if (info.ok()) k.rows = info->row_count;
      }
    }
    return s;
  }

  absl::Status AwaitCaughtUp(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    {
      absl::MutexLock lock(&mu_);
      if (store_ == nullptr) {
        return absl::FailedPreconditionError("the sidecar is not started");
      }
    }
    TALLY_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn,
                           Connection::Open(options_.conninfo, {}));
    TALLY_ASSIGN_OR_RETURN(Result r,
                           conn->Exec("SELECT pg_current_wal_lsn()::text"));
    TALLY_ASSIGN_OR_RETURN(const Lsn target, ParseLsn(r.Value(0, 0)));
    absl::Time next_ask = absl::InfinitePast();
    for (;;) {
      {
        absl::MutexLock lock(&mu_);
        if (loop_.phase == SidecarPhase::kFailed) {
          return absl::FailedPreconditionError(
              absl::StrCat("the sidecar failed: ", status_.last_error));
        }
        if (loop_.phase == SidecarPhase::kFollowing &&
            status_.confirmed_lsn >= target) {
          return absl::OkStatus();
        }
        if (absl::Now() >= deadline) {
          return absl::DeadlineExceededError(absl::StrFormat(
              "not caught up with %s: phase %s, confirmed %s%s",
              FormatLsn(target), SidecarPhaseName(loop_.phase),
              FormatLsn(status_.confirmed_lsn),
              status_.last_error.empty()
                  ? ""
                  : absl::StrCat(", last error: ", status_.last_error)));
        }
        if (capture_ != nullptr && absl::Now() >= next_ask) {
          capture_->RequestKeepalive();
          next_ask = absl::Now() + absl::Milliseconds(300);
        }
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

  absl::StatusOr<VerifyResult> Verify(absl::string_view keyspace) {
    storage::Store* store;
    const TableSchema* schema = nullptr;
    bool missing = false;
    {
      absl::MutexLock lock(&mu_);
      store = store_;
      for (const TableSchema& t : tables_) {
        if (t.name() == keyspace) schema = &t;
      }
      missing = missing_.contains(keyspace);
      if (schema == nullptr && !missing) {
        return absl::NotFoundError(
            absl::StrCat(keyspace, " is not a table this node keeps"));
      }
    }
    if (store == nullptr) {
      return absl::FailedPreconditionError("the sidecar is not started");
    }
    if (missing) {
      // The table was dropped: it holds no row, and the index must hold
      // none live either (it forgot them).
      VerifyResult result;
      result.keyspace = std::string(keyspace);
      TALLY_ASSIGN_OR_RETURN(auto index, ReadIndex(store, keyspace));
      for (const auto& [key, e] : index) {
        if (e.deleted) continue;
        ++result.index_rows;
        result.missing_from_table.push_back(key);
      }
      return result;
    }
    const TableSchema table = *schema;
    VerifyResult result;
    result.keyspace = std::string(keyspace);
    TALLY_ASSIGN_OR_RETURN(auto index, ReadIndex(store, keyspace));
    for (const auto& [key, e] : index) result.index_rows += e.deleted ? 0 : 1;
    TALLY_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn,
                           Connection::Open(options_.conninfo, {}));
    absl::flat_hash_set<std::string> seen;
    TALLY_RETURN_IF_ERROR(
        ScanTable(*conn, table, "", [&](const ScannedRow& row) -> absl::Status {
          ++result.table_rows;
          auto it = index.find(row.key);
          if (it == index.end() || it->second.deleted) {
            result.missing_from_index.emplace_back(row.key);
            return absl::OkStatus();
          }
          seen.insert(std::string(row.key));
          // A damaged row is out of its leaf: the tree does not describe it
          // whatever its digest says.
          if (it->second.damaged ||
              tree::RowDigest(keyspace, row.key, it->second.version, false,
                              row.value) != it->second.digest) {
            result.mismatched_keys.emplace_back(row.key);
          }
          return absl::OkStatus();
        }));
    for (const auto& [key, e] : index) {
      if (!e.deleted && !seen.contains(key)) {
        result.missing_from_table.push_back(key);
      }
    }
    return result;
  }

 private:
  void Log(absl::string_view line) const {
    const std::string text =
        absl::StrCat("pg sidecar ", names_.slot, ": ", line);
    if (options_.log) {
      options_.log(text);
    } else {
      std::cerr << text << std::endl;
    }
  }

  // Moves the lifecycle (pg/sidecar/lifecycle.h) on by `event`, which
  // `error` explains when it is one; returns what the thread does next.
  SidecarStep Advance(SidecarEvent event, const absl::Status& error) {
    absl::MutexLock lock(&mu_);
    return AdvanceLocked(event, error);
  }
  SidecarStep AdvanceLocked(SidecarEvent event, const absl::Status& error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const SidecarStep step = NextSidecarStep(loop_, event);
    loop_ = step.next;
    switch (step.last_error) {
      case SidecarLastError::kKeep:
        break;
      case SidecarLastError::kRecord:
        status_.last_error = error.ToString();
        break;
      case SidecarLastError::kClear:
        status_.last_error.clear();
        break;
    }
    return step;
  }

  // Sets the state of every keyspace whose table exists; the others are
  // "missing".
  void SetKeyspaceStates(absl::string_view state) {
    absl::MutexLock lock(&mu_);
    for (SidecarKeyspaceStatus& k : status_.keyspaces) {
      k.state = missing_.contains(k.name) ? "missing" : std::string(state);
    }
  }

  // Shows keyspace `ks`'s refusal for rows over the value limit (or its
  // end, with none left in oversize_) in the gate and the status.
  void ShowRefusal(const std::string& ks) {
    const std::set<std::string>& keys = oversize_[ks];
    std::string why;
    if (!keys.empty()) {
      why = absl::StrFormat(
          "keyspace %s is refused: %d of its rows are over the value limit "
          "of %d bytes (max_value_bytes; first key '%s'); it takes and sends "
          "no rows until none is",
          ks, keys.size(), options_.max_value_bytes,
          absl::CHexEscape(keys.begin()->substr(0, 64)));
    }
    gate_->SetRefused(ks, why);
    absl::MutexLock lock(&mu_);
    SidecarKeyspaceStatus& k = KeyspaceStatus(ks);
    k.trouble = why;
    if (k.state == "ready" || k.state == "refused") {
      k.state = keys.empty() ? "ready" : "refused";
    }
  }

  // The status entry of keyspace `name` (one per configured table).
  SidecarKeyspaceStatus& KeyspaceStatus(absl::string_view name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (SidecarKeyspaceStatus& k : status_.keyspaces) {
      if (k.name == name) return k;
    }
    return status_.keyspaces.emplace_back(
        SidecarKeyspaceStatus{std::string(name), "", "building", 0});
  }

  // Sleeps up to `d`, waking at once on Stop.
  void Sleep(absl::Duration d) {
    const absl::Time until = absl::Now() + d;
    while (!stopping_.load() && absl::Now() < until) {
      absl::SleepFor(std::min(absl::Milliseconds(50), until - absl::Now()));
    }
  }

  // Reaches a database that was down when tallyd started, once: on success
  // the schemas and the backend are the thread's and the store's.
  absl::Status ReachDatabaseOnce() {
    absl::StatusOr<Reached> reached = ReachDatabase(options_, names_);
    if (!reached.ok()) return reached.status();
    pg_ = reached->pg;
    {
      absl::MutexLock lock(&mu_);
      AdoptSchemas(std::move(reached->tables), std::move(reached->missing));
    }
    backend_->set_inner(reached->pg);
    Log("reached the database");
    return absl::OkStatus();
  }

  // The thread: a short loop over the lifecycle's steps. Stop is checked
  // before each, and wins over how the last one ended.
  void Run() {
    SidecarStep step = Advance(SidecarEvent::kStarted, absl::OkStatus());
    for (;;) {
      if (stopping_.load()) {
        step = Advance(SidecarEvent::kStopRequested, absl::OkStatus());
      }
      switch (step.action) {
        case SidecarAction::kReachDatabase: {
          const absl::Status reached = ReachDatabaseOnce();
          step = Advance(ReachEvent(reached, stopping_.load()), reached);
          LogStep(step, reached);
          break;
        }
        case SidecarAction::kIndexAndFollow: {
          const absl::Status s = RunOnce();
          {
            absl::MutexLock lock(&mu_);
            capture_ = nullptr;
          }
          step =
              Advance(AttemptEndEvent(s, stopping_.load(), schema_changed_), s);
          LogStep(step, s);
          break;
        }
        case SidecarAction::kWait:
          Sleep(step.wait);
          step = Advance(SidecarEvent::kWaited, absl::OkStatus());
          break;
        case SidecarAction::kExit:
          return;
      }
    }
  }

  // Logs why the thread fails or waits after `error`.
  void LogStep(const SidecarStep& step, const absl::Status& error) const {
    if (step.last_error != SidecarLastError::kRecord) return;
    if (step.next.phase == SidecarPhase::kFailed) {
      Log(absl::StrCat("failed: ", error.ToString()));
      return;
    }
    const std::string wait = absl::FormatDuration(step.wait);
    if (!step.next.database_reached) {
      Log(absl::StrCat("the database is unreachable; retrying in ", wait, ": ",
                       error.ToString()));
    } else if (schema_changed_) {
      // The rebuild itself failed: retried with the same backoff as a lost
      // connection, not in a tight loop.
      Log(absl::StrCat("rebuilding again in ", wait, ": ", error.ToString()));
    } else {
      Log(absl::StrCat("reconnecting in ", wait, ": ", error.ToString()));
    }
  }

  // The node's replication slot as pg_replication_slots shows it.
  absl::StatusOr<SlotFacts> ReadSlot(Connection& conn) {
    TALLY_ASSIGN_OR_RETURN(
        Result r, conn.ExecParams("SELECT confirmed_flush_lsn::text, "
                                  "coalesce(wal_status, '') FROM "
                                  "pg_replication_slots WHERE slot_name = $1",
                                  {Param::Text(names_.slot)}));
    SlotFacts slot;
    if (r.rows() == 0) return slot;
    slot.exists = true;
    slot.lost = r.Value(0, 1) == "lost";
    if (!r.IsNull(0, 0)) {
      TALLY_ASSIGN_OR_RETURN(Lsn confirmed, ParseLsn(r.Value(0, 0)));
      slot.confirmed_flush = confirmed;
    }
    return slot;
  }

  // Reads every kept table's schema again; a table that is not there
  // (dropped) is missing from then on, until a table of its name is.
  absl::Status ReloadSchemas() {
    std::vector<TableSchema> fresh;
    absl::flat_hash_set<std::string> missing;
    TALLY_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn,
                           Connection::Open(options_.conninfo, {}));
    for (const std::string& name : options_.tables) {
      absl::StatusOr<TableSchema> s = TableSchema::Read(*conn, name);
      if (absl::IsNotFound(s.status())) {
        missing.insert(name);
        continue;
      }
      TALLY_RETURN_IF_ERROR(s.status());
      TALLY_RETURN_IF_ERROR(pg_->ReloadSchema(name));
      fresh.push_back(*std::move(s));
    }
    absl::MutexLock lock(&mu_);
    AdoptSchemas(std::move(fresh), std::move(missing));
    return absl::OkStatus();
  }

  // The tables' schemas as read now, and the kept tables missing from the
  // database; their status entries follow (fingerprints, state missing).
  void AdoptSchemas(std::vector<TableSchema> tables,
                    absl::flat_hash_set<std::string> missing)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    tables_ = std::move(tables);
    missing_ = std::move(missing);
    for (const TableSchema& t : tables_) {
      KeyspaceStatus(t.name()).fingerprint = t.fingerprint();
    }
    for (const std::string& name : missing_) {
      SidecarKeyspaceStatus& k = KeyspaceStatus(name);
      k.fingerprint.clear();
      k.state = "missing";
    }
  }

  // The catalog check: reads each table's schema from the catalog and
  // names the first whose fingerprint differs from `tables`' (the schemas
  // the index and the capture use), that is missing (dropped: logical
  // decoding sends nothing for a DROP, and the publication forgets the
  // table), that is another table under the same name (its OID differs:
  // dropped and created again), or, of the `missing` ones, that exists
  // again. Empty when nothing changed, or when the catalog cannot be read
  // (logged; the next check tries again).
  std::string CatalogChange(Connection& admin,
                            const std::vector<TableSchema>& tables,
                            const absl::flat_hash_set<std::string>& missing) {
    for (const std::string& name : missing) {
      absl::StatusOr<TableSchema> now = TableSchema::Read(admin, name);
      if (now.ok()) {
        return absl::StrCat("table ", name,
                            " exists again (it was missing): building it "
                            "afresh from the new table");
      }
      if (!absl::IsNotFound(now.status())) {
        Log(absl::StrCat("catalog check of ", name,
                         " failed: ", now.status().ToString()));
      }
    }
    for (const TableSchema& t : tables) {
      absl::StatusOr<TableSchema> now = TableSchema::Read(admin, t.name());
      if (absl::IsNotFound(now.status())) {
        return absl::StrCat(
            "table ", t.name(),
            " is missing: dropped from the database (its keyspace takes no "
            "rows and its index forgets its rows, which peers keep; no delete "
            "is replicated)");
      }
      if (!now.ok()) {
        Log(absl::StrCat("catalog check of ", t.name(),
                         " failed: ", now.status().ToString()));
        return "";
      }
      if (now->relid() != t.relid()) {
        return absl::StrFormat(
            "table %s was dropped and created again (OID %d, the index's "
            "%d): building it afresh from the new table",
            t.name(), now->relid(), t.relid());
      }
      if (now->fingerprint() != t.fingerprint()) {
        return absl::StrCat(
            t.name(), " differs in the catalog (fingerprint ",
            now->fingerprint(), ", the index's ", t.fingerprint(),
            "; here the catalog, there the index): ",
            DescribeSchemaDifference(now->description(), t.description()));
      }
      if (now->partition_layout() != t.partition_layout()) {
        // Rows appeared or vanished with no row change decoded (an ATTACH,
        // a DETACH, a TRUNCATE of one leaf): a rebuild finds them.
        return absl::StrCat(
            "the partitions of ", t.name(),
            " changed (here the catalog, "
            "there the index): ",
            DescribePartitionChange(now->partitions(), t.partitions()));
      }
    }
    return "";
  }

  absl::Status RunOnce() {
    storage::Store* store;
    std::vector<TableSchema> tables;
    absl::flat_hash_set<std::string> missing;
    {
      absl::MutexLock lock(&mu_);
      store = store_;
      tables = tables_;
      missing = missing_;
    }
    if (schema_changed_) {
      // Closed before the backend reads rows with the new columns: until
      // the rebuild, the index's digests are of the old ones, and a
      // peer's row decided against them would be wrong.
      for (const std::string& name : options_.tables) gate_->Close(name);
      TALLY_RETURN_IF_ERROR(ReloadSchemas());
      absl::MutexLock lock(&mu_);
      tables = tables_;
      missing = missing_;
    }
    for (const std::string& name : options_.tables) {
      // Created before any row of it, so that a table still empty is a
      // keyspace all the same: peers and `tally diff` find it (equal, both
      // empty) rather than "on neither node".
      if (absl::IsNotFound(store->GetKeyspace(name).status())) {
        TALLY_RETURN_IF_ERROR(
            store->CreateKeyspace(name, options_.keyspace_depth));
      }
    }
    TALLY_ASSIGN_OR_RETURN(std::optional<storage::BackendPosition> stored,
                           store->backend_position());
    std::optional<CapturePosition> position;
    if (stored.has_value()) {
      TALLY_ASSIGN_OR_RETURN(CapturePosition p,
                             CapturePosition::Decode(stored->bytes));
      position = std::move(p);
    }

    TALLY_ASSIGN_OR_RETURN(std::unique_ptr<Connection> admin,
                           Connection::Open(options_.conninfo, {}));
    TALLY_ASSIGN_OR_RETURN(std::unique_ptr<ReplicationStream> stream,
                           ReplicationStream::Connect(options_.conninfo));
    TALLY_ASSIGN_OR_RETURN(SystemIdentity identity, stream->IdentifySystem());
    uint64_t system_id = 0;
    (void)absl::SimpleAtoi(identity.system_id, &system_id);
    {
      absl::MutexLock lock(&mu_);
      status_.system_id = system_id;
    }

    // What the database remembers of this node's builds.
    TALLY_ASSIGN_OR_RETURN(std::optional<BuildMarker> marker,
                           ReadBuildMarker(*admin, names_.publication));
    if (marker.has_value() && marker->system_id != system_id) marker.reset();
    IndexFacts facts;
    facts.position = position;
    facts.database_says_built = marker.has_value();
    facts.system_id = system_id;
    if (schema_changed_) facts.schema_change = schema_change_reason_;
    if (position.has_value() && !schema_changed_) {
      TALLY_ASSIGN_OR_RETURN(facts.slot, ReadSlot(*admin));
    }
    facts.tables = tables;
    facts.missing = missing;
    facts.publication = names_.publication;
    if (std::any_of(tables.begin(), tables.end(),
                    [](const TableSchema& t) { return t.partitioned(); })) {
      TALLY_ASSIGN_OR_RETURN(facts.publication_via_root,
                             PublishesViaRoot(*admin, names_.publication));
    }
    const IndexDecision decision = DecideIndex(facts);
    const bool index_lost = decision.index_lost;
    if (decision.build) {
      const bool rebuild = decision.rebuild;
      Log(absl::StrCat(
          rebuild ? "rebuilding the index: " : "building the index: ",
          decision.message));
      for (const TableSchema& t : tables) gate_->Close(t.name());
      {
        absl::MutexLock lock(&mu_);
        missing_ = missing;
      }
      SetKeyspaceStates(rebuild ? "rebuilding" : "building");
      Advance(SidecarEvent::kBuildStarted, absl::OkStatus());
      stream.reset();  // the build opens its own
      BuildOptions o;
      o.conninfo = options_.conninfo;
      o.names = names_;
      o.tables = tables;
      o.node_name = options_.node_name;
      o.rebuild = rebuild;
      o.index_lost = index_lost;
      o.missing.assign(missing.begin(), missing.end());
      std::sort(o.missing.begin(), o.missing.end());
      o.afresh = decision.afresh;
      o.max_value_bytes = options_.max_value_bytes;
      for (const std::string& name : o.missing) {
        Log(absl::StrCat("table ", name,
                         " is missing (dropped): its keyspace takes no rows "
                         "and its index forgets its rows (no delete is sent "
                         "to peers) until a table of that name exists again"));
      }
      for (const std::string& name : o.afresh) {
        Log(absl::StrCat("table ", name,
                         " is another table than the index describes: its "
                         "index is forgotten and the table built afresh"));
      }
      if (index_lost) o.lost_since_unix_us = marker->first_build_unix_us;
      {
        absl::MutexLock lock(&mu_);
        // Reports come every 5 s: the rate spans six of them.
        build_meter_ = tree::ProgressMeter(absl::Now(), absl::Seconds(30));
      }
      o.on_progress = [this](const BuildProgress& p) {
        tree::ProgressEstimate e;
        {
          absl::MutexLock lock(&mu_);
          status_.build_rows_done = p.rows_done;
          status_.build_rows_estimated = p.rows_estimated;
          // reltuples is -1 (0 here) for a table never analyzed: no total.
          build_meter_.set_total(p.rows_estimated > 0
                                     ? std::optional<uint64_t>(p.rows_estimated)
                                     : std::nullopt);
          const absl::Time now = absl::Now();
          build_meter_.Record(now, p.rows_done);
          e = build_meter_.Estimate(now);
        }
        Log(absl::StrFormat(
            "build: %d of ~%d rows read (%s), %d written, %.0f rows/s, ETA %s",
            p.rows_done, p.rows_estimated, p.keyspace, p.rows_written, e.rate,
            e.remaining.has_value() ? tree::FormatRemaining(*e.remaining)
                                    : std::string("unknown")));
      };
      TALLY_ASSIGN_OR_RETURN(BuildResult built, BuildIndex(o, store));
      Advance(SidecarEvent::kBuilt, absl::OkStatus());
      uint64_t fresh_rows = 0;
      for (const TableBuildCounts& c : built.tables) {
        fresh_rows += c.fresh_rows;
        if (!index_lost) continue;
        Log(absl::StrFormat(
            "index lost: table %s: %d of %d rows were last written here and "
            "got fresh versions (the rest kept the bootstrap version); %d "
            "rows deleted here got tombstones",
            c.keyspace, c.fresh_rows, c.rows, c.deleted_rows));
      }
      if (index_lost && !built.old_slot_read) {
        Log(absl::StrCat(
            "index lost: the old slot ", names_.slot,
            built.old_slot_error.empty()
                ? std::string(" was missing or lost")
                : absl::StrCat(" could not be read (", built.old_slot_error,
                               ")"),
            ", so rows deleted here while the index was lost are not known: "
            "the peers' copies of them come back"));
      }
      for (const std::string& table : built.truncated_while_lost) {
        Log(absl::StrCat("index lost: table ", table,
                         " was truncated here while the index was lost; the "
                         "rows it held are not known: the peers' copies of "
                         "them come back"));
      }
      {
        absl::MutexLock lock(&mu_);
        status_.index_lost = index_lost;
        status_.index_loss_fresh_rows = fresh_rows;
      }
      if (!marker.has_value() && !rebuild && !index_lost) {
        // The first build: rows committed before it got the bootstrap
        // version.
        marker = BuildMarker{built.position.system_id, built.started_unix_us};
      }
      schema_changed_ = false;
      gate_->SetMissing(missing);
      gate_->OpenAll();
      SetKeyspaceStates("ready");
      oversize_ = built.oversize;
      for (const auto& [ks, keys] : oversize_) ShowRefusal(ks);
      position = built.position;
      stream = std::move(built.stream);
    } else {
      gate_->SetMissing(missing);
      gate_->OpenAll();
      SetKeyspaceStates("ready");
      // A position that records no refusal: no row was over the limit.
      for (const auto& [ks, keys] : oversize_) gate_->SetRefused(ks, "");
      oversize_.clear();
      if (position->fingerprints.empty()) {
        // A position written before fingerprints were recorded: the
        // capture's next write records the schemas it follows with.
        for (const TableSchema& t : tables) {
          position->fingerprints[t.name()] = t.stored_fingerprint();
        }
      }
      for (const TableSchema& t : tables) {
        // Recorded before OIDs were (DecideIndex found it the same
        // table otherwise): the capture's next write records the OID, so
        // that a table dropped and created again while tallyd is stopped
        // is told from it at the next start.
        std::string& stored = position->fingerprints[t.name()];
        if (TableSchema::RelidOfStored(stored) == 0) {
          stored = t.stored_fingerprint();
        }
      }
    }
    // The index is built and its position stored: from now on, a start
    // without it is a loss. (Also for an index built before the marker
    // existed.) Not fatal: without the marker a lost index is rebuilt as at
    // a first start, as before it existed, and the log says so.
    if (!marker.has_value()) marker = BuildMarker{position->system_id, {}};
    if (absl::Status marked =
            WriteBuildMarker(*admin, names_.publication, *marker);
        !marked.ok()) {
      Log(absl::StrCat("cannot mark the index built on publication ",
                       names_.publication, " (", marked.ToString(),
                       "): if this node's data directory is lost, rows "
                       "written here while the peers had not received them "
                       "will lose to the peers' older rows"));
    }

    TALLY_RETURN_IF_ERROR(stream->StartReplication(
        names_.slot, position->resume_lsn, {names_.publication}));
    CaptureOptions co;
    co.conninfo = options_.conninfo;
    co.names = names_;
    co.tables = tables;
    co.node_name = options_.node_name;
    co.fault_points = options_.fault_points;
    co.oversize = oversize_;
    co.max_value_bytes = options_.max_value_bytes;
    co.on_oversize = [this](const std::string& ks, const std::string& key,
                            size_t bytes, size_t rows_over) {
      if (bytes > 0) {
        Log(absl::StrFormat(
            "WARNING keyspace %s: the row of key '%s' is %d bytes, over the "
            "value limit of %d (max_value_bytes); not indexed, and the "
            "keyspace takes and sends no rows while a row of it is over the "
            "limit",
            ks, absl::CHexEscape(key.substr(0, 64)), bytes,
            options_.max_value_bytes));
        oversize_[ks].insert(key);
      } else {
        oversize_[ks].erase(key);
        if (rows_over == 0) {
          Log(absl::StrCat("keyspace ", ks,
                           ": no row is over the value limit any more; it "
                           "takes and sends rows again"));
        }
      }
      ShowRefusal(ks);
    };
    TALLY_ASSIGN_OR_RETURN(std::unique_ptr<Capture> capture,
                           Capture::Create(co, store, *position));
    {
      absl::MutexLock lock(&mu_);
      capture_ = capture.get();
      AdvanceLocked(SidecarEvent::kResumed, absl::OkStatus());
      status_.confirmed_lsn = position->resume_lsn;
    }
    absl::Time next_poll = absl::InfinitePast();
    absl::Time next_check = absl::Now() + options_.schema_check_interval;
    absl::Time last_check = absl::Now();
    std::string catalog_change;
    const absl::Status followed = capture->Follow(*stream, [&] {
      Tick(*capture, *admin, &next_poll);
      if (stopping_.load()) return true;
      const absl::Time now = absl::Now();
      if (now >= next_check || (now >= last_check + kRequestedCheckSpacing &&
                                gate_->TakeCatalogCheckRequest())) {
        catalog_change = CatalogChange(*admin, tables, missing);
        last_check = absl::Now();
        next_check = last_check + options_.schema_check_interval;
        // Ends Follow (what it holds is stored); Run rebuilds.
        if (!catalog_change.empty()) return true;
      }
      return false;
    });
    Tick(*capture, *admin, &next_poll);
    {
      // The counters go on across reconnects.
      const CaptureCounters c = capture->counters();
      absl::MutexLock lock(&mu_);
      totals_.transactions_captured += c.transactions_captured;
      totals_.rows_captured += c.rows_captured;
      totals_.own_transactions_replayed += c.own_transactions_replayed;
    }
    if (absl::IsAborted(followed) && !capture->schema_changed().empty()) {
      schema_changed_ = true;
      schema_change_reason_ = capture->schema_changed();
      Log(absl::StrCat("schema change: ", schema_change_reason_));
    } else if (followed.ok() && !catalog_change.empty() && !stopping_.load()) {
      schema_changed_ = true;
      schema_change_reason_ = catalog_change;
      Log(absl::StrCat("schema change (catalog check): ", catalog_change));
    }
    return followed;
  }

  // Copies the capture's counters into the status, and polls the slot.
  void Tick(const Capture& capture, Connection& admin, absl::Time* next_poll) {
    const CaptureCounters c = capture.counters();
    std::optional<uint64_t> lag;
    std::string wal_status;
    if (absl::Now() >= *next_poll) {
      *next_poll = absl::Now() + kSlotPollInterval;
      absl::StatusOr<Result> r = admin.ExecParams(
          "SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint, "
          "coalesce(wal_status, '') FROM pg_replication_slots WHERE "
          "slot_name = $1",
          {Param::Text(names_.slot)});
      if (r.ok() && r->rows() == 1) {
        uint64_t v = 0;
        if (!r->IsNull(0, 0) && absl::SimpleAtoi(r->Value(0, 0), &v)) lag = v;
        wal_status = std::string(r->Value(0, 1));
      }
    }
    absl::MutexLock lock(&mu_);
    status_.received_lsn = c.received_lsn;
    status_.confirmed_lsn = c.confirmed_lsn;
    status_.transactions_captured =
        totals_.transactions_captured + c.transactions_captured;
    status_.rows_captured = totals_.rows_captured + c.rows_captured;
    status_.own_transactions_replayed =
        totals_.own_transactions_replayed + c.own_transactions_replayed;
    if (lag.has_value()) {
      status_.slot_lag_bytes = *lag;
      status_.slot_wal_status = wal_status;
    }
    if (c.idle || c.last_commit_time_us == 0) {
      status_.capture_lag = absl::ZeroDuration();
    } else {
      status_.capture_lag =
          std::max(absl::ZeroDuration(),
                   absl::Now() - FromPgTimestamp(c.last_commit_time_us));
    }
  }

  // Constant after construction.
  const SidecarOptions options_;
  const ReplicationNames names_;
  // Null until the database is reached (Prepare, or AwaitDatabase when it
  // was down at start); used by the thread only after that.
  std::shared_ptr<PgBackend> pg_;
  const std::shared_ptr<KeyspaceGate> gate_;
  const std::shared_ptr<SidecarBackend> backend_;

  std::atomic<bool> stopping_{false};
  // Used by the thread only.
  bool schema_changed_ = false;
  std::string schema_change_reason_;

  mutable absl::Mutex mu_;
  storage::Store* store_ ABSL_GUARDED_BY(mu_) = nullptr;
  // The change listener of the apply-after-store-commit fault point.
  std::optional<int> listener_ ABSL_GUARDED_BY(mu_);
  std::thread thread_ ABSL_GUARDED_BY(mu_);
  std::vector<TableSchema> tables_ ABSL_GUARDED_BY(mu_);
  // Kept tables missing from the database (dropped); tables_ lacks them.
  // Per keyspace, the keys of rows over the value limit, not indexed (the
  // build's, then the capture's). The thread's alone.
  OversizeKeys oversize_;
  absl::flat_hash_set<std::string> missing_ ABSL_GUARDED_BY(mu_);
  Capture* capture_ ABSL_GUARDED_BY(mu_) = nullptr;
  // The lifecycle's state: the phase status() names, the backoff.
  SidecarLoopState loop_ ABSL_GUARDED_BY(mu_);
  // All but the phase, which status() takes from loop_.
  SidecarStatus status_ ABSL_GUARDED_BY(mu_);
  // The current (or last) build's rows read over time.
  tree::ProgressMeter build_meter_ ABSL_GUARDED_BY(mu_) =
      tree::ProgressMeter(absl::Now());
  // The counters of the captures that ended (reconnects).
  CaptureCounters totals_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<Sidecar>> Sidecar::Prepare(
    const SidecarOptions& options) {
  if (options.conninfo.empty()) {
    return absl::InvalidArgumentError(
        "no PostgreSQL connection string (--postgres)");
  }
  if (options.tables.empty()) {
    return absl::InvalidArgumentError(
        "no table to keep: name at least one (--table SCHEMA.TABLE)");
  }
  if (options.node_name.empty()) {
    return absl::InvalidArgumentError("no node name");
  }
  if (options.schema_check_interval <= absl::ZeroDuration() ||
      options.schema_check_interval == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the schema check interval is ",
        absl::FormatDuration(options.schema_check_interval),
        "; it must be positive and finite (--pg-schema-check-interval)"));
  }
  for (const std::string& t : options.tables) {
    absl::Status valid = storage::ValidateKeyspaceName(t);
    if (!valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("table ", t, " cannot be a keyspace: ", valid.message(),
                       "; rename the table or keep another"));
    }
    std::string schema, table;
    TALLY_RETURN_IF_ERROR(SplitQualifiedName(t, &schema, &table));
  }
  ReplicationNames names = NamesForNode(options.node_name);
  auto gate = std::make_shared<KeyspaceGate>();
  for (const std::string& t : options.tables) gate->Close(t);
  absl::StatusOr<Reached> reached = ReachDatabase(options, names);
  if (!reached.ok() && !absl::IsUnavailable(reached.status())) {
    return reached.status();
  }
  if (!reached.ok()) {
    // Down or unreachable: the node starts all the same, and the thread
    // reaches it later (phase "reconnecting", the reason in status).
    reached = Reached{};
  }
  return std::unique_ptr<Sidecar>(new Sidecar(std::make_unique<Impl>(
      options, std::move(names), std::move(reached->tables),
      std::move(reached->missing), std::move(reached->pg), std::move(gate))));
}

Sidecar::Sidecar(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Sidecar::~Sidecar() = default;

std::shared_ptr<storage::RowBackend> Sidecar::backend() {
  return impl_->backend();
}
absl::Status Sidecar::Start(storage::Store* store) {
  return impl_->Start(store);
}
absl::Status Sidecar::AwaitCaughtUp(absl::Duration timeout) {
  return impl_->AwaitCaughtUp(timeout);
}
absl::StatusOr<VerifyResult> Sidecar::Verify(absl::string_view keyspace) {
  return impl_->Verify(keyspace);
}
void Sidecar::Stop() { impl_->Stop(); }
SidecarStatus Sidecar::status() const { return impl_->status(); }

}  // namespace pg
}  // namespace tally
