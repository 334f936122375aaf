#include "mariadb/sidecar/sidecar.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "mariadb/binlog/binlog_stream.h"
#include "mariadb/capture/capture_position.h"
#include "mariadb/capture/commit_stamps.h"
#include "mariadb/capture/preflight.h"
#include "mariadb/capture/snapshot.h"
#include "mariadb/connection.h"
#include "mariadb/sidecar/index_marker.h"
#include "mariadb/sidecar/local_writes.h"
#include "mariadb/sidecar/mariadb_backend.h"
#include "mariadb/sidecar/transaction_reader.h"
#include "mariadb/table.h"
#include "mariadb/url.h"
#include "pg/schema/names.h"
#include "pg/schema/row_codec.h"
#include "storage/bulk/gathered_rows.h"
#include "tree/digest.h"
#include "tree/status_macros.h"

namespace tally {
namespace mariadb {
namespace {

// The fingerprint a missing table's keyspace shows peers: no table has it,
// so their sessions refuse that keyspace alone and exchange none of its
// rows.
constexpr absl::string_view kMissingFingerprint =
    "postgresql/missing (the table is not in this node's MariaDB database)";

// The same for a keyspace refused for a row over the store's value limit,
// and the fingerprint its stored position records (a restart then rebuilds
// it, and looks again).
constexpr absl::string_view kRefusedFingerprint =
    "postgresql/refused (a row of this node's MariaDB table is over the value "
    "limit)";
constexpr absl::string_view kRefusedTable = "refused: a row over the limit";
// And for a kept table changed into one tally cannot keep (a column it
// cannot map, no primary key, a cascading foreign key): its index rows are
// forgotten as a missing table's, and it is built afresh once it can be
// kept again.
constexpr absl::string_view kUnkeptTable = "refused: the table cannot be kept";

constexpr absl::Duration kIoTimeout = absl::Seconds(30);

// Errors a later attempt cannot help: the thread stops in phase "failed".
bool IsPermanent(const absl::Status& s) {
  return absl::IsInvalidArgument(s) || absl::IsDataLoss(s) ||
         absl::IsPermissionDenied(s) || absl::IsUnauthenticated(s);
}

// Per keyspace: whether it takes rows from outside now.
class KeyspaceGate {
 public:
  void Close(const std::string& keyspace) {
    absl::MutexLock lock(&mu_);
    closed_.insert(keyspace);
  }
  void Open(const std::string& keyspace) {
    absl::MutexLock lock(&mu_);
    closed_.erase(keyspace);
  }
  void SetMissing(const std::string& keyspace, bool missing) {
    absl::MutexLock lock(&mu_);
    if (missing) {
      missing_.insert(keyspace);
    } else {
      missing_.erase(keyspace);
    }
  }
  bool closed(absl::string_view keyspace) const {
    absl::MutexLock lock(&mu_);
    return closed_.count(std::string(keyspace)) != 0;
  }
  bool missing(absl::string_view keyspace) const {
    absl::MutexLock lock(&mu_);
    return missing_.count(std::string(keyspace)) != 0;
  }
  // Refused (a row over the value limit), why; empty `why`: not refused.
  void SetRefused(const std::string& keyspace, std::string why) {
    absl::MutexLock lock(&mu_);
    if (why.empty()) {
      refused_.erase(keyspace);
    } else {
      refused_[keyspace] = std::move(why);
    }
  }
  std::string refused(absl::string_view keyspace) const {
    absl::MutexLock lock(&mu_);
    auto it = refused_.find(std::string(keyspace));
    return it == refused_.end() ? "" : it->second;
  }

 private:
  mutable absl::Mutex mu_;
  std::set<std::string> closed_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> missing_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> refused_ ABSL_GUARDED_BY(mu_);
};

// The backend the store gets: the MariaDbBackend of the tables as last
// read (replaced after a rebuild, which reads them again), counting what it
// applied and refused, and answering for keyspaces being built or missing
// — and kUnavailable for everything until the server is first reached.
class SidecarBackend final : public storage::RowBackend {
 public:
  explicit SidecarBackend(std::shared_ptr<KeyspaceGate> gate)
      : gate_(std::move(gate)) {}

  void set_inner(std::shared_ptr<MariaDbBackend> inner) {
    absl::MutexLock lock(&mu_);
    inner_ = std::move(inner);
  }

  absl::string_view name() const override { return "mariadb"; }
  absl::Status ApplyRows(absl::Span<const storage::RowChange> rows,
                         std::vector<storage::RowOutcome>* outcomes) override {
    TALLY_ASSIGN_OR_RETURN(std::shared_ptr<MariaDbBackend> in, inner());
    TALLY_RETURN_IF_ERROR(in->ApplyRows(rows, outcomes));
    bool any_applied = false;
    for (const storage::RowOutcome& o : *outcomes) {
      (o.applied ? applied_ : refused_).fetch_add(1);
      any_applied = any_applied || o.applied;
    }
    if (any_applied) apply_awaits_store_.store(true);
    return absl::OkStatus();
  }
  // True once per apply with applied rows, after it: at the store's next
  // change-log notification that apply's rows are committed.
  bool TakeApplyAwaitingStore() { return apply_awaits_store_.exchange(false); }
  absl::StatusOr<std::string> ReadValue(
      const storage::RowLocation& row,
      absl::string_view stored_payload) const override {
    TALLY_ASSIGN_OR_RETURN(std::shared_ptr<MariaDbBackend> in, inner());
    return in->ReadValue(row, stored_payload);
  }
  absl::StatusOr<std::vector<absl::StatusOr<std::string>>> ReadValues(
      absl::Span<const storage::RowLocation> rows,
      absl::Span<const absl::string_view> stored_payloads) const override {
    TALLY_ASSIGN_OR_RETURN(std::shared_ptr<MariaDbBackend> in, inner());
    return in->ReadValues(rows, stored_payloads);
  }
  absl::Status TakesRows(absl::string_view keyspace) const override {
    if (gate_->missing(keyspace)) {
      // kNotFound: waiting does not help, and a feed leaves this
      // keyspace's changes out instead of stopping for all.
      return absl::NotFoundError(absl::StrCat(
          "keyspace ", keyspace,
          " is missing: its table is not in the database; it takes no rows "
          "until a table of that name exists again"));
    }
    if (gate_->closed(keyspace)) {
      return absl::UnavailableError(absl::StrCat(
          "keyspace ", keyspace,
          " is being built from its table; it takes no rows until then"));
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
      return absl::UnavailableError(absl::StrCat(
          "keyspace ", keyspace, " is being built from its table"));
    }
    TALLY_ASSIGN_OR_RETURN(std::shared_ptr<MariaDbBackend> in, inner());
    return in->SchemaFingerprint(keyspace);
  }
  std::string SchemaDescription(absl::string_view keyspace) const override {
    absl::StatusOr<std::shared_ptr<MariaDbBackend>> in = inner();
    return in.ok() ? (*in)->SchemaDescription(keyspace) : "";
  }

  uint64_t applied() const { return applied_.load(); }
  uint64_t refused() const { return refused_.load(); }

