#include "mariadb/sidecar/mariadb_backend.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/memory/memory.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "mariadb/row_converter.h"
#include "mariadb/sidecar/apply_log.h"
#include "mariadb/sidecar/tally_tables.h"
#include "pg/schema/row_codec.h"
#include "pg/schema/schema_difference.h"
#include "pg/wire/field.h"
#include "tree/digest.h"
#include "tree/status_macros.h"

namespace tally {
namespace mariadb {
namespace {

using storage::RowChange;
using storage::RowOutcome;

// Rows per statement: keeps a statement well under max_allowed_packet and
// a refused row's bisection short.
constexpr size_t kRowsPerStatement = 1000;
// Bytes of row literals per statement, for the same reason with large rows.
constexpr size_t kBytesPerStatement = 4 << 20;
constexpr char kPayloadFormat = 1;

constexpr unsigned kDuplicateKey = 1062;
constexpr unsigned kLockWaitTimeout = 1205;
constexpr unsigned kDeadlock = 1213;
// MySQL's answer to a NOWAIT read that meets a lock (MariaDB answers 1205).
constexpr unsigned kLockNowait = 3572;

// The server's error number in a status made by StatusOfError ("... (error
// 1205)"), 0 when there is none.
unsigned ErrorNumber(const absl::Status& s) {
  absl::string_view m = s.message();
  const size_t at = m.rfind("(error ");
  if (at == absl::string_view::npos || !absl::EndsWith(m, ")")) return 0;
  m = m.substr(at + 7, m.size() - at - 8);
  unsigned n = 0;
  return absl::SimpleAtoi(m, &n) ? n : 0;
}

// A lock wait timeout or a deadlock: the server may have rolled the whole
// transaction back, so the apply does too and tries its rows again.
bool TransactionLost(const absl::Status& s) {
  const unsigned n = ErrorNumber(s);
  return n == kLockWaitTimeout || n == kDeadlock;
}

// The connection is gone: the call fails.
bool ConnectionLost(const absl::Status& s) { return absl::IsUnavailable(s); }

// Reads the rows `sql` selects (a kept table's select_list()) and hands
// each to `fn` as canonical key and value bytes, or as its key and the
// error of a value PostgreSQL cannot hold.
absl::Status StreamCanonical(
    Connection& conn, const MariaDbTable& table, const std::string& sql,
    const std::function<void(std::string key,
                             absl::StatusOr<std::string> value)>& fn) {
  const pg::RowCodec codec = table.schema().codec();
  const size_t key_columns = table.schema().key_columns();
  RowConverter rows = table.converter();
  // The key columns alone, to name a row whose other values do not convert.
  std::vector<ColumnMapping> key_mappings(
      table.mappings().begin(), table.mappings().begin() + key_columns);
  std::vector<std::string> key_names;
  std::vector<size_t> key_positions;
  for (size_t i = 0; i < key_columns; ++i) {
    key_names.push_back(table.schema().columns()[i].name);
    key_positions.push_back(i);
  }
  RowConverter keys(table.schema().name(), std::move(key_mappings),
                    std::move(key_names), std::move(key_positions));
  return conn.Stream(sql, [&](absl::Span<const Value> row) -> absl::Status {
    std::string key, value;
    absl::StatusOr<absl::Span<const pg::Field>> fields = rows.Convert(row);
    if (fields.ok()) {
      TALLY_RETURN_IF_ERROR(codec.Encode(*fields, &key, &value));
      fn(std::move(key), std::move(value));
      return absl::OkStatus();
    }
    // A key column always converts (it was written from a canonical key);
    // a row without its key cannot be named, so it reads as absent.
    absl::StatusOr<absl::Span<const pg::Field>> key_fields = keys.Convert(row);
    if (!key_fields.ok()) return absl::OkStatus();
    TALLY_RETURN_IF_ERROR(codec.EncodeKey(*key_fields, &key));
    fn(std::move(key), fields.status());
    return absl::OkStatus();
  });
}

// `bytes` as a _binary string literal: the binary log keeps the statement's
// text (ANNOTATE_ROWS), so a literal about as long as the bytes (a hex one
// is twice as long). The apply session's sql_mode keeps backslash escapes.
std::string BinaryLiteral(absl::string_view bytes) {
  std::string out = "_binary'";
  out.reserve(bytes.size() + bytes.size() / 16 + 10);
  for (char c : bytes) {
    switch (c) {
      case '\0':
        out += "\\0";
        break;
      case '\'':
        out += "\\'";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\x1a':
        out += "\\Z";
        break;
      default:
        out.push_back(c);
    }
  }
  out.push_back('\'');
  return out;
}

// `key` as the table's key columns and values, for messages: "(id=5)".
std::string KeyDisplay(const MariaDbTable& table, absl::string_view key) {
  absl::StatusOr<std::vector<std::optional<std::string>>> texts =
      table.KeyTexts(key);
  if (!texts.ok()) return absl::StrCat("'", absl::CHexEscape(key), "'");
  std::vector<std::string> parts;
  for (size_t i = 0; i < texts->size(); ++i) {
    parts.push_back(absl::StrCat(table.schema().columns()[i].name, "=",
                                 (*texts)[i].value_or("NULL")));
  }
  return absl::StrCat("(", absl::StrJoin(parts, ", "), ")");
}

}  // namespace

// One row of an ApplyRows call, staged before any transaction.
struct MariaDbBackend::Staged {
  size_t index = 0;  // in the call's rows and outcomes
  const Table* table = nullptr;
  std::string key;            // canonical key bytes
  std::string key_condition;  // "(`id` = 5)"
  std::string key_literal;    // "5" (tables with one key column)
  std::string values;         // "(5, 'a', ...)" (kPut only)
};

// The rows one transaction tries, and what it did with them.
struct MariaDbBackend::Attempt {
  absl::Span<const RowChange> changes;
  std::vector<Staged*> rows;
  // Out: rows to try again (busy, or their transaction rolled back).
  std::vector<Staged*> busy;
  // Out, after COMMIT: each decided row's outcome.
  std::vector<std::pair<Staged*, RowOutcome>> decided;
};

namespace {

// The WHERE condition that picks `rows`' keys.
template <typename Row>
std::string KeysCondition(const MariaDbTable& table,
                          absl::Span<Row* const> rows) {
  std::vector<absl::string_view> parts;
  parts.reserve(rows.size());
  if (table.schema().key_columns() == 1) {
    for (const Row* r : rows) parts.push_back(r->key_literal);
    return absl::StrCat(QuoteIdentifier(table.schema().columns()[0].name),
                        " IN (", absl::StrJoin(parts, ", "), ")");
  }
  for (const Row* r : rows) parts.push_back(r->key_condition);
  return absl::StrJoin(parts, " OR ");
}

// Splits `rows` into statements of at most kRowsPerStatement rows and about
// kBytesPerStatement bytes of `size`.
template <typename Row, typename SizeFn>
std::vector<absl::Span<Row* const>> Statements(absl::Span<Row* const> rows,
                                               SizeFn size) {
  std::vector<absl::Span<Row* const>> out;
  size_t begin = 0;
  size_t bytes = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i > begin && (i - begin >= kRowsPerStatement ||
                      bytes + size(*rows[i]) > kBytesPerStatement)) {
      out.push_back(rows.subspan(begin, i - begin));
      begin = i;
      bytes = 0;
    }
    bytes += size(*rows[i]);
  }
  if (begin < rows.size()) out.push_back(rows.subspan(begin));
  return out;
}

}  // namespace

