#include "node/sidecar/database_source.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <random>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "mariadb/connection.h"
#include "mariadb/table.h"
#include "mariadb/url.h"
#include "node/config/postgres_settings.h"
#include "node/observe/log.h"
#include "pg/schema/schema_difference.h"
#include "pg/table_diff/table_diff.h"
#include "pg/table_diff/table_scan.h"
#include "pg/wire/connection.h"
#include "tree/status_macros.h"

namespace tally {
namespace node {
namespace {

namespace v1 = ::tally::v1;

// A store batch stays well below StoreOptions::max_batch_bytes (16 MiB),
// whatever the rows' sizes.
constexpr size_t kMaxBatchBytes = 4 << 20;

// DiffTables names its sides "a" (the replica here) and "b" (the master):
// the operator reads which database said it.
std::string SideNamed(const absl::Status& status) {
  std::string message(status.message());
  if (absl::StartsWith(message, "a: ")) {
    message = absl::StrCat("this node's database: ", message.substr(3));
  } else if (absl::StartsWith(message, "b: ")) {
    message = absl::StrCat("the source: ", message.substr(3));
  }
  return message;
}

// A role without SELECT meets "permission denied for table t" (MariaDB:
// "SELECT command denied"): say what it needs.
std::string WithHint(const std::string& table, std::string message) {
  if (absl::StrContains(message, "permission denied")) {
    absl::StrAppend(&message, " (the source's role needs SELECT on ", table,
                    " and TEMP on its database)");
  } else if (absl::StrContains(message, "command denied")) {
    // MariaDB's "SELECT command denied to user ... for table ...".
    absl::StrAppend(&message, " (the source's user needs SELECT on ", table,
                    ")");
  }
  return message;
}

// Writes `mutations` as a copy from the source; adds what happened to
// `result`.
absl::Status WriteBatch(storage::Store* store,
                        std::vector<storage::Mutation> mutations,
                        SourceSessionResult* result) {
  if (mutations.empty()) return absl::OkStatus();
  std::vector<bool> deleted;
  deleted.reserve(mutations.size());
  for (const storage::Mutation& m : mutations) deleted.push_back(m.deleted);
  storage::WriteRequest request;
  request.mode = storage::ApplyMode::kSourceOverride;
  request.mutations = std::move(mutations);
  TALLY_ASSIGN_OR_RETURN(storage::WriteResult written,
                         store->Write(std::move(request)));
  for (size_t i = 0; i < written.applied.size(); ++i) {
    if (!written.applied[i]) continue;
    if (deleted[i]) {
      ++result->rows_deleted;
    } else {
      ++result->rows_copied;
    }
  }
  result->rows_refused += written.refused.size();
  result->rows_rejected += written.rejected.size();
  // Rows not taken (a table still being built, a row the database
  // refuses) are still owed: the table's session fails, naming why, and
  // the next one tries them again.
  return storage::RejectionError(written);
}

// Reads the master's rows at some keys (canonical key bytes).
using ReadMasterRows =
    std::function<absl::StatusOr<std::vector<pg::CanonicalRow>>(
        absl::Span<const std::string> keys)>;

// Copies the master's rows at the differing keys of one table, in batches.
absl::Status CopyDifferences(
    storage::Store* store, const DatabaseSourceOptions& options,
    const std::string& origin, const std::string& table,
    const std::string& keyspace,
    const std::vector<pg::RowDifference>& differences,
    const ReadMasterRows& read_master, BandwidthLimiter* source_limit,
    const std::atomic<bool>* cancelled, SourceSessionResult* result) {
  result->differences += differences.size();
  for (size_t begin = 0; begin < differences.size();
       begin += options.batch_rows) {
    if (cancelled->load()) return absl::CancelledError("stopped");
    const size_t end = std::min(differences.size(), begin + options.batch_rows);
    std::vector<std::string> keys;
    keys.reserve(end - begin);
    for (size_t i = begin; i < end; ++i) keys.push_back(differences[i].key);
    // Read now, not in the diff's snapshot: a row the master changed since
    // is copied as it is now.
    absl::StatusOr<std::vector<pg::CanonicalRow>> rows = read_master(keys);
    if (!rows.ok()) {
      return absl::Status(
          rows.status().code(),
          WithHint(table,
                   absl::StrCat("the source: ", rows.status().message())));
    }
    uint64_t bytes = 0;
    absl::flat_hash_map<std::string, std::string> values;
    for (pg::CanonicalRow& row : *rows) {
      bytes += row.key.size() + row.value.size();
      values.emplace(std::move(row.key), std::move(row.value));
    }
    result->bytes_from_source += bytes;
    TALLY_RETURN_IF_ERROR(source_limit->Take(bytes, cancelled));
    if (options.node_bandwidth != nullptr) {
      TALLY_RETURN_IF_ERROR(options.node_bandwidth->Take(bytes, cancelled));
    }
    std::vector<storage::Mutation> batch;
    size_t batch_bytes = 0;
    for (std::string& key : keys) {
      auto it = values.find(key);
      storage::Mutation m =
          it == values.end()
              ? storage::Mutation::Delete(keyspace, std::move(key))
              : storage::Mutation::Put(keyspace, std::move(key),
                                       std::move(it->second));
      m.version = tree::Version{store->clock().Now(), origin};
      batch_bytes += m.key.size() + m.value.size();
      batch.push_back(std::move(m));
      if (batch_bytes >= kMaxBatchBytes) {
        TALLY_RETURN_IF_ERROR(WriteBatch(store, std::move(batch), result));
        batch.clear();
        batch_bytes = 0;
      }
    }
    TALLY_RETURN_IF_ERROR(WriteBatch(store, std::move(batch), result));
  }
  return absl::OkStatus();
}

// One table of a PostgreSQL master: a block-hash diff, then the master's
// rows at the differing keys.
absl::Status SyncTable(storage::Store* store,
                       const DatabaseSourceOptions& options,
                       const std::string& origin, pg::Connection& replica,
                       pg::Connection& master, const std::string& table,
                       BandwidthLimiter* source_limit,
                       const std::atomic<bool>* cancelled,
                       SourceSessionResult* result) {
  absl::StatusOr<pg::TableDiff> diff = pg::DiffTables(
      replica, master, table, table, {}, pg::Transfer::kBlockHashes);
  if (!diff.ok()) {
    return absl::Status(diff.status().code(),
                        WithHint(table, SideNamed(diff.status())));
  }
  result->bytes_from_source += diff->bytes_read_b;
  const pg::TableSchema& master_schema = diff->schema_b;
  return CopyDifferences(
      store, options, origin, table, diff->keyspace, diff->differences,
      [&](absl::Span<const std::string> keys) {
        return pg::ReadRowsByKey(master, master_schema, keys);
      },
      source_limit, cancelled, result);
}

// The MariaDB table a kept table "schema.t" is copied from: "DB.t", DB
// being the source URL's database.
std::string MariaDbTableOf(const std::string& database,
                           const std::string& table) {
  return absl::StrCat(database, ".", table.substr(table.find('.') + 1));
}

// A table's schema and rows, read the same way from either engine, so that
// one comparison by full scans serves every pairing of the node's database
// and the master.
absl::StatusOr<pg::TableSchema> ReadTable(pg::Connection& conn,
                                          const std::string& table) {
  return pg::TableSchema::Read(conn, table);
}
absl::StatusOr<mariadb::MariaDbTable> ReadTable(mariadb::Connection& conn,
                                                const std::string& table) {
  return mariadb::MariaDbTable::Read(conn, table);
}
const pg::TableSchema& SchemaOf(const pg::TableSchema& schema) {
  return schema;
}
const pg::TableSchema& SchemaOf(const mariadb::MariaDbTable& table) {
  return table.schema();
}
absl::StatusOr<pg::TableScan> ScanTable(pg::Connection& conn,
                                        const pg::TableSchema& schema,
                                        const std::string& keyspace) {
  return pg::TableScan::Run(conn, schema, keyspace);
}
absl::StatusOr<pg::TableScan> ScanTable(mariadb::Connection& conn,
                                        const mariadb::MariaDbTable& table,
                                        const std::string& keyspace) {
  return table.Scan(conn, keyspace, "", nullptr);
}
absl::StatusOr<std::vector<pg::CanonicalRow>> ReadRows(
    pg::Connection& conn, const pg::TableSchema& schema,
    absl::Span<const std::string> keys) {
  return pg::ReadRowsByKey(conn, schema, keys);
}
absl::StatusOr<std::vector<pg::CanonicalRow>> ReadRows(
    mariadb::Connection& conn, const mariadb::MariaDbTable& table,
    absl::Span<const std::string> keys) {
  return table.ReadRowsByKey(conn, keys);
}

// One table compared by reading both sides whole and digesting them in the
// canonical form (a MariaDB side has no fast hash to compute block hashes
// with), then the master's rows at the differing keys. `master_table` is
// the table's name on the master.
template <typename Replica, typename Master>
absl::Status SyncByScans(storage::Store* store,
                         const DatabaseSourceOptions& options,
                         const std::string& origin, Replica& replica,
                         Master& master, const std::string& table,
                         const std::string& master_table,
                         BandwidthLimiter* source_limit,
                         const std::atomic<bool>* cancelled,
                         SourceSessionResult* result) {
  auto mine = ReadTable(replica, table);
  if (!mine.ok()) {
    return absl::Status(
        mine.status().code(),
        absl::StrCat("this node's database: ", mine.status().message()));
  }
  auto source = ReadTable(master, master_table);
  if (!source.ok()) {
    return absl::Status(
        source.status().code(),
        WithHint(master_table,
                 absl::StrCat("the source: ", source.status().message())));
  }
  if (SchemaOf(*mine).fingerprint() != SchemaOf(*source).fingerprint()) {
    std::string why = pg::DescribeSchemaDifference(
        SchemaOf(*mine).description(), SchemaOf(*source).description());
    absl::StrReplaceAll({{" there", " on the source"}}, &why);
    return absl::FailedPreconditionError(
        absl::StrCat("schemas of ", table, " and the source's ", master_table,
                     " differ: ", why, "; their rows cannot be compared"));
  }
  absl::StatusOr<pg::TableScan> ours = ScanTable(replica, *mine, table);
  if (!ours.ok()) {
    return absl::Status(
        ours.status().code(),
        absl::StrCat("this node's database: ", ours.status().message()));
  }
  absl::StatusOr<pg::TableScan> theirs = ScanTable(master, *source, table);
  if (!theirs.ok()) {
    return absl::Status(
        theirs.status().code(),
        WithHint(master_table,
                 absl::StrCat("the source: ", theirs.status().message())));
  }
  result->bytes_from_source += theirs->bytes();
  const std::vector<pg::RowDifference> differences =
      pg::CompareScans(*ours, *theirs);
  return CopyDifferences(
      store, options, origin, table, table, differences,
      [&](absl::Span<const std::string> keys) {
        return ReadRows(master, *source, keys);
      },
      source_limit, cancelled, result);
}

}  // namespace

namespace {

// The node's own database: PostgreSQL (a libpq URL) or MariaDB.
absl::StatusOr<std::unique_ptr<pg::Connection>> OpenDatabase(
    const std::string& url, pg::Connection* /*type*/) {
  pg::ConnectOptions connect;
  connect.application_name = "tally source";
  return pg::Connection::Open(url, connect);
}
absl::StatusOr<std::unique_ptr<mariadb::Connection>> OpenDatabase(
    const std::string& url, mariadb::Connection* /*type*/) {
  TALLY_ASSIGN_OR_RETURN(mariadb::MariaDbTarget target,
                         mariadb::ParseMariaDbUrl(url));
  return mariadb::Connection::Open(target, absl::Seconds(60));
}

template <typename Replica>
absl::StatusOr<std::unique_ptr<Replica>> OpenReplica(
    const DatabaseSourceOptions& options) {
  absl::StatusOr<std::unique_ptr<Replica>> replica =
      OpenDatabase(options.replica_conninfo, static_cast<Replica*>(nullptr));
  if (!replica.ok()) {
    return absl::Status(
        replica.status().code(),
        absl::StrCat("this node's database: ", replica.status().message()));
  }
  return replica;
}

// The master, with what its user needs said on a refusal.
template <typename Master>
absl::StatusOr<std::unique_ptr<Master>> OpenMaster(
    const DatabaseSourceOptions& options) {
  absl::StatusOr<std::unique_ptr<Master>> c =
      OpenDatabase(options.source_conninfo, static_cast<Master*>(nullptr));
  if (c.ok()) return c;
  std::string hint;
  if (c.status().code() == absl::StatusCode::kPermissionDenied &&
      mariadb::IsMariaDbUrl(options.source_conninfo)) {
    absl::StatusOr<mariadb::MariaDbTarget> target =
        mariadb::ParseMariaDbUrl(options.source_conninfo);
    hint = absl::StrCat(
        " (the source's user needs SELECT on each kept table "
        "in ",
        target.ok() ? target->database : "its database", ")");
  }
  return absl::Status(c.status().code(),
                      absl::StrCat("the source: ", c.status().message(), hint));
}

// The tables of one session, in order. A table's failure is reported and
// the next table goes on; a connection the failure left broken (the master
// went away) is opened again for the next table, and when the master cannot
// be reached any more the remaining tables are reported failed with why.
template <typename Replica, typename Master>
absl::StatusOr<SourceSessionResult> SyncTables(
    const DatabaseSourceOptions& options, const std::atomic<bool>* cancelled,
    const std::function<absl::Status(Master&, Replica&, const std::string&,
                                     BandwidthLimiter*, SourceSessionResult*)>&
        sync_table) {
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<Master> master,
                         OpenMaster<Master>(options));
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<Replica> replica,
                         OpenReplica<Replica>(options));
  BandwidthLimiter source_limit(options.bandwidth_bytes_per_second);
  SourceSessionResult result;
  for (size_t t = 0; t < options.tables.size(); ++t) {
    const std::string& table = options.tables[t];
    if (cancelled->load()) return absl::CancelledError("stopped");
    absl::Status s =
        sync_table(*master, *replica, table, &source_limit, &result);
    if (s.code() == absl::StatusCode::kCancelled) return s;
    if (s.ok()) continue;
    result.table_errors.push_back(absl::StrCat(table, ": ", s.message()));
    if (!master->Exec("SELECT 1").ok()) {
      absl::StatusOr<std::unique_ptr<Master>> again =
          OpenMaster<Master>(options);
      if (!again.ok()) {
        for (size_t rest = t + 1; rest < options.tables.size(); ++rest) {
          result.table_errors.push_back(absl::StrCat(options.tables[rest], ": ",
                                                     again.status().message()));
        }
        return result;
      }
      master = *std::move(again);
    }
    if (!replica->Exec("SELECT 1").ok()) {
      absl::StatusOr<std::unique_ptr<Replica>> again =
          OpenReplica<Replica>(options);
      if (again.ok()) replica = *std::move(again);
    }
  }
  return result;
}

// A session between a node's database of type Replica and a master of
// type Master, both read whole.
template <typename Replica, typename Master>
absl::StatusOr<SourceSessionResult> ScanSession(
    storage::Store* store, const DatabaseSourceOptions& options,
    const std::string& origin, const std::atomic<bool>* cancelled) {
  // A MariaDB master's table is DB.TABLE, DB being its URL's database.
  std::string database;
  if (mariadb::IsMariaDbUrl(options.source_conninfo)) {
    TALLY_ASSIGN_OR_RETURN(mariadb::MariaDbTarget target,
                           mariadb::ParseMariaDbUrl(options.source_conninfo));
    database = target.database;
  }
  return SyncTables<Replica, Master>(
      options, cancelled,
      [&](Master& master, Replica& replica, const std::string& table,
          BandwidthLimiter* limit, SourceSessionResult* result) {
        const std::string master_table =
            database.empty() ? table : MariaDbTableOf(database, table);
        return SyncByScans(store, options, origin, replica, master, table,
                           master_table, limit, cancelled, result);
      });
}

}  // namespace