 private:
  absl::StatusOr<std::shared_ptr<MariaDbBackend>> inner() const {
    absl::MutexLock lock(&mu_);
    if (inner_ == nullptr) {
      return absl::UnavailableError(
          "the MariaDB server has not been reached since tallyd started (see "
          "`tally status`: the sidecar's phase and last error)");
    }
    return inner_;
  }

  const std::shared_ptr<KeyspaceGate> gate_;
  mutable absl::Mutex mu_;
  std::shared_ptr<MariaDbBackend> inner_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> applied_{0};
  std::atomic<uint64_t> refused_{0};
  std::atomic<bool> apply_awaits_store_{false};
};

// Per replication domain, the sequence of its last transaction.
absl::StatusOr<std::map<uint32_t, uint64_t>> DomainSequences(
    absl::string_view gtid) {
  TALLY_ASSIGN_OR_RETURN(auto position, binlog::ParseGtidPosition(gtid));
  std::map<uint32_t, uint64_t> out;
  for (const auto& [domain, g] : position) out[domain] = g.sequence;
  return out;
}

// True when `indexed` holds every domain's transactions up to `target`'s.
bool Covers(const std::map<uint32_t, uint64_t>& indexed,
            const std::map<uint32_t, uint64_t>& target) {
  for (const auto& [domain, sequence] : target) {
    auto it = indexed.find(domain);
    if (it == indexed.end() || it->second < sequence) return false;
  }
  return true;
}

// Thrown-free signal: the capture met a transaction that asks for a
// rebuild; the reason travels in the status message.
absl::Status RebuildNeeded(absl::string_view why) {
  return absl::AbortedError(why);
}

}  // namespace

class Sidecar::Impl {
 public:
  Impl(SidecarOptions options, MariaDbTarget target)
      : options_(std::move(options)),
        target_(std::move(target)),
        gate_(std::make_shared<KeyspaceGate>()),
        backend_(std::make_shared<SidecarBackend>(gate_)) {
    absl::MutexLock lock(&mu_);
    status_.phase = "preparing";
    status_.server_id = options_.server_id;
    std::vector<std::string> names = options_.tables;
    std::sort(names.begin(), names.end());
    for (const std::string& t : names) {
      SidecarKeyspaceStatus k;
      k.name = t;
      k.state = "building";
      status_.keyspaces.push_back(k);
    }
  }
  ~Impl() { Stop(); }

  std::shared_ptr<storage::RowBackend> backend() { return backend_; }

  absl::Status Start(storage::Store* store) {
    absl::MutexLock lock(&mu_);
    if (started_) return absl::FailedPreconditionError("already started");
    started_ = true;
    store_ = store;
    if (options_.fault_points != nullptr &&
        options_.fault_points->armed().has_value()) {
      const pg::FaultPoint p = *options_.fault_points->armed();
      Log(absl::StrFormat("FOR TESTS: fault point %s armed (time %d)",
                          pg::FaultPointName(p),
                          options_.fault_points->count()));
      if (p == pg::FaultPoint::kApplyAfterStoreCommit) {
        listener_ = store->AddChangeListener([this](storage::Sequence) {
          if (backend_->TakeApplyAwaitingStore()) {
            options_.fault_points->Reach(
                pg::FaultPoint::kApplyAfterStoreCommit);
          }
        });
      }
    }
    thread_ = std::thread([this] { Run(); });
    return absl::OkStatus();
  }

  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    if (thread_.joinable()) thread_.join();
    int listener = -1;
    storage::Store* store = nullptr;
    {
      absl::MutexLock lock(&mu_);
      std::swap(listener, listener_);
      store = store_;
    }
    if (listener >= 0 && store != nullptr)
      store->RemoveChangeListener(listener);
    absl::MutexLock lock(&mu_);
    if (started_) status_.phase = "stopped";
  }

  SidecarStatus status() const {
    SidecarStatus s;
    {
      absl::MutexLock lock(&mu_);
      s = status_;
    }
    s.rows_applied = backend_->applied();
    s.rows_refused = backend_->refused();
    if (s.phase == "building" && s.build_elapsed > absl::ZeroDuration()) {
      s.build_rows_per_second =
          s.build_rows_done / absl::ToDoubleSeconds(s.build_elapsed);
    }
    return s;
  }

  absl::Status AwaitCaughtUp(absl::Duration timeout);
  absl::StatusOr<VerifyResult> Verify(absl::string_view keyspace);

 private:
  // The options of the apply over the tables `present`.
  MariaDbBackendOptions BackendOptions(std::vector<std::string> present) const {
    MariaDbBackendOptions bo;
    bo.url = options_.url;
    bo.tables = std::move(present);
    bo.apply_server_id = options_.server_id;
    bo.node = options_.node_name;
    bo.fault_points = options_.fault_points;
    return bo;
  }
  void Log(absl::string_view line) const {
    if (options_.log) {
      options_.log(line);
    } else {
      std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()),
                   line.data());
    }
  }
  bool stopping() const {
    absl::MutexLock lock(&mu_);
    return stopping_;
  }
  void SetPhase(absl::string_view phase, absl::string_view error) {
    absl::MutexLock lock(&mu_);
    status_.phase = std::string(phase);
    status_.last_error = std::string(error);
  }

  void Run();
  // Connects, checks, reads the tables, then builds or resumes and follows
  // until an error or Stop.
  absl::Status RunOnce();
  // Reads every kept table's schema on `conn` (nullopt: missing).
  absl::StatusOr<std::map<std::string, std::optional<MariaDbTable>>> ReadTables(
      Connection& conn);
  // Builds every kept table from one snapshot; returns the position after.
  // `lost_since`: the index was lost; the first build's GTID state.
  absl::StatusOr<CapturePosition> Build(
      const std::optional<CapturePosition>& stored, absl::string_view reason,
      const std::optional<std::string>& lost_since = std::nullopt);
  // Builds one table. `first`: rows get the bootstrap version, except, when
  // `lost` is given, the rows it says were written here (fresh), and a
  // tombstone (fresh) goes to each key it says was deleted here that the
  // table does not hold.
  absl::Status BuildTable(Connection& conn, const std::string& keyspace,
                          const std::optional<MariaDbTable>& table, bool first,
                          const tree::Version& fresh, const LocalWrites* lost);
  // The rows the server's applications wrote between the GTID states
  // `since` and `until` (ReadLocalWrites), each limit logged; none known
  // when the server holds no log to read.
  absl::StatusOr<LocalWrites> ReadLostWrites(const std::string& since,
                                             const std::string& until);
  // Follows the binary log from `position` until an error, Stop, or a
  // transaction that asks for a rebuild (kAborted with the reason).
  absl::Status Follow(CapturePosition position);
  absl::Status WriteBatch(std::vector<storage::Mutation> mutations,
                          const std::optional<CapturePosition>& position);
  void RefreshKeyspaceRows();
  // Whether `value` (of `key` in `keyspace`) may be indexed; a row over the
  // value limit is noted (the keyspace refused while any is), one that
  // fits again is cleared. `position` gets the keyspace's fingerprint as
  // it is now (kRefusedTable while refused, so a restart rebuilds it).
  // Capture thread only.
  bool Fits(const std::string& keyspace, const std::string& key,
            const std::optional<std::string>& value, CapturePosition* position);
  // Shows the keyspace's refusal (or its end) in the gate, the status and
  // `position`: a table that cannot be kept (unkept_), or rows over the
  // value limit.
  void ShowRefusal(const std::string& keyspace, CapturePosition* position);
  // What a position records for the kept table `keyspace` as last read:
  // its fingerprint, kUnkeptTable or kMissingTable.
  std::string RecordedFingerprint(const std::string& keyspace) const;
  // Reads the server's @@gtid_binlog_pos into the status on `conn`
  // (opened when null, dropped on an error).
  void RefreshServerGtid(std::unique_ptr<Connection>& conn);

  const SidecarOptions options_;
  const MariaDbTarget target_;
  const std::shared_ptr<KeyspaceGate> gate_;
  const std::shared_ptr<SidecarBackend> backend_;

  // The tables as last read, by keyspace (nullopt: missing). The capture
  // thread's alone.
  std::map<std::string, std::optional<MariaDbTable>> tables_;
  // Per keyspace, the keys of rows over the value limit, not indexed. The
  // capture thread's alone.
  std::map<std::string, std::set<std::string>> oversize_;
  // Kept tables the server holds but tally cannot keep as they are now,
  // with why (ReadTables). The capture thread's alone.
  std::map<std::string, std::string> unkept_;

  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  storage::Store* store_ ABSL_GUARDED_BY(mu_) = nullptr;
  // The store's change listener of apply-after-store-commit; -1: none.
  int listener_ ABSL_GUARDED_BY(mu_) = -1;
  SidecarStatus status_ ABSL_GUARDED_BY(mu_);
  // The GTID state the store holds everything up to (parsed).
  std::map<uint32_t, uint64_t> indexed_ ABSL_GUARDED_BY(mu_);
  bool following_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