std::string MariaDbBackend::PayloadOf(absl::string_view value) {
  // The row digest machinery with a fixed, empty version and keyspace:
  // a 128-bit hash of the value alone.
  static const tree::Version kNoVersion;
  std::string payload(1, kPayloadFormat);
  tree::RowDigest("", "", kNoVersion, false, value).AppendTo(&payload);
  return payload;
}

absl::StatusOr<std::unique_ptr<MariaDbBackend>> MariaDbBackend::Open(
    const MariaDbBackendOptions& options) {
  if (options.apply_server_id == 0) {
    return absl::InvalidArgumentError(
        "the MariaDB backend needs apply_server_id: the server_id that marks "
        "tally's own writes in the binary log (unique in the topology)");
  }
  if (options.node.empty()) {
    return absl::InvalidArgumentError(
        "the MariaDB backend needs the node's name (for its apply log)");
  }
  if (options.max_rows_per_transaction == 0) {
    return absl::InvalidArgumentError("max_rows_per_transaction is 0");
  }
  TALLY_ASSIGN_OR_RETURN(MariaDbTarget target, ParseMariaDbUrl(options.url));
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn,
                         Connection::Open(target, options.io_timeout));
  std::map<std::string, Table, std::less<>> tables;
  for (const std::string& name : options.tables) {
    TALLY_ASSIGN_OR_RETURN(MariaDbTable t, MariaDbTable::Read(*conn, name));
    tables.emplace(name, Table{name, std::move(t)});
  }
  auto backend = absl::WrapUnique(
      new MariaDbBackend(options, std::move(target), std::move(tables)));
  {
    absl::MutexLock lock(&backend->apply_mu_);
    backend->apply_ = std::move(conn);
    TALLY_RETURN_IF_ERROR(backend->EnsureApplyConnection());
    Connection& c = *backend->apply_;
    const std::string log_table = absl::StrCat(
        QuoteIdentifier(kApplyLogSchema), ".", QuoteIdentifier(kApplyLogTable));
    TALLY_RETURN_IF_ERROR(EnsureTallyTable(
        c, kApplyLogTable,
        "node varchar(255) COLLATE utf8mb4_bin PRIMARY KEY, sequence bigint "
        "unsigned NOT NULL, applied longblob NOT NULL",
        "tally's apply log"));
    TALLY_ASSIGN_OR_RETURN(
        TextRows last,
        c.Query(absl::StrCat("SELECT sequence FROM ", log_table,
                             " WHERE node = ", c.Quote(options.node))));
    if (!last.empty() && last[0][0].has_value()) {
      (void)absl::SimpleAtoi(*last[0][0], &backend->sequence_);
    }
  }
  {
    absl::MutexLock lock(&backend->read_mu_);
    TALLY_ASSIGN_OR_RETURN(
        backend->reader_,
        Connection::Open(backend->target_, options.io_timeout));
  }
  return backend;
}