absl::StatusOr<SourceSessionResult> RunSourceSession(
    storage::Store* store, const DatabaseSourceOptions& options,
    const std::atomic<bool>* cancelled) {
  const std::string origin = ConninfoOrigin(options.source_conninfo);
  const bool mariadb_master = mariadb::IsMariaDbUrl(options.source_conninfo);
  if (mariadb::IsMariaDbUrl(options.replica_conninfo)) {
    return mariadb_master
               ? ScanSession<mariadb::Connection, mariadb::Connection>(
                     store, options, origin, cancelled)
               : ScanSession<mariadb::Connection, pg::Connection>(
                     store, options, origin, cancelled);
  }
  if (mariadb_master) {
    return ScanSession<pg::Connection, mariadb::Connection>(store, options,
                                                            origin, cancelled);
  }
  // Both PostgreSQL: block hashes computed by each database.
  return SyncTables<pg::Connection, pg::Connection>(
      options, cancelled,
      [&](pg::Connection& master, pg::Connection& replica,
          const std::string& table, BandwidthLimiter* limit,
          SourceSessionResult* result) {
        return SyncTable(store, options, origin, replica, master, table, limit,
                         cancelled, result);
      });
}

DatabaseSource::DatabaseSource(storage::Store* store,
                               DatabaseSourceOptions options)
    : store_(store),
      options_(std::move(options)),
      masked_url_(MaskConninfo(options_.source_conninfo)) {
  status_.set_source(masked_url_);
  status_.set_state("waiting");
}