void Sidecar::Impl::Run() {
  absl::Duration backoff = absl::Seconds(1);
  while (!stopping()) {
    const absl::Time began = absl::Now();
    const absl::Status s = RunOnce();
    if (stopping()) break;
    {
      absl::MutexLock lock(&mu_);
      following_ = false;
    }
    if (IsPermanent(s)) {
      SetPhase("failed", s.message());
      Log(absl::StrCat("mariadb sidecar failed: ", s.ToString()));
      absl::MutexLock lock(&mu_);
      changed_.SignalAll();
      return;
    }
    if (absl::Now() - began > absl::Minutes(1)) backoff = absl::Seconds(1);
    SetPhase("reconnecting", s.message());
    Log(absl::StrCat("mariadb sidecar: ", s.ToString(), "; trying again in ",
                     absl::FormatDuration(backoff)));
    absl::MutexLock lock(&mu_);
    changed_.SignalAll();
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), backoff);
    backoff = std::min(backoff * 2, absl::Seconds(30));
  }
}

absl::StatusOr<std::map<std::string, std::optional<MariaDbTable>>>
Sidecar::Impl::ReadTables(Connection& conn) {
  std::map<std::string, std::optional<MariaDbTable>> out;
  unkept_.clear();
  for (const std::string& name : options_.tables) {
    absl::StatusOr<MariaDbTable> t = MariaDbTable::Read(conn, name);
    if (absl::IsNotFound(t.status())) {
      out[name] = std::nullopt;
      continue;
    }
    const absl::Status keepable =
        t.ok() ? CheckTableForSidecar(conn, name) : t.status();
    if (absl::IsFailedPrecondition(keepable)) {
      // Changed into a table tally cannot keep (Prepare refused such a one
      // at start): this keyspace alone is refused.
      out[name] = std::nullopt;
      unkept_[name] = std::string(keepable.message());
      continue;
    }
    TALLY_RETURN_IF_ERROR(keepable);
    out[name] = std::move(*t);
  }
  return out;
}

absl::Status Sidecar::Impl::RunOnce() {
  storage::Store* store;
  {
    absl::MutexLock lock(&mu_);
    store = store_;
  }
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn,
                         Connection::Open(target_, kIoTimeout));
  TALLY_RETURN_IF_ERROR(CheckServerForSidecar(*conn));
  TALLY_ASSIGN_OR_RETURN(const std::string here, ServerIdentity(*conn));
  TALLY_ASSIGN_OR_RETURN(std::optional<IndexMarker> marker,
                         ReadIndexMarker(*conn, options_.node_name));
  // A marker another server wrote (a copy of the `tally` database) is none.
  if (marker.has_value() && marker->server != here) {
    Log(absl::StrCat("mariadb sidecar: the index marker of ",
                     options_.node_name, " names another server (",
                     marker->server, "; this is ", here,
                     "): a copy of the tally database, not this node's"));
    marker.reset();
  }
  TALLY_ASSIGN_OR_RETURN(auto stored_bytes, store->backend_position());
  std::optional<CapturePosition> stored;
  if (stored_bytes.has_value()) {
    TALLY_ASSIGN_OR_RETURN(stored,
                           CapturePosition::Decode(stored_bytes->bytes));
  }
  TALLY_ASSIGN_OR_RETURN(tables_, ReadTables(*conn));
  if (stored.has_value() && !marker.has_value()) {
    // An index built before markers existed (or on a server whose marker
    // went): its position stands in for the first build's.
    TALLY_RETURN_IF_ERROR(WriteIndexMarker(
        *conn, IndexMarker{options_.node_name, here, stored->gtid}));
  }
  conn.reset();

  // Build unless the stored position describes the tables as they are.
  std::string reason;
  std::optional<std::string> lost_since;
  if (!stored.has_value() && marker.has_value()) {
    lost_since = marker->first_build_gtid;
    reason = absl::StrCat(
        "index lost: the store holds no index, but the server's "
        "tally.index_marker says this node's index was built (first build "
        "at GTID ",
        marker->first_build_gtid,
        "); rows written here since then get fresh versions");
  } else if (!stored.has_value()) {
    reason = "no index position stored (a first start)";
  } else {
    for (const auto& [name, table] : tables_) {
      auto it = stored->fingerprints.find(name);
      const std::string now = RecordedFingerprint(name);
      if (it == stored->fingerprints.end() || it->second != now) {
        reason =
            absl::StrCat("table ", name, " changed while tallyd was stopped");
        break;
      }
    }
  }
  CapturePosition position;
  if (reason.empty()) {
    position = *stored;
    // The gate and backend for the tables as they are.
    std::vector<std::string> present;
    for (const auto& [name, table] : tables_) {
      gate_->SetMissing(name, !table.has_value() && unkept_.count(name) == 0);
      if (table.has_value()) present.push_back(name);
    }
    TALLY_ASSIGN_OR_RETURN(std::shared_ptr<MariaDbBackend> inner,
                           MariaDbBackend::Open(BackendOptions(present)));
    backend_->set_inner(std::move(inner));
    for (const auto& [name, table] : tables_) {
      ShowRefusal(name, nullptr);
      gate_->Open(name);
    }
  } else {
    TALLY_ASSIGN_OR_RETURN(position, Build(stored, reason, lost_since));
  }
  // Whether the last build was for a log that could not be read: the same
  // failure right after it is not worth another build.
  bool rebuilt_for_unreadable_log = false;
  for (;;) {
    uint64_t stored_before;
    {
      absl::MutexLock lock(&mu_);
      stored_before = status_.transactions_captured;
    }
    absl::Status s = Follow(position);
    if (stopping()) return absl::OkStatus();
    bool progressed;
    {
      absl::MutexLock lock(&mu_);
      progressed = status_.transactions_captured != stored_before;
    }
    if (absl::IsFailedPrecondition(s) || absl::IsDataLoss(s) ||
        absl::IsInternal(s)) {
      // The server sends a log the client cannot read from the stored
      // position (seen after a server crash: Connector/C's "Malformed
      // packet" on the crashed binlog file), or an event that does not
      // decode. Waiting does not help; a build from a new snapshot starts
      // the log after it, and finds in the tables whatever it held.
      if (rebuilt_for_unreadable_log && !progressed) return s;
      TALLY_ASSIGN_OR_RETURN(auto stored_now, store->backend_position());
      if (stored_now.has_value()) {
        TALLY_ASSIGN_OR_RETURN(position,
                               CapturePosition::Decode(stored_now->bytes));
      }
      TALLY_ASSIGN_OR_RETURN(
          position,
          Build(position, absl::StrCat("the binary log cannot be read from "
                                       "the stored position: ",
                                       s.message())));
      rebuilt_for_unreadable_log = true;
      continue;
    }
    rebuilt_for_unreadable_log = false;
    if (absl::IsOutOfRange(s)) {
      // The server no longer holds the log from the position.
      Log(absl::StrCat("mariadb sidecar: ", s.message(), "; rebuilding"));
      TALLY_ASSIGN_OR_RETURN(
          position, Build(position, absl::StrCat("the binary log from the "
                                                 "stored position is gone: ",
                                                 s.message())));
      continue;
    }
    if (absl::IsAborted(s)) {
      TALLY_ASSIGN_OR_RETURN(auto stored_now, store->backend_position());
      TALLY_ASSIGN_OR_RETURN(position,
                             CapturePosition::Decode(stored_now.value().bytes));
      TALLY_ASSIGN_OR_RETURN(position, Build(position, s.message()));
      continue;
    }
    return s;
  }
}