MariaDbBackend::MariaDbBackend(MariaDbBackendOptions options,
                               MariaDbTarget target,
                               std::map<std::string, Table, std::less<>> tables)
    : options_(std::move(options)),
      target_(std::move(target)),
      tables_(std::move(tables)) {}

MariaDbBackend::~MariaDbBackend() = default;

absl::Status MariaDbBackend::EnsureApplyConnection() {
  if (apply_ == nullptr) {
    TALLY_ASSIGN_OR_RETURN(apply_,
                           Connection::Open(target_, options_.io_timeout));
  }
  Connection& c = *apply_;
  absl::Status s = c.Exec(
      absl::StrCat("SET SESSION server_id = ", options_.apply_server_id));
  if (absl::IsPermissionDenied(s)) {
    apply_.reset();
    return absl::PermissionDeniedError(absl::StrCat(
        "the MariaDB user of ", target_.display,
        " may not set the session server_id that marks tally's writes in "
        "the binary log: it needs the BINLOG REPLAY privilege (GRANT BINLOG "
        "REPLAY ON *.* TO ...; SUPER also does): ",
        s.message()));
  }
  const int64_t lock_seconds = std::max<int64_t>(
      1, static_cast<int64_t>(
             std::ceil(absl::ToDoubleSeconds(options_.lock_wait_timeout))));
  for (const std::string& sql : {
           std::string("SET SESSION TRANSACTION ISOLATION LEVEL READ "
                       "COMMITTED"),
           absl::StrCat("SET SESSION innodb_lock_wait_timeout = ",
                        lock_seconds),
           absl::StrCat("SET SESSION lock_wait_timeout = ", lock_seconds),
           std::string("SET SESSION sql_mode = 'STRICT_ALL_TABLES,"
                       "NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION,"
                       "ERROR_FOR_DIVISION_BY_ZERO'"),
           std::string("SET SESSION foreign_key_checks = 0"),
           std::string("SET SESSION autocommit = 1"),
       }) {
    if (!s.ok()) break;
    s = c.Exec(sql);
  }
  if (!s.ok()) {
    apply_.reset();
    return absl::Status(s.code(),
                        absl::StrCat("setting up the apply session "
                                     "on ",
                                     target_.display, ": ", s.message()));
  }
  return absl::OkStatus();
}

const MariaDbBackend::Table* MariaDbBackend::FindTable(
    absl::string_view keyspace) const {
  auto it = tables_.find(keyspace);
  return it == tables_.end() ? nullptr : &it->second;
}