DatabaseSource::~DatabaseSource() { Stop(); }

void DatabaseSource::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void DatabaseSource::Stop() {
  stopping_.store(true);
  {
    absl::MutexLock lock(&mu_);
    stop_requested_ = true;  // ends the wait
  }
  if (thread_.joinable()) thread_.join();
}

void DatabaseSource::FillStatus(v1::StatusResponse* response) {
  absl::MutexLock lock(&mu_);
  *response->mutable_database_source() = status_;
}

void DatabaseSource::Loop() {
  std::mt19937_64 random(std::random_device{}());
  std::uniform_real_distribution<double> jitter(0.8, 1.2);
  absl::Duration wait = absl::Milliseconds(500);
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stop_requested_), wait);
      if (stop_requested_) return;
      if (options_.sidecar_ready && !options_.sidecar_ready()) {
        status_.set_state("held");
        wait = absl::Milliseconds(500);
        continue;
      }
      status_.set_state("running");
    }
    const absl::Time start = absl::Now();
    absl::StatusOr<SourceSessionResult> result =
        RunSourceSession(store_, options_, &stopping_);
    const absl::Duration took = absl::Now() - start;
    if (!result.ok() &&
        result.status().code() == absl::StatusCode::kCancelled &&
        stopping_.load()) {
      return;
    }
    std::string error;
    if (!result.ok()) {
      error = std::string(result.status().message());
    } else if (!result->table_errors.empty()) {
      error = absl::StrJoin(result->table_errors, "; ");
    }
    {
      absl::MutexLock lock(&mu_);
      status_.set_state("waiting");
      status_.set_last_session_start_unix_ms(absl::ToUnixMillis(start));
      status_.set_last_session_seconds(absl::ToDoubleSeconds(took));
      status_.set_last_error(error);
      if (error.empty()) {
        status_.set_sessions_ok(status_.sessions_ok() + 1);
        status_.set_last_success_unix_ms(absl::ToUnixMillis(start));
      } else {
        status_.set_sessions_failed(status_.sessions_failed() + 1);
      }
      if (result.ok()) {
        status_.set_differences(status_.differences() + result->differences);
        status_.set_rows_copied(status_.rows_copied() + result->rows_copied);
        status_.set_rows_deleted(status_.rows_deleted() + result->rows_deleted);
        status_.set_rows_refused(status_.rows_refused() + result->rows_refused);
        status_.set_rows_rejected(status_.rows_rejected() +
                                  result->rows_rejected);
        status_.set_bytes_from_source(status_.bytes_from_source() +
                                      result->bytes_from_source);
        status_.set_last_bytes_from_source(result->bytes_from_source);
        status_.set_last_differences(result->differences);
      }
    }
    const std::string seconds =
        absl::StrFormat("%.3f", absl::ToDoubleSeconds(took));
    if (!error.empty()) {
      LogWarning(
          "source session failed",
          {{"source", masked_url_}, {"seconds", seconds}, {"error", error}});
    }
    if (result.ok()) {
      LogInfo("source session ended",
              {{"source", masked_url_},
               {"seconds", seconds},
               {"differences", result->differences},
               {"copied", result->rows_copied},
               {"deleted", result->rows_deleted},
               {"refused", result->rows_refused},
               {"bytes_from_source", result->bytes_from_source}});
    }
    wait = options_.interval * jitter(random);
  }
}

}  // namespace node
}  // namespace tally