absl::StatusOr<CapturePosition> Sidecar::Impl::Build(
    const std::optional<CapturePosition>& stored, absl::string_view reason,
    const std::optional<std::string>& lost_since) {
  storage::Store* store;
  {
    absl::MutexLock lock(&mu_);
    store = store_;
    status_.phase = "building";
    status_.last_error.clear();
    status_.build_rows_done = 0;
    status_.build_rows_estimated = 0;
    status_.build_elapsed = absl::ZeroDuration();
    ++status_.builds;
    status_.last_rebuild_reason = std::string(reason);
    status_.index_lost = lost_since.has_value();
    status_.index_loss_fresh_rows = 0;
    for (SidecarKeyspaceStatus& k : status_.keyspaces) {
      k.state = stored.has_value() ? "rebuilding" : "building";
    }
  }
  Log(absl::StrCat("mariadb sidecar: building the index of ",
                   absl::StrJoin(options_.tables, ", "), ": ", reason));
  for (const std::string& t : options_.tables) gate_->Close(t);

  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn,
                         Connection::Open(target_, kIoTimeout));
  TALLY_ASSIGN_OR_RETURN(SnapshotPosition at, BeginSnapshot(*conn));
  if (at.gtid.empty()) {
    // A server that has logged no GTID yet (a fresh one, or after RESET
    // MASTER): a stream started from "" would start at the server's end at
    // the time it opens, not at the snapshot. Make it log one, then take
    // the snapshot again.
    TALLY_RETURN_IF_ERROR(conn->Exec("COMMIT"));
    TALLY_RETURN_IF_ERROR(conn->Exec("CREATE DATABASE IF NOT EXISTS tally"));
    TALLY_ASSIGN_OR_RETURN(at, BeginSnapshot(*conn));
    if (at.gtid.empty()) {
      return absl::FailedPreconditionError(
          "the MariaDB server logs no GTID (is log_bin on?)");
    }
  }
  // The tables as of the snapshot.
  TALLY_ASSIGN_OR_RETURN(tables_, ReadTables(*conn));
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, table] : tables_) {
      if (table.has_value()) {
        status_.build_rows_estimated += table->estimated_rows();
      }
    }
  }
  std::vector<std::string> present;
  for (const auto& [name, table] : tables_) {
    if (table.has_value()) present.push_back(name);
  }
  TALLY_ASSIGN_OR_RETURN(std::shared_ptr<MariaDbBackend> inner,
                         MariaDbBackend::Open(BackendOptions(present)));
  backend_->set_inner(std::move(inner));

  // Index lost: the rows this server's applications wrote since the first
  // build, from the binary log up to the snapshot.
  std::optional<LocalWrites> lost_writes;
  if (lost_since.has_value()) {
    TALLY_ASSIGN_OR_RETURN(lost_writes, ReadLostWrites(*lost_since, at.gtid));
  }
  const tree::Version fresh{store->clock().Now(), options_.node_name};
  const absl::Time began = absl::Now();
  CapturePosition position;
  position.gtid = at.gtid;
  position.last_stamp =
      stored.has_value() ? stored->last_stamp : tree::HlcTimestamp();
  for (const auto& [name, table] : tables_) {
    if (stopping()) return absl::CancelledError("stopping");
    // A first build, or a table missing until now: as at a first start.
    bool first = !stored.has_value();
    if (stored.has_value()) {
      auto it = stored->fingerprints.find(name);
      first = it == stored->fingerprints.end() || it->second == kMissingTable ||
              it->second == kUnkeptTable;
    }
    TALLY_RETURN_IF_ERROR(BuildTable(*conn, name, table, first, fresh,
                                     lost_writes ? &*lost_writes : nullptr));
    position.fingerprints[name] = RecordedFingerprint(name);
    ShowRefusal(name, &position);
    {
      absl::MutexLock lock(&mu_);
      status_.build_elapsed = absl::Now() - began;
    }
  }
  TALLY_RETURN_IF_ERROR(conn->Exec("COMMIT"));
  // The position goes last: a build cut short leaves the old one (or
  // none), and the next start builds again.
  TALLY_RETURN_IF_ERROR(WriteBatch({}, position));
  // The marker, once an index is stored: kept when it names this server
  // (the first build's position stays), written otherwise.
  TALLY_ASSIGN_OR_RETURN(const std::string here, ServerIdentity(*conn));
  TALLY_ASSIGN_OR_RETURN(std::optional<IndexMarker> marker,
                         ReadIndexMarker(*conn, options_.node_name));
  if (!marker.has_value() || marker->server != here) {
    TALLY_RETURN_IF_ERROR(WriteIndexMarker(
        *conn, IndexMarker{options_.node_name, here, at.gtid}));
  }
  for (const auto& [name, table] : tables_) {
    gate_->SetMissing(name, !table.has_value() && unkept_.count(name) == 0);
    gate_->Open(name);
  }
  {
    absl::MutexLock lock(&mu_);
    status_.build_elapsed = absl::Now() - began;
    for (SidecarKeyspaceStatus& k : status_.keyspaces) {
      const auto& table = tables_[k.name];
      k.state = unkept_.count(k.name) != 0  ? "refused"
                : !table.has_value()        ? "missing"
                : oversize_[k.name].empty() ? "ready"
                                            : "refused";
      k.fingerprint = table.has_value() ? table->schema().fingerprint() : "";
    }
  }
  RefreshKeyspaceRows();
  Log(absl::StrCat("mariadb sidecar: index built in ",
                   absl::FormatDuration(absl::Now() - began), " at GTID ",
                   at.gtid));
  return position;
}