absl::Status MariaDbBackend::ApplyRows(absl::Span<const RowChange> rows,
                                       std::vector<RowOutcome>* outcomes) {
  outcomes->assign(rows.size(), RowOutcome{});
  if (rows.empty()) return absl::OkStatus();
  absl::MutexLock lock(&apply_mu_);
  if (apply_ == nullptr) TALLY_RETURN_IF_ERROR(EnsureApplyConnection());
  Connection& conn = *apply_;

  // Stage: every row's literals, before any transaction, so that a row
  // MariaDB cannot take is refused alone.
  std::vector<Staged> staged(rows.size());
  std::vector<Staged*> pending;
  std::string storage;
  std::vector<pg::Field> fields;
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowChange& change = rows[i];
    Staged& s = staged[i];
    s.index = i;
    s.table = FindTable(change.row.keyspace);
    auto refuse = [&](const absl::Status& why) {
      (*outcomes)[i].rejected = absl::Status(
          why.code(), absl::StrCat("MariaDB table ", change.row.keyspace, ": ",
                                   why.message()));
    };
    if (s.table == nullptr) {
      refuse(absl::NotFoundError("not a table this node keeps in MariaDB"));
      continue;
    }
    const MariaDbTable& t = s.table->table;
    s.key = std::string(change.row.key);
    absl::StatusOr<std::string> condition = t.KeyCondition(conn, s.key);
    if (!condition.ok()) {
      refuse(condition.status());
      continue;
    }
    s.key_condition = *std::move(condition);
    absl::Status ok = t.schema().codec().DecodeKey(s.key, &storage, &fields);
    if (ok.ok() && t.schema().key_columns() == 1) {
      absl::StatusOr<std::string> literal = t.Literal(conn, 0, fields[0]);
      if (literal.ok()) s.key_literal = *std::move(literal);
      ok = literal.status();
    }
    if (ok.ok() && change.kind == RowChange::Kind::kPut) {
      ok = t.schema().codec().Decode(s.key, change.value, &storage, &fields);
      std::vector<std::string> literals;
      for (size_t c = 0; ok.ok() && c < fields.size(); ++c) {
        absl::StatusOr<std::string> l = t.Literal(conn, c, fields[c]);
        if (l.ok()) literals.push_back(*std::move(l));
        ok = l.status();
      }
      if (ok.ok())
        s.values = absl::StrCat("(", absl::StrJoin(literals, ", "), ")");
    }
    if (!ok.ok()) {
      refuse(absl::Status(ok.code(), absl::StrCat("key ", KeyDisplay(t, s.key),
                                                  ": ", ok.message())));
      continue;
    }
    pending.push_back(&s);
  }
  // Tables in name order, keys in byte order: the apply's own transactions
  // lock in one order.
  std::sort(pending.begin(), pending.end(),
            [](const Staged* a, const Staged* b) {
              if (a->table != b->table)
                return a->table->keyspace < b->table->keyspace;
              return a->key < b->key;
            });

  const absl::Time deadline = absl::Now() + options_.busy_retry_for;
  size_t per_transaction = options_.max_rows_per_transaction;
  absl::Duration pause = absl::Milliseconds(10);
  for (bool first = true; !pending.empty(); first = false) {
    if (!first) {
      const absl::Time now = absl::Now();
      if (now >= deadline) break;
      absl::SleepFor(std::min(pause, deadline - now));
      pause = std::min(pause * 2, absl::Milliseconds(200));
      per_transaction = std::max<size_t>(1, per_transaction / 2);
    }
    std::vector<Staged*> busy;
    for (size_t at = 0; at < pending.size(); at += per_transaction) {
      Attempt attempt;
      attempt.changes = rows;
      attempt.rows.assign(
          pending.begin() + at,
          pending.begin() + std::min(pending.size(), at + per_transaction));
      absl::Status s = RunTransaction(attempt);
      if (!s.ok()) {
        if (ConnectionLost(s)) apply_.reset();
        return s;
      }
      for (auto& [row, outcome] : attempt.decided) {
        (*outcomes)[row->index] = std::move(outcome);
      }
      busy.insert(busy.end(), attempt.busy.begin(), attempt.busy.end());
    }
    pending = std::move(busy);
  }
  // Rows still busy stay not applied: the application's write wins.
  return absl::OkStatus();
}

absl::Status MariaDbBackend::RunTransaction(Attempt& attempt) {
  Connection& conn = *apply_;
  TALLY_RETURN_IF_ERROR(conn.Exec("START TRANSACTION"));
  auto fail = [&](absl::Status s) {
    if (!ConnectionLost(s)) conn.Exec("ROLLBACK").IgnoreError();
    return s;
  };
  // The transaction was rolled back by the server (or must be): every row
  // is tried again.
  auto retry_all = [&]() {
    conn.Exec("ROLLBACK").IgnoreError();
    attempt.decided.clear();
    attempt.busy = attempt.rows;
    return absl::OkStatus();
  };
  auto decide = [&](Staged* row, bool applied, absl::Status rejected) {
    RowOutcome o;
    o.applied = applied;
    o.rejected = std::move(rejected);
    if (applied && attempt.changes[row->index].kind == RowChange::Kind::kPut) {
      o.payload = PayloadOf(attempt.changes[row->index].value);
    }
    attempt.decided.emplace_back(row, std::move(o));
  };

  const absl::Span<Staged* const> all(attempt.rows);
  for (size_t begin = 0; begin < all.size();) {
    const Table* table = all[begin]->table;
    size_t end = begin;
    while (end < all.size() && all[end]->table == table) ++end;
    const absl::Span<Staged* const> group = all.subspan(begin, end - begin);
    begin = end;
    const MariaDbTable& t = table->table;

    // What the table holds at each key: locked, busy or absent.
    absl::Status table_refused;
    absl::flat_hash_map<std::string, absl::StatusOr<std::string>> locked;
    for (absl::Span<Staged* const> part : Statements(
             group, [](const Staged& s) { return s.key_condition.size(); })) {
      absl::Status s = StreamCanonical(
          conn, t,
          absl::StrCat("SELECT ", t.select_list(), " FROM ", t.quoted_name(),
                       " WHERE ", KeysCondition(t, part),
                       " FOR UPDATE SKIP LOCKED"),
          [&](std::string key, absl::StatusOr<std::string> value) {
            locked.emplace(std::move(key), std::move(value));
          });
      if (TransactionLost(s)) return retry_all();
      if (ConnectionLost(s)) return fail(s);
      if (!s.ok()) {
        table_refused = s;
        break;
      }
    }
    if (!table_refused.ok()) {
      // The table itself is refused (gone, no privilege): its rows alone.
      for (Staged* row : group) {
        decide(row, false,
               absl::Status(table_refused.code(),
                            absl::StrCat("MariaDB table ", table->keyspace,
                                         ": ", table_refused.message())));
      }
      continue;
    }
    std::vector<Staged*> unseen;
    for (Staged* row : group) {
      if (!locked.contains(row->key)) unseen.push_back(row);
    }
    absl::flat_hash_map<std::string, bool> present;
    for (absl::Span<Staged* const> part :
         Statements(absl::Span<Staged* const>(unseen),
                    [](const Staged& s) { return s.key_condition.size(); })) {
      // A plain read: the last committed row, without waiting. A row it
      // sees that the locking read skipped is held by an application.
      absl::Status s = StreamCanonical(
          conn, t,
          absl::StrCat("SELECT ", t.select_list(), " FROM ", t.quoted_name(),
                       " WHERE ", KeysCondition(t, part)),
          [&](std::string key, absl::StatusOr<std::string>) {
            present.emplace(std::move(key), true);
          });
      if (TransactionLost(s)) return retry_all();
      if (!s.ok()) return fail(s);
    }

    std::vector<Staged*> updates, deletes, inserts;
    for (Staged* row : group) {
      const RowChange& change = attempt.changes[row->index];
      const storage::IndexedRow& expected = change.expected;
      const bool live = expected.exists && !expected.deleted;
      auto it = locked.find(row->key);
      if (it == locked.end()) {
        if (present.contains(row->key)) {
          attempt.busy.push_back(row);
        } else if (live) {
          decide(row, false, absl::OkStatus());  // deleted meanwhile
        } else if (change.kind == RowChange::Kind::kPut) {
          inserts.push_back(row);
        } else {
          decide(row, true, absl::OkStatus());  // already absent
        }
        continue;
      }
      if (!it->second.ok()) {
        decide(row, false,
               absl::Status(it->second.status().code(),
                            absl::StrCat("MariaDB table ", table->keyspace,
                                         " key ", KeyDisplay(t, row->key), ": ",
                                         it->second.status().message())));
        continue;
      }
      const bool matches =
          live && expected.version != nullptr &&
          tree::RowDigest(table->keyspace, row->key, *expected.version, false,
                          *it->second) == expected.digest;
      if (!matches) {
        decide(row, false, absl::OkStatus());  // the application's write wins
      } else if (change.kind == RowChange::Kind::kPut) {
        updates.push_back(row);
      } else {
        deletes.push_back(row);
      }
    }

    std::vector<std::string> assignments;
    for (size_t i = t.schema().key_columns(); i < t.schema().columns().size();
         ++i) {
      const std::string q = QuoteIdentifier(t.schema().columns()[i].name);
      assignments.push_back(absl::StrCat(q, " = VALUES(", q, ")"));
    }
    if (assignments.empty()) {
      // Key columns only: nothing to update; the first key column set to
      // itself keeps the statement valid.
      const std::string q = QuoteIdentifier(t.schema().columns()[0].name);
      assignments.push_back(absl::StrCat(q, " = ", q));
    }
    const std::string upsert_tail = absl::StrCat(
        " ON DUPLICATE KEY UPDATE ", absl::StrJoin(assignments, ", "));
    enum class Kind { kUpdate, kDelete, kInsert };
    auto sql_of = [&](Kind kind, absl::Span<Staged* const> part) {
      if (kind == Kind::kDelete) {
        return absl::StrCat("DELETE FROM ", t.quoted_name(), " WHERE ",
                            KeysCondition(t, part));
      }
      std::vector<absl::string_view> values;
      for (const Staged* r : part) values.push_back(r->values);
      return absl::StrCat("INSERT INTO ", t.quoted_name(), " (",
                          t.select_list(), ") VALUES ",
                          absl::StrJoin(values, ", "),
                          kind == Kind::kUpdate ? upsert_tail : "");
    };
    // Writes `part`; a statement the server refuses changed nothing, so it
    // is split until each refused row is alone.
    std::function<absl::Status(Kind, absl::Span<Staged* const>)> write =
        [&](Kind kind, absl::Span<Staged* const> part) -> absl::Status {
      if (part.empty()) return absl::OkStatus();
      absl::Status s = conn.Exec(sql_of(kind, part));
      if (s.ok()) {
        for (Staged* r : part) decide(r, true, absl::OkStatus());
        return absl::OkStatus();
      }
      if (ErrorNumber(s) == kLockWaitTimeout) {
        // The server rolls back only the statement unless
        // innodb_rollback_on_timeout is on: while the transaction lives,
        // the statement's rows alone are busy and the others apply.
        absl::StatusOr<TextRows> open = conn.Query("SELECT @@in_transaction");
        if (!open.ok()) return open.status();
        if (!open->empty() && (*open)[0][0].value_or("0") == "1") {
          attempt.busy.insert(attempt.busy.end(), part.begin(), part.end());
          return absl::OkStatus();
        }
        return s;
      }
      if (ConnectionLost(s) || TransactionLost(s)) return s;
      if (part.size() == 1) {
        if (kind == Kind::kInsert && ErrorNumber(s) == kDuplicateKey &&
            absl::StrContains(s.message(), "'PRIMARY'")) {
          // An application inserted the key meanwhile: its row stays.
          decide(part[0], false, absl::OkStatus());
        } else {
          decide(part[0], false,
                 absl::Status(s.code(),
                              absl::StrCat("MariaDB table ", table->keyspace,
                                           " key ", KeyDisplay(t, part[0]->key),
                                           ": ", s.message())));
        }
        return absl::OkStatus();
      }
      const size_t half = part.size() / 2;
      TALLY_RETURN_IF_ERROR(write(kind, part.subspan(0, half)));
      return write(kind, part.subspan(half));
    };
    // An application's uncommitted INSERT of a key is invisible to both
    // reads above. Probe the keys to insert with NOWAIT (it fails at once
    // on such a row) so that the apply's INSERT does not wait on it while
    // holding the locks it took: an application waiting for those could
    // then deadlock with the apply and, lighter, be the one rolled back.
    std::vector<Staged*> probed;
    std::function<absl::Status(absl::Span<Staged* const>)> probe =
        [&](absl::Span<Staged* const> part) -> absl::Status {
      if (part.empty()) return absl::OkStatus();
      absl::flat_hash_map<std::string, bool> appeared;
      absl::Status s = StreamCanonical(
          conn, t,
          absl::StrCat("SELECT ", t.select_list(), " FROM ", t.quoted_name(),
                       " WHERE ", KeysCondition(t, part), " FOR UPDATE NOWAIT"),
          [&](std::string key, absl::StatusOr<std::string>) {
            appeared.emplace(std::move(key), true);
          });
      if (s.ok()) {
        for (Staged* r : part) {
          // A row committed since the reads above: tried again.
          (appeared.contains(r->key) ? attempt.busy : probed).push_back(r);
        }
        return absl::OkStatus();
      }
      const unsigned n = ErrorNumber(s);
      if (n != kLockWaitTimeout && n != kLockNowait) return s;
      absl::StatusOr<TextRows> open = conn.Query("SELECT @@in_transaction");
      if (!open.ok()) return open.status();
      if (open->empty() || (*open)[0][0].value_or("0") != "1") return s;
      if (part.size() == 1) {
        attempt.busy.push_back(part[0]);
        return absl::OkStatus();
      }
      const size_t half = part.size() / 2;
      TALLY_RETURN_IF_ERROR(probe(part.subspan(0, half)));
      return probe(part.subspan(half));
    };
    for (absl::Span<Staged* const> part :
         Statements(absl::Span<Staged* const>(inserts),
                    [](const Staged& s) { return s.key_condition.size(); })) {
      absl::Status s = probe(part);
      if (TransactionLost(s) || ErrorNumber(s) == kLockNowait) {
        return retry_all();
      }
      if (!s.ok()) return fail(s);
    }
    inserts = std::move(probed);

    for (const auto& step :
         {std::pair<Kind, std::vector<Staged*>*>{Kind::kUpdate, &updates},
          {Kind::kDelete, &deletes},
          {Kind::kInsert, &inserts}}) {
      const Kind kind = step.first;
      const std::vector<Staged*>* list = step.second;
      for (absl::Span<Staged* const> part :
           Statements(absl::Span<Staged* const>(*list), [&](const Staged& s) {
             return kind == Kind::kDelete ? s.key_condition.size()
                                          : s.values.size();
           })) {
        absl::Status s = write(kind, part);
        if (TransactionLost(s)) return retry_all();
        if (!s.ok()) return fail(s);
      }
    }
  }

  // The apply log: the rows applied and their versions, in the same
  // transaction.
  ApplyLog log;
  log.sequence = sequence_ + 1;
  for (const auto& [row, outcome] : attempt.decided) {
    if (!outcome.applied) continue;
    const RowChange& change = attempt.changes[row->index];
    AppliedRow& a = log.rows.emplace_back();
    a.keyspace = row->table->keyspace;
    a.key = row->key;
    a.version = *change.version;
    a.erased = change.kind == RowChange::Kind::kErase;
    a.deleted = change.kind != RowChange::Kind::kPut;
  }
  if (!log.rows.empty()) {
    const std::string bytes = EncodeApplyLog(log);
    const std::string literal = BinaryLiteral(bytes);
    absl::Status s = conn.Exec(absl::StrCat(
        "INSERT INTO ", QuoteIdentifier(kApplyLogSchema), ".",
        QuoteIdentifier(kApplyLogTable), " (node, sequence, applied) VALUES (",
        conn.Quote(options_.node), ", ", log.sequence, ", ", literal,
        ") ON DUPLICATE KEY UPDATE sequence = VALUES(sequence), applied = "
        "VALUES(applied)"));
    if (TransactionLost(s)) return retry_all();
    if (!s.ok()) {
      return fail(absl::Status(
          s.code(), absl::StrCat("writing tally's apply log in ",
                                 conn.display(), ": ", s.message())));
    }
  }
  pg::ReachFaultPoint(options_.fault_points,
                      pg::FaultPoint::kApplyBeforeDbCommit);
  absl::Status committed = conn.Exec("COMMIT");
  if (!committed.ok()) {
    return absl::Status(
        committed.code(),
        absl::StrCat("COMMIT of an apply transaction in ", conn.display(), ": ",
                     committed.message()));
  }
  pg::ReachFaultPoint(options_.fault_points,
                      pg::FaultPoint::kApplyAfterDbCommit);
  if (!log.rows.empty()) sequence_ = log.sequence;
  return absl::OkStatus();
}