absl::StatusOr<LocalWrites> Sidecar::Impl::ReadLostWrites(
    const std::string& since, const std::string& until) {
  LocalWritesOptions o;
  o.from_gtid = since;
  o.to_gtid = until;
  for (const auto& [name, table] : tables_) {
    o.tables[name] = table.has_value() ? &*table : nullptr;
  }
  o.node = options_.node_name;
  o.apply_server_id = options_.server_id;
  absl::StatusOr<LocalWrites> w = ReadLocalWrites(target_, o);
  if (absl::IsFailedPrecondition(w.status())) {
    Log(absl::StrCat(
        "mariadb sidecar: index lost, and the binary log since the first "
        "build cannot be read (",
        w.status().message(),
        "): every row keeps the bootstrap version, so a write made here "
        "that the peers had not received is replaced by the peers' row"));
    LocalWrites none;
    none.complete = false;
    return none;
  }
  TALLY_RETURN_IF_ERROR(w.status());
  if (!w->complete) {
    Log(
        absl::StrCat("mariadb sidecar: index lost; the binary log from the "
                     "first build (GTID ",
                     since,
                     ") is purged, read from the oldest the server holds "
                     "(GTID ",
                     w->read_from,
                     "): rows written here before it keep the bootstrap "
                     "version"));
  }
  if (w->unreadable_transactions > 0) {
    Log(absl::StrCat("mariadb sidecar: index lost; ",
                     w->unreadable_transactions,
                     " transactions since the first build could not be read "
                     "with the tables as they are now (written before a "
                     "schema change): their rows keep the bootstrap version"));
  }
  Log(absl::StrCat("mariadb sidecar: index lost; read ", w->transactions,
                   " transactions of the binary log from GTID ", w->read_from,
                   " to ", until));
  return w;
}

absl::Status Sidecar::Impl::BuildTable(Connection& conn,
                                       const std::string& keyspace,
                                       const std::optional<MariaDbTable>& table,
                                       bool first, const tree::Version& fresh,
                                       const LocalWrites* lost) {
  storage::Store* store;
  {
    absl::MutexLock lock(&mu_);
    store = store_;
  }
  if (absl::IsNotFound(store->GetKeyspace(keyspace).status())) {
    TALLY_RETURN_IF_ERROR(
        store->CreateKeyspace(keyspace, options_.keyspace_depth));
  }
  struct Indexed {
    tree::Version version;
    bool deleted;
    tree::Digest128 digest;
    bool seen = false;
  };
  absl::flat_hash_map<std::string, Indexed> index;
  TALLY_RETURN_IF_ERROR(store->ScanIndex(
      keyspace, [&](const storage::IndexRecord& r) -> absl::Status {
        index[std::string(r.key)] = Indexed{r.version, r.deleted, r.digest};
        return absl::OkStatus();
      }));

  std::vector<storage::Mutation> batch;
  auto flush = [&]() -> absl::Status {
    if (batch.empty()) return absl::OkStatus();
    std::vector<storage::Mutation> out;
    out.swap(batch);
    return WriteBatch(std::move(out), std::nullopt);
  };
  // The build looks at every row again.
  oversize_[keyspace].clear();
  if (!table.has_value()) {
    // Missing: the index forgets the table's rows (no tombstone: a DROP is
    // not replicated).
    for (const auto& [key, entry] : index) {
      storage::Mutation e = storage::Mutation::Erase(keyspace, key);
      e.version = fresh;  // a captured change carries one
      batch.push_back(std::move(e));
      if (batch.size() >= options_.batch_rows) TALLY_RETURN_IF_ERROR(flush());
    }
    return flush();
  }

  const tree::Version version = first ? pg::BootstrapVersion() : fresh;
  // Index lost: the keys written (deleted) here since the first build, as
  // the build meets them.
  uint64_t lost_fresh = 0;
  absl::flat_hash_map<std::string, bool> lost_deleted;
  if (lost != nullptr) {
    auto it = lost->keys.find(keyspace);
    if (it != lost->keys.end()) {
      for (const auto& [key, written] : it->second) {
        if (!written) lost_deleted.emplace(key, false);
      }
    }
  }
  auto version_of = [&](const std::string& key) -> const tree::Version& {
    if (lost != nullptr && first) {
      lost_deleted.erase(key);
      if (lost->Written(keyspace, key)) {
        ++lost_fresh;
        return fresh;
      }
    }
    return version;
  };
  const pg::RowCodec codec = table->schema().codec();
  // Rows of keys the index does not hold, at a build into an empty
  // keyspace: loaded in the index's order without a read per row.
  const bool load = index.empty();
  storage::GatheredRows gathered(load ? table->estimated_rows() : 0);
  uint64_t scanned = 0;
  std::string key, value;
  TALLY_RETURN_IF_ERROR(table->ForEachRow(
      conn, "", [&](absl::Span<const pg::Field> fields) -> absl::Status {
        key.clear();
        value.clear();
        TALLY_RETURN_IF_ERROR(codec.Encode(fields, &key, &value));
        if (++scanned % 4096 == 0) {
          absl::MutexLock lock(&mu_);
          status_.build_rows_done += 4096;
          if (stopping_) return absl::CancelledError("stopping");
        }
        if (value.size() > options_.max_value_bytes) {
          // Not indexed; the keyspace is refused (ShowRefusal after the
          // table). An index row of the key stays as it is.
          (void)Fits(keyspace, key, value, nullptr);
          if (auto it = index.find(key); it != index.end()) {
            it->second.seen = true;
          }
          return absl::OkStatus();
        }
        const std::string payload = MariaDbBackend::PayloadOf(value);
        if (load) {
          gathered.Add(key, value, payload, version_of(key));
          return absl::OkStatus();
        }
        auto it = index.find(key);
        if (it != index.end()) {
          it->second.seen = true;
          if (!it->second.deleted &&
              tree::RowDigest(keyspace, key, it->second.version, false,
                              value) == it->second.digest) {
            return absl::OkStatus();  // the index describes it
          }
        }
        storage::Mutation m = storage::Mutation::Put(keyspace, key, value);
        m.version = version_of(key);
        m.supersedes_stored = true;
        m.captured_payload = payload;
        batch.push_back(std::move(m));
        if (batch.size() >= options_.batch_rows) return flush();
        return absl::OkStatus();
      }));
  {
    absl::MutexLock lock(&mu_);
    status_.build_rows_done += scanned % 4096;
  }
  if (load) {
    gathered.Sort();
    storage::WriteRequest request;
    request.mode = storage::ApplyMode::kCaptured;
    auto load_batch = [&]() -> absl::Status {
      if (request.mutations.empty()) return absl::OkStatus();
      storage::WriteRequest out;
      out.mode = storage::ApplyMode::kCaptured;
      std::swap(out.mutations, request.mutations);
      return store->LoadAbsent(std::move(out)).status();
    };
    TALLY_RETURN_IF_ERROR(
        gathered.ForEach(keyspace, [&](storage::Mutation m) -> absl::Status {
          // Every replica builds the same rows with the bootstrap version:
          // no peer needs them from the feed. (A row written here before a
          // lost index has a fresh version: the feed sends it.)
          m.unlogged = first && m.version == pg::BootstrapVersion();
          request.mutations.push_back(std::move(m));
          if (request.mutations.size() >= options_.batch_rows) {
            return load_batch();
          }
          return absl::OkStatus();
        }));
    TALLY_RETURN_IF_ERROR(load_batch());
  }
  // Live index rows the table no longer holds.
  for (const auto& [k, entry] : index) {
    if (entry.seen || entry.deleted) continue;
    storage::Mutation d = storage::Mutation::Delete(keyspace, k);
    d.version = fresh;
    d.supersedes_stored = true;
    batch.push_back(std::move(d));
    if (batch.size() >= options_.batch_rows) TALLY_RETURN_IF_ERROR(flush());
  }
  if (lost == nullptr || !first) return flush();
  // Index lost: a key deleted here since the first build that the table
  // does not hold gets a tombstone, so that the peers' row does not come
  // back.
  for (const auto& [k, unused] : lost_deleted) {
    storage::Mutation d = storage::Mutation::Delete(keyspace, k);
    d.version = fresh;
    d.supersedes_stored = true;
    batch.push_back(std::move(d));
    if (batch.size() >= options_.batch_rows) TALLY_RETURN_IF_ERROR(flush());
  }
  TALLY_RETURN_IF_ERROR(flush());
  {
    absl::MutexLock lock(&mu_);
    status_.index_loss_fresh_rows += lost_fresh;
  }
  Log(absl::StrCat("mariadb sidecar: index lost: table ", keyspace, ": ",
                   lost_fresh, " of ", scanned,
                   " rows were last written here and got fresh versions (the "
                   "rest kept the bootstrap version); ",
                   lost_deleted.size(), " rows deleted here got tombstones"));
  return absl::OkStatus();
}

absl::Status Sidecar::Impl::WriteBatch(
    std::vector<storage::Mutation> mutations,
    const std::optional<CapturePosition>& position) {
  storage::Store* store;
  {
    absl::MutexLock lock(&mu_);
    store = store_;
  }
  storage::WriteRequest request;
  request.mode = storage::ApplyMode::kCaptured;
  request.mutations = std::move(mutations);
  if (position.has_value()) {
    request.backend_position = storage::BackendPosition{position->Encode()};
  }
  TALLY_ASSIGN_OR_RETURN(storage::WriteResult r,
                         store->Write(std::move(request)));
  if (position.has_value()) {
    absl::StatusOr<std::map<uint32_t, uint64_t>> sequences =
        DomainSequences(position->gtid);
    absl::MutexLock lock(&mu_);
    status_.indexed_gtid = position->gtid;
    if (sequences.ok()) indexed_ = *std::move(sequences);
    changed_.SignalAll();
  }
  (void)r;
  return absl::OkStatus();
}

void Sidecar::Impl::RefreshServerGtid(std::unique_ptr<Connection>& conn) {
  if (conn == nullptr) {
    absl::StatusOr<std::unique_ptr<Connection>> opened =
        Connection::Open(target_, absl::Seconds(5));
    if (!opened.ok()) return;
    conn = *std::move(opened);
  }
  absl::StatusOr<TextRows> rows =
      conn->Query("SELECT @@global.gtid_binlog_pos");
  if (!rows.ok()) {
    conn.reset();  // opened again next time
    return;
  }
  absl::MutexLock lock(&mu_);
  status_.server_gtid =
      rows->empty() || !(*rows)[0][0].has_value() ? "" : *(*rows)[0][0];
}

void Sidecar::Impl::RefreshKeyspaceRows() {
  storage::Store* store;
  {
    absl::MutexLock lock(&mu_);
    store = store_;
  }
  std::map<std::string, uint64_t> rows;
  for (const std::string& t : options_.tables) {
    absl::StatusOr<storage::KeyspaceInfo> info = store->GetKeyspace(t);
    if (info.ok()) rows[t] = info->row_count;
  }
  absl::MutexLock lock(&mu_);
  for (SidecarKeyspaceStatus& k : status_.keyspaces) k.rows = rows[k.name];
}

bool Sidecar::Impl::Fits(const std::string& keyspace, const std::string& key,
                         const std::optional<std::string>& value,
                         CapturePosition* position) {
  const bool over =
      value.has_value() && value->size() > options_.max_value_bytes;
  std::set<std::string>& keys = oversize_[keyspace];
  if (over) {
    Log(absl::StrFormat(
        "mariadb sidecar: WARNING keyspace %s: the row of key '%s' is %d "
        "bytes, over the value limit of %d (max_value_bytes); not indexed, "
        "and the keyspace takes and sends no rows while a row of it is over "
        "the limit",
        keyspace, absl::CHexEscape(key.substr(0, 64)), value->size(),
        options_.max_value_bytes));
    if (keys.insert(key).second && keys.size() == 1) {
      ShowRefusal(keyspace, position);
    }
    return false;
  }
  if (keys.erase(key) > 0 && keys.empty()) {
    Log(absl::StrCat("mariadb sidecar: keyspace ", keyspace,
                     ": no row is over the value limit any more; it takes "
                     "and sends rows again"));
    ShowRefusal(keyspace, position);
  }
  return true;
}

void Sidecar::Impl::ShowRefusal(const std::string& keyspace,
                                CapturePosition* position) {
  const std::set<std::string>& keys = oversize_[keyspace];
  std::string why;
  if (auto u = unkept_.find(keyspace); u != unkept_.end()) {
    why = absl::StrCat("keyspace ", keyspace,
                       " is refused: it takes and sends no rows until its "
                       "table can be kept again: ",
                       u->second);
  } else if (!keys.empty()) {
    why = absl::StrFormat(
        "keyspace %s is refused: %d of its rows are over the value limit of "
        "%d bytes (max_value_bytes; first key '%s'); it takes and sends no "
        "rows until none is",
        keyspace, keys.size(), options_.max_value_bytes,
        absl::CHexEscape(keys.begin()->substr(0, 64)));
  }
  gate_->SetRefused(keyspace, why);
  const auto& table = tables_[keyspace];
  if (position != nullptr && table.has_value()) {
    position->fingerprints[keyspace] = keys.empty()
                                           ? table->schema().fingerprint()
                                           : std::string(kRefusedTable);
  }
  absl::MutexLock lock(&mu_);
  for (SidecarKeyspaceStatus& k : status_.keyspaces) {
    if (k.name != keyspace) continue;
    k.trouble = why;
    if (table.has_value() || unkept_.count(keyspace) != 0) {
      k.state = why.empty() ? "ready" : "refused";
    }
  }
}