absl::StatusOr<std::string> MariaDbBackend::ReadValue(
    const storage::RowLocation& row, absl::string_view stored_payload) const {
  TALLY_ASSIGN_OR_RETURN(std::vector<absl::StatusOr<std::string>> values,
                         ReadValues(absl::MakeConstSpan(&row, 1),
                                    absl::MakeConstSpan(&stored_payload, 1)));
  return std::move(values[0]);
}

absl::StatusOr<std::vector<absl::StatusOr<std::string>>>
MariaDbBackend::ReadValues(
    absl::Span<const storage::RowLocation> rows,
    absl::Span<const absl::string_view> stored_payloads) const {
  std::vector<absl::StatusOr<std::string>> out(
      rows.size(), absl::UnavailableError("no row yet"));
  struct Wanted {
    size_t index;
    std::string key_condition;
    std::string key_literal;
  };
  std::map<const Table*, std::vector<Wanted>> by_table;
  absl::MutexLock lock(&read_mu_);
  if (reader_ == nullptr) {
    TALLY_ASSIGN_OR_RETURN(reader_,
                           Connection::Open(target_, options_.io_timeout));
  }
  Connection& conn = *reader_;
  std::string storage;
  std::vector<pg::Field> fields;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Table* table = FindTable(rows[i].keyspace);
    if (table == nullptr) {
      out[i] = absl::NotFoundError(absl::StrCat(
          "MariaDB table ", rows[i].keyspace, " is not kept by this node"));
      continue;
    }
    if (stored_payloads[i].empty()) {
      // A tombstone: no row describes it; its value is empty.
      out[i] = std::string();
      continue;
    }
    if (stored_payloads[i].size() != kPayloadSize ||
        stored_payloads[i][0] != kPayloadFormat) {
      out[i] = absl::DataLossError(
          absl::StrCat("not a MariaDB backend payload (a row value digest): ",
                       absl::CHexEscape(stored_payloads[i])));
      continue;
    }
    Wanted w{i, "", ""};
    absl::StatusOr<std::string> c =
        table->table.KeyCondition(conn, rows[i].key);
    absl::Status ok = c.status();
    if (ok.ok()) {
      w.key_condition = *std::move(c);
      if (table->table.schema().key_columns() == 1) {
        ok = table->table.schema().codec().DecodeKey(rows[i].key, &storage,
                                                     &fields);
        absl::StatusOr<std::string> l =
            ok.ok() ? table->table.Literal(conn, 0, fields[0])
                    : absl::StatusOr<std::string>(ok);
        if (l.ok()) w.key_literal = *std::move(l);
        ok = l.status();
      }
    }
    if (!ok.ok()) {
      out[i] = absl::DataLossError(absl::StrCat(
          "not a key of MariaDB table ", rows[i].keyspace, ": ", ok.message()));
      continue;
    }
    by_table[table].push_back(std::move(w));
  }
  for (auto& [table, wanted] : by_table) {
    const MariaDbTable& t = table->table;
    std::vector<Wanted*> ptrs;
    for (Wanted& w : wanted) ptrs.push_back(&w);
    absl::flat_hash_map<std::string, absl::StatusOr<std::string>> found;
    for (absl::Span<Wanted* const> part :
         Statements(absl::Span<Wanted* const>(ptrs),
                    [](const Wanted& w) { return w.key_condition.size(); })) {
      absl::Status s = StreamCanonical(
          conn, t,
          absl::StrCat("SELECT ", t.select_list(), " FROM ", t.quoted_name(),
                       " WHERE ", KeysCondition(t, part)),
          [&](std::string key, absl::StatusOr<std::string> value) {
            found.emplace(std::move(key), std::move(value));
          });
      if (!s.ok()) {
        if (ConnectionLost(s)) reader_.reset();
        return absl::Status(
            s.code(), absl::StrCat("reading MariaDB table ", table->keyspace,
                                   ": ", s.message()));
      }
    }
    for (const Wanted& w : wanted) {
      auto it = found.find(rows[w.index].key);
      if (it == found.end()) {
        out[w.index] = absl::UnavailableError(absl::StrCat(
            "MariaDB table ", table->keyspace,
            " holds no row at this key (a delete not indexed yet)"));
      } else if (!it->second.ok()) {
        out[w.index] = it->second.status();
      } else if (PayloadOf(*it->second) != stored_payloads[w.index]) {
        out[w.index] = absl::AbortedError(
            absl::StrCat("MariaDB table ", table->keyspace,
                         " holds another value at this key (changed since)"));
      } else {
        out[w.index] = std::move(it->second);
      }
    }
  }
  return out;
}

absl::StatusOr<std::string> MariaDbBackend::SchemaFingerprint(
    absl::string_view keyspace) const {
  const Table* t = FindTable(keyspace);
  if (t == nullptr) return absl::StrCat(pg::kFingerprintPrefix, "not-kept");
  return t->table.schema().fingerprint();
}

std::string MariaDbBackend::SchemaDescription(
    absl::string_view keyspace) const {
  const Table* t = FindTable(keyspace);
  return t == nullptr ? "" : t->table.schema().description();
}

}  // namespace mariadb
}  // namespace tally