std::string Sidecar::Impl::RecordedFingerprint(
    const std::string& keyspace) const {
  auto it = tables_.find(keyspace);
  if (it != tables_.end() && it->second.has_value()) {
    return it->second->schema().fingerprint();
  }
  return std::string(unkept_.count(keyspace) != 0 ? kUnkeptTable
                                                  : kMissingTable);
}

absl::Status Sidecar::Impl::Follow(CapturePosition position) {
  storage::Store* store;
  {
    absl::MutexLock lock(&mu_);
    store = store_;
  }
  binlog::BinlogStreamOptions so;
  so.replica_server_id = options_.server_id + 1;
  so.start_gtid = position.gtid;
  so.heartbeat_period = options_.heartbeat_period;
  so.read_timeout = std::max(absl::Seconds(5), 4 * options_.heartbeat_period);
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<binlog::BinlogStream> stream,
                         binlog::BinlogStream::Open(target_, so));
  std::map<std::string, const MariaDbTable*> kept;
  for (const auto& [name, table] : tables_) {
    kept[name] = table.has_value() ? &*table : nullptr;
  }
  TransactionReader reader(kept, options_.node_name);
  // For the status's "server at": the server's last GTID, read now and
  // then while idle (none: the field keeps its last value).
  std::unique_ptr<Connection> server;
  RefreshServerGtid(server);
  BinlogCommitStamps stamps;
  stamps.Resume(position.last_stamp);
  {
    absl::MutexLock lock(&mu_);
    status_.phase = "following";
    status_.last_error.clear();
    following_ = true;
    changed_.SignalAll();
  }
  Log(absl::StrCat("mariadb sidecar: following the binary log from GTID ",
                   position.gtid.empty() ? "(none)" : position.gtid));

  // Transactions read but not stored yet; stored together (one store
  // commit) when the batch is full, the oldest has waited, or the server
  // is idle.
  std::vector<storage::Mutation> batch;
  // Transactions read since the last stored position, and of them those
  // of the applications that changed kept tables (the status counts).
  uint64_t batch_transactions = 0;
  uint64_t batch_captured = 0;
  uint64_t batch_own = 0;
  uint32_t batch_last_second = 0;
  std::optional<absl::Time> batch_since;
  absl::Time last_position_store = absl::Now();
  absl::Time last_refresh = absl::Now();
  const std::string own_origin = options_.node_name;

  auto flush = [&](bool with_position) -> absl::Status {
    if (batch.empty() && !with_position) return absl::OkStatus();
    const uint64_t rows = batch.size();
    TALLY_RETURN_IF_ERROR(WriteBatch(
        std::move(batch), with_position
                              ? std::optional<CapturePosition>(position)
                              : std::nullopt));
    batch.clear();
    if (rows > 0) {
      pg::ReachFaultPoint(options_.fault_points,
                          pg::FaultPoint::kCaptureAfterIndexCommit);
    }
    absl::MutexLock lock(&mu_);
    status_.rows_captured += rows;
    if (with_position) {
      status_.transactions_captured += batch_captured;
      status_.own_transactions_replayed += batch_own;
      batch_transactions = 0;
      batch_captured = 0;
      batch_own = 0;
      batch_since.reset();
      status_.capture_lag =
          batch_last_second == 0
              ? absl::ZeroDuration()
              : std::max(absl::ZeroDuration(),
                         absl::Now() -
                             absl::FromUnixSeconds(batch_last_second) -
                             absl::Seconds(1));
    }
    return absl::OkStatus();
  };

  while (!stopping()) {
    TALLY_ASSIGN_OR_RETURN(binlog::BinlogEvent event,
                           stream->Next(absl::Milliseconds(5)));
    if (event.idle()) {
      if (batch_transactions > 0) TALLY_RETURN_IF_ERROR(flush(true));
      {
        absl::MutexLock lock(&mu_);
        status_.capture_lag = absl::ZeroDuration();
      }
      // Transactions of tables not kept move the position too: store it
      // now and then, so that a restart does not ask for logs the server
      // may have purged since.
      const std::string state = stream->gtid_state();
      if (!reader.in_transaction() && state != position.gtid &&
          absl::Now() - last_position_store > absl::Seconds(1)) {
        position.gtid = state;
        TALLY_RETURN_IF_ERROR(flush(true));
        last_position_store = absl::Now();
      }
      if (absl::Now() - last_refresh > absl::Seconds(2)) {
        RefreshKeyspaceRows();
        RefreshServerGtid(server);
        last_refresh = absl::Now();
      }
      continue;
    }
    TALLY_ASSIGN_OR_RETURN(std::optional<CapturedTransaction> txn,
                           reader.Add(event));
    if (!txn.has_value()) continue;
    if (!txn->rebuild.empty()) {
      // Everything before this transaction is stored, then the tables are
      // read again: the rebuild's snapshot is after it.
      TALLY_RETURN_IF_ERROR(flush(batch_transactions > 0));
      Log(absl::StrCat("mariadb sidecar: ", txn->rebuild_reason,
                       "; rebuilding the index"));
      return RebuildNeeded(txn->rebuild_reason);
    }
    const bool own = txn->server_id == options_.server_id;
    if (own) {
      // This node's apply: its rows take the versions its log lists. The
      // rows it changed that the log does not list are a trigger's, local.
      std::map<std::pair<std::string, std::string>, const AppliedRow*> listed;
      if (txn->apply_log.has_value()) {
        for (const AppliedRow& row : txn->apply_log->rows) {
          listed[{row.keyspace, row.key}] = &row;
        }
      }
      std::optional<tree::Version> local;
      for (CapturedRow& row : txn->rows) {
        if (!Fits(row.keyspace, row.key, row.value, &position)) continue;
        auto it = listed.find({row.keyspace, row.key});
        storage::Mutation m =
            row.value.has_value()
                ? storage::Mutation::Put(row.keyspace, row.key, *row.value)
                : storage::Mutation::Delete(row.keyspace, row.key);
        if (row.value.has_value()) {
          m.captured_payload = MariaDbBackend::PayloadOf(*row.value);
        }
        if (it != listed.end()) {
          if (it->second->erased) continue;
          m.version = it->second->version;
        } else {
          if (!local.has_value()) {
            tree::HlcTimestamp stamp = stamps.Next(txn->commit_second);
            if (!store->clock().Observe(stamp).ok()) {
              stamp = store->clock().Now();
            }
            local = tree::Version{stamp, own_origin};
          }
          m.version = *local;
          m.supersedes_stored = true;
        }
        batch.push_back(std::move(m));
      }
      ++batch_own;
    } else if (!txn->rows.empty()) {
      tree::HlcTimestamp stamp = stamps.Next(txn->commit_second);
      if (!store->clock().Observe(stamp).ok()) stamp = store->clock().Now();
      const tree::Version version{stamp, own_origin};
      for (CapturedRow& row : txn->rows) {
        if (!Fits(row.keyspace, row.key, row.value, &position)) continue;
        storage::Mutation m =
            row.value.has_value()
                ? storage::Mutation::Put(row.keyspace, std::move(row.key),
                                         *row.value)
                : storage::Mutation::Delete(row.keyspace, std::move(row.key));
        if (row.value.has_value()) {
          m.captured_payload = MariaDbBackend::PayloadOf(*row.value);
        }
        m.version = version;
        m.supersedes_stored = true;
        batch.push_back(std::move(m));
        if (batch.size() >= options_.batch_rows) {
          // A large transaction goes in parts; the position moves only with
          // its last, and a replay gives its rows the same versions.
          TALLY_RETURN_IF_ERROR(flush(false));
        }
      }
    }
    position.gtid = stream->gtid_state();
    position.last_stamp = std::max(position.last_stamp, stamps.last());
    ++batch_transactions;
    if (!own && !txn->rows.empty()) ++batch_captured;
    batch_last_second = txn->commit_second;
    if (!batch_since.has_value()) batch_since = absl::Now();
    if (batch.size() >= options_.batch_rows ||
        absl::Now() - *batch_since >= absl::Milliseconds(5)) {
      TALLY_RETURN_IF_ERROR(flush(true));
      last_position_store = absl::Now();
    }
  }
  return absl::OkStatus();
}

absl::Status Sidecar::Impl::AwaitCaughtUp(absl::Duration timeout) {
  {
    absl::MutexLock lock(&mu_);
    if (!started_) return absl::FailedPreconditionError("not started");
  }
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn,
                         Connection::Open(target_, kIoTimeout));
  TALLY_ASSIGN_OR_RETURN(TextRows rows,
                         conn->Query("SELECT @@global.gtid_binlog_pos"));
  const std::string target =
      rows.empty() || !rows[0][0].has_value() ? "" : *rows[0][0];
  TALLY_ASSIGN_OR_RETURN(auto wanted, DomainSequences(target));
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  status_.server_gtid = target;
  for (;;) {
    if (status_.phase == "failed") {
      return absl::FailedPreconditionError(
          absl::StrCat("the sidecar failed: ", status_.last_error));
    }
    if (following_ && Covers(indexed_, wanted)) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the index holds GTID ",
          status_.indexed_gtid.empty() ? "(none)" : status_.indexed_gtid,
          ", the server was at ", target, "; phase ", status_.phase,
          status_.last_error.empty() ? "" : ": ", status_.last_error));
    }
    changed_.WaitWithDeadline(&mu_, deadline);
  }
}

absl::StatusOr<VerifyResult> Sidecar::Impl::Verify(absl::string_view keyspace) {
  if (std::find(options_.tables.begin(), options_.tables.end(), keyspace) ==
      options_.tables.end()) {
    return absl::NotFoundError(
        absl::StrCat("verify: ", keyspace, " is not a table this node keeps"));
  }
  storage::Store* store;
  {
    absl::MutexLock lock(&mu_);
    store = store_;
    if (store == nullptr) return absl::FailedPreconditionError("not started");
  }
  VerifyResult result;
  result.keyspace = std::string(keyspace);
  struct Indexed {
    tree::Version version;
    tree::Digest128 digest;
    bool seen = false;
  };
  absl::flat_hash_map<std::string, Indexed> index;
  const absl::Status scanned = store->ScanIndex(
      keyspace, [&](const storage::IndexRecord& r) -> absl::Status {
        if (!r.deleted) {
          index[std::string(r.key)] = Indexed{r.version, r.digest};
        }
        return absl::OkStatus();
      });
  if (!scanned.ok() && !absl::IsNotFound(scanned)) return scanned;
  result.index_rows = index.size();
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn,
                         Connection::Open(target_, kIoTimeout));
  TALLY_RETURN_IF_ERROR(
      conn->Exec("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"));
  absl::StatusOr<MariaDbTable> table = MariaDbTable::Read(*conn, keyspace);
  if (!absl::IsNotFound(table.status())) {
    TALLY_RETURN_IF_ERROR(table.status());
    const pg::RowCodec codec = table->schema().codec();
    std::string key, value;
    TALLY_RETURN_IF_ERROR(table->ForEachRow(
        *conn, "", [&](absl::Span<const pg::Field> fields) -> absl::Status {
          key.clear();
          value.clear();
          TALLY_RETURN_IF_ERROR(codec.Encode(fields, &key, &value));
          ++result.table_rows;
          auto it = index.find(key);
          if (it == index.end()) {
            result.missing_from_index.push_back(key);
            return absl::OkStatus();
          }
          it->second.seen = true;
          if (tree::RowDigest(keyspace, key, it->second.version, false,
                              value) != it->second.digest) {
            result.mismatched_keys.push_back(key);
          }
          return absl::OkStatus();
        }));
  }
  (void)conn->Exec("COMMIT");
  for (const auto& [k, entry] : index) {
    if (!entry.seen) result.missing_from_table.push_back(k);
  }
  std::sort(result.missing_from_table.begin(), result.missing_from_table.end());
  return result;
}

absl::StatusOr<std::unique_ptr<Sidecar>> Sidecar::Prepare(
    const SidecarOptions& options) {
  if (options.tables.empty()) {
    return absl::InvalidArgumentError("mariadb sidecar: no table to keep");
  }
  if (options.node_name.empty()) {
    return absl::InvalidArgumentError("mariadb sidecar: no node name");
  }
  if (options.server_id == 0 || options.server_id >= 0xFFFFFFFEu) {
    return absl::InvalidArgumentError(
        "mariadb sidecar: server_id must be within 1..4294967293 (the binlog "
        "reader takes server_id + 1)");
  }
  if (options.batch_rows == 0) {
    return absl::InvalidArgumentError("mariadb sidecar: batch_rows is 0");
  }
  TALLY_ASSIGN_OR_RETURN(MariaDbTarget target, ParseMariaDbUrl(options.url));
  for (const std::string& t : options.tables) {
    if (t.find('.') == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mariadb sidecar: table ", t, " is not qualified as database.table"));
    }
  }
  // The checks now, so that a server set up wrong stops tallyd at start
  // with the fix; a server not reached is left to the thread.
  absl::StatusOr<std::unique_ptr<Connection>> conn =
      Connection::Open(target, kIoTimeout);
  if (conn.ok()) {
    TALLY_RETURN_IF_ERROR(CheckServerForSidecar(**conn));
    for (const std::string& t : options.tables) {
      absl::StatusOr<MariaDbTable> table = MariaDbTable::Read(**conn, t);
      // A missing table is kept as missing (it may be created later).
      if (!table.ok() && !absl::IsNotFound(table.status())) {
        return table.status();
      }
      if (table.ok()) TALLY_RETURN_IF_ERROR(CheckTableForSidecar(**conn, t));
    }
  } else if (!absl::IsUnavailable(conn.status())) {
    return conn.status();
  }
  return std::unique_ptr<Sidecar>(
      new Sidecar(std::make_unique<Impl>(options, std::move(target))));
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

}  // namespace mariadb
}  // namespace tally
