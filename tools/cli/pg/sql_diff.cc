#include "tools/cli/pg/sql_diff.h"

#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "mariadb/connection.h"
#include "mariadb/table.h"
#include "mariadb/url.h"
#include "pg/schema/schema_difference.h"
#include "pg/table_diff/table_diff.h"
#include "pg/wire/connection.h"
#include "tools/cli/args.h"
#include "tools/cli/format.h"
#include "tools/cli/pg/diff_output.h"
#include "tools/cli/pg_url.h"
#include "tree/status_macros.h"

namespace tally {
namespace cli {
namespace {

// One side's table, whichever engine holds it.
class SideTable {
 public:
  virtual ~SideTable() = default;
  virtual const pg::TableSchema& schema() const = 0;
  virtual uint64_t estimated_rows() const = 0;
  virtual absl::StatusOr<pg::TableScan> Scan(absl::string_view keyspace,
                                             absl::string_view where,
                                             pg::ScanCounters* counters) = 0;
  virtual absl::StatusOr<std::vector<pg::CanonicalRow>> ReadRows(
      absl::Span<const std::string> keys) = 0;
  virtual absl::StatusOr<pg::RepairCounts> WriteRows(
      absl::Span<const std::string> keys,
      absl::Span<const pg::CanonicalRow> rows) = 0;
};

class PgTable : public SideTable {
 public:
  PgTable(pg::Connection* conn, pg::TableSchema schema)
      : conn_(conn), schema_(std::move(schema)) {}
  const pg::TableSchema& schema() const override { return schema_; }
  uint64_t estimated_rows() const override {
    return pg::EstimatedRows(*conn_, schema_);
  }
  absl::StatusOr<pg::TableScan> Scan(absl::string_view keyspace,
                                     absl::string_view where,
                                     pg::ScanCounters* counters) override {
    return pg::TableScan::Run(*conn_, schema_, keyspace, where, counters);
  }
  absl::StatusOr<std::vector<pg::CanonicalRow>> ReadRows(
      absl::Span<const std::string> keys) override {
    return pg::ReadRowsByKey(*conn_, schema_, keys);
  }
  absl::StatusOr<pg::RepairCounts> WriteRows(
      absl::Span<const std::string> keys,
      absl::Span<const pg::CanonicalRow> rows) override {
    return pg::WriteRows(*conn_, schema_, keys, rows);
  }

 private:
  pg::Connection* conn_;
  pg::TableSchema schema_;
};

class MariaTable : public SideTable {
 public:
  MariaTable(mariadb::Connection* conn, mariadb::MariaDbTable table)
      : conn_(conn), table_(std::move(table)) {}
  const pg::TableSchema& schema() const override { return table_.schema(); }
  uint64_t estimated_rows() const override { return table_.estimated_rows(); }
  absl::StatusOr<pg::TableScan> Scan(absl::string_view keyspace,
                                     absl::string_view where,
                                     pg::ScanCounters* counters) override {
    return table_.Scan(*conn_, keyspace, where, counters);
  }
  absl::StatusOr<std::vector<pg::CanonicalRow>> ReadRows(
      absl::Span<const std::string> keys) override {
    return table_.ReadRowsByKey(*conn_, keys);
  }
  absl::StatusOr<pg::RepairCounts> WriteRows(
      absl::Span<const std::string> keys,
      absl::Span<const pg::CanonicalRow> rows) override {
    TALLY_ASSIGN_OR_RETURN(mariadb::MariaDbTable::WriteCounts c,
                           table_.WriteRows(*conn_, keys, rows));
    return pg::RepairCounts{c.upserted, c.deleted};
  }
  const mariadb::MariaDbTable& table() const { return table_; }

 private:
  mariadb::Connection* conn_;
  mariadb::MariaDbTable table_;
};

// One side: a database of either engine.
struct Database {
  std::string label;  // "a" or "b"
  std::string display;
  std::vector<std::string> tables;  // table= of its URL
  std::string mariadb_database;     // a MariaDB URL's database
  std::unique_ptr<pg::Connection> pg;
  std::unique_ptr<mariadb::Connection> maria;
};

absl::Status WithSide(const absl::Status& s, const Database& db) {
  if (s.ok()) return s;
  return absl::Status(
      s.code(), absl::StrCat(db.label, " (", db.display, "): ", s.message()));
}

absl::Status Open(const PgDiffOptions& options, const std::string& url,
                  Database* db) {
  if (mariadb::IsMariaDbUrl(url)) {
    TALLY_ASSIGN_OR_RETURN(mariadb::MariaDbTarget t,
                           mariadb::ParseMariaDbUrl(url));
    db->display = t.display;
    db->tables = t.tables;
    db->mariadb_database = t.database;
    absl::StatusOr<std::unique_ptr<mariadb::Connection>> c =
        mariadb::Connection::Open(t, options.timeout);
    if (!c.ok()) return WithSide(c.status(), *db);
    db->maria = *std::move(c);
    return absl::OkStatus();
  }
  TALLY_ASSIGN_OR_RETURN(PostgresTarget t, ParsePostgresUrl(url));
  db->display = t.display;
  db->tables = t.tables;
  pg::ConnectOptions connect;
  connect.connect_timeout = std::min(options.timeout, absl::Seconds(30));
  connect.query_timeout = options.timeout;
  connect.application_name = "tally diff";
  absl::StatusOr<std::unique_ptr<pg::Connection>> c =
      pg::Connection::Open(t.conninfo, connect);
  if (!c.ok()) return WithSide(c.status(), *db);
  db->pg = *std::move(c);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SideTable>> OpenTable(Database& db,
                                                     const std::string& name) {
  if (db.maria != nullptr) {
    absl::StatusOr<mariadb::MariaDbTable> t =
        mariadb::MariaDbTable::Read(*db.maria, name);
    if (!t.ok()) return WithSide(t.status(), db);
    return std::make_unique<MariaTable>(db.maria.get(), *std::move(t));
  }
  absl::StatusOr<pg::TableSchema> s = pg::TableSchema::Read(*db.pg, name);
  if (!s.ok()) return WithSide(s.status(), db);
  return std::make_unique<PgTable>(db.pg.get(), *std::move(s));
}

// Every table with a primary key in a MariaDB URL's database.
absl::StatusOr<std::vector<std::string>> ListMariaTables(Database& db) {
  if (db.mariadb_database.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        db.label, ": name the tables (table=db.t) or a database in the URL"));
  }
  absl::StatusOr<mariadb::TextRows> rows = db.maria->Query(absl::StrCat(
      "SELECT CONCAT(TABLE_SCHEMA, '.', TABLE_NAME) FROM "
      "information_schema.TABLE_CONSTRAINTS WHERE CONSTRAINT_TYPE = "
      "'PRIMARY KEY' AND TABLE_SCHEMA = ",
      db.maria->Quote(db.mariadb_database), " ORDER BY 1"));
  if (!rows.ok()) return WithSide(rows.status(), db);
  std::vector<std::string> tables;
  for (const mariadb::TextRow& r : *rows) tables.push_back(r[0].value_or(""));
  return tables;
}

absl::StatusOr<std::vector<TablePair>> ChooseTables(
    const PgDiffOptions& options, Database& a, Database& b) {
  return PairTables(
      options.tables, a.tables, b.tables,
      [&]() -> absl::StatusOr<std::vector<TablePair>> {
        if (a.maria == nullptr || b.maria == nullptr) {
          return absl::InvalidArgumentError(
              "a PostgreSQL table and a MariaDB table have different names "
              "(schema.table, database.table): name each side's table with "
              "table= in its URL");
        }
        TALLY_ASSIGN_OR_RETURN(std::vector<std::string> in_a,
                               ListMariaTables(a));
        TALLY_ASSIGN_OR_RETURN(std::vector<std::string> in_b,
                               ListMariaTables(b));
        if (in_a != in_b) {
          return absl::FailedPreconditionError(absl::StrCat(
              "the databases hold different tables with a primary key (a: ",
              absl::StrJoin(in_a, ", "), "; b: ", absl::StrJoin(in_b, ", "),
              "); name the tables to compare"));
        }
        if (in_a.empty()) {
          return absl::NotFoundError(
              "neither database has a table with a primary key; name the "
              "tables with table= or --table");
        }
        std::vector<TablePair> pairs;
        for (const std::string& t : in_a) pairs.emplace_back(t, t);
        return pairs;
      });
}

// A key as text: one column's text, or a row "(1,eu)" quoted as
// PostgreSQL's record output quotes it.
std::string KeyText(const std::vector<std::optional<std::string>>& columns) {
  if (columns.size() == 1) return columns[0].value_or("NULL");
  std::vector<std::string> parts;
  for (const std::optional<std::string>& c : columns) {
    if (!c.has_value()) {
      parts.emplace_back();
      continue;
    }
    const bool quote =
        c->empty() || c->find_first_of(",()\"\\ \t\n") != std::string::npos;
    if (!quote) {
      parts.push_back(*c);
      continue;
    }
    std::string q = "\"";
    for (char ch : *c) {
      if (ch == '"' || ch == '\\') q.push_back(ch);
      q.push_back(ch);
    }
    q.push_back('"');
    parts.push_back(std::move(q));
  }
  return absl::StrCat("(", absl::StrJoin(parts, ","), ")");
}

// Scans both tables at once, one thread each, ticking the progress.
absl::Status ScanBoth(const PgDiffOptions& options, const std::string& table,
                      const std::string& keyspace, SideTable& ta, SideTable& tb,
                      std::optional<pg::TableScan>* sa,
                      std::optional<pg::TableScan>* sb) {
  pg::ScanCounters ca;
  pg::ScanCounters cb;
  absl::Status status_a;
  absl::Status status_b;
  absl::Mutex mu;
  int running = 2;
  const absl::Time start = absl::Now();
  const uint64_t estimate_a = options.on_progress ? ta.estimated_rows() : 0;
  const uint64_t estimate_b = options.on_progress ? tb.estimated_rows() : 0;
  auto run = [&](SideTable& t, pg::ScanCounters& c,
                 std::optional<pg::TableScan>* out, absl::Status* status) {
    absl::StatusOr<pg::TableScan> s = t.Scan(keyspace, options.where, &c);
    if (s.ok()) {
      out->emplace(*std::move(s));
    } else {
      *status = s.status();
    }
    absl::MutexLock lock(&mu);
    --running;
  };
  std::thread thread_a([&] { run(ta, ca, sa, &status_a); });
  std::thread thread_b([&] { run(tb, cb, sb, &status_b); });
  auto done = [&running]() { return running == 0; };
  while (true) {
    {
      absl::MutexLock lock(&mu);
      if (mu.AwaitWithTimeout(absl::Condition(&done),
                              options.on_progress ? absl::Seconds(1)
                                                  : absl::InfiniteDuration())) {
        break;
      }
    }
    PgDiffProgress p;
    p.table = table;
    p.step = "reading";
    p.rows_read_a = ca.rows.load();
    p.rows_read_b = cb.rows.load();
    p.bytes_read_a = ca.bytes.load();
    p.bytes_read_b = cb.bytes.load();
    p.rows_estimated_a = estimate_a;
    p.rows_estimated_b = estimate_b;
    p.elapsed_seconds = absl::ToDoubleSeconds(absl::Now() - start);
    options.on_progress(p);
  }
  thread_a.join();
  thread_b.join();
  if (!status_a.ok()) {
    return absl::Status(status_a.code(),
                        absl::StrCat("a: ", status_a.message()));
  }
  if (!status_b.ok()) {
    return absl::Status(status_b.code(),
                        absl::StrCat("b: ", status_b.message()));
  }
  return absl::OkStatus();
}

// The keys whose rows differ now (re-read on both sides), in key order.
absl::StatusOr<std::vector<std::string>> StillDifferent(
    SideTable& a, SideTable& b, absl::Span<const std::string> keys) {
  TALLY_ASSIGN_OR_RETURN(std::vector<pg::CanonicalRow> ra, a.ReadRows(keys));
  TALLY_ASSIGN_OR_RETURN(std::vector<pg::CanonicalRow> rb, b.ReadRows(keys));
  absl::flat_hash_map<std::string, std::string> in_a;
  for (pg::CanonicalRow& r : ra) in_a[r.key] = std::move(r.value);
  absl::flat_hash_map<std::string, std::string> in_b;
  for (pg::CanonicalRow& r : rb) in_b[r.key] = std::move(r.value);
  std::vector<std::string> left;
  for (const std::string& k : keys) {
    auto ia = in_a.find(k);
    auto ib = in_b.find(k);
    const bool same =
        (ia == in_a.end() && ib == in_b.end()) ||
        (ia != in_a.end() && ib != in_b.end() && ia->second == ib->second);
    if (!same) left.push_back(k);
  }
  return left;
}

absl::StatusOr<int> CompareTable(const PgDiffOptions& options, Database& a,
                                 Database& b, const TablePair& tables) {
  const absl::Time start = absl::Now();
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<SideTable> ta,
                         OpenTable(a, tables.first));
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<SideTable> tb,
                         OpenTable(b, tables.second));
  if (ta->schema().fingerprint() != tb->schema().fingerprint()) {
    std::string why = pg::DescribeSchemaDifference(ta->schema().description(),
                                                   tb->schema().description());
    absl::StrReplaceAll({{" here", " in a"}, {" there", " in b"}}, &why);
    return absl::FailedPreconditionError(absl::StrCat(
        "schemas of ", tables.first, " and ", tables.second, " differ: ", why,
        "; their rows cannot be compared (the MariaDB side is described by "
        "the PostgreSQL types its columns map to)"));
  }
  const std::string& keyspace = tables.first;
  std::optional<pg::TableScan> scan_a;
  std::optional<pg::TableScan> scan_b;
  absl::Status scanned =
      ScanBoth(options, tables.first, keyspace, *ta, *tb, &scan_a, &scan_b);
  if (!scanned.ok()) {
    std::string message(scanned.message());
    const Database& side = message[0] == 'a' ? a : b;
    return absl::Status(
        scanned.code(),
        absl::StrCat(side.label, " (", side.display, "): ", message.substr(3)));
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const std::vector<pg::RowDifference> differences =
      pg::CompareScans(*scan_a, *scan_b);
  // Key texts: the MariaDB side's mapping reads either side's canonical
  // key bytes (their fingerprints agree).
  const mariadb::MariaDbTable& maria =
      static_cast<const MariaTable&>(a.maria != nullptr ? *ta : *tb).table();
  auto text_of = [&](const std::string& key) -> absl::StatusOr<std::string> {
    TALLY_ASSIGN_OR_RETURN(auto columns, maria.KeyTexts(key));
    return KeyText(columns);
  };
  std::vector<std::string> keys;
  std::vector<std::string> texts;
  for (const pg::RowDifference& d : differences) {
    keys.push_back(d.key);
    TALLY_ASSIGN_OR_RETURN(std::string t, text_of(d.key));
    texts.push_back(std::move(t));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    PrintDifference(options.json, keyspace, texts[i], differences[i].in_a,
                    differences[i].in_b);
  }
  const size_t n = differences.size();
  if (options.json) {
    Json summary = {{"table", keyspace},
                    {"table_b", tables.second},
                    {"a", a.display},
                    {"b", b.display},
                    {"rows_a", scan_a->rows()},
                    {"rows_b", scan_b->rows()},
                    {"differences", n},
                    {"seconds", seconds},
                    {"transfer", "rows"},
                    {"transfer_chosen_because",
                     "block hashes are computed by PostgreSQL only; every row "
                     "is read"},
                    {"rows_read_a", scan_a->rows()},
                    {"rows_read_b", scan_b->rows()},
                    {"bytes_read_a", scan_a->bytes()},
                    {"bytes_read_b", scan_b->bytes()},
                    {"root_a", scan_a->root().ToHex()},
                    {"root_b", scan_b->root().ToHex()}};
    std::cout << DumpJson({{"summary", summary}}) << "\n";
  } else {
    std::cout << absl::StrFormat(
        "%s: table %s, a=%s (%d rows, root %s), b=%s (%d rows, root %s), "
        "%.3f s; read %s (%d rows) from a, %s (%d rows) from b (every row "
        "read)\n",
        n == 0 ? std::string("equal")
               : absl::StrCat(n, n == 1 ? " key differs" : " keys differ"),
        tables.first == tables.second
            ? tables.first
            : absl::StrCat(tables.first, " vs ", tables.second),
        a.display, scan_a->rows(), scan_a->root().ToHex(), b.display,
        scan_b->rows(), scan_b->root().ToHex(), seconds,
        ByteCount(scan_a->bytes()), scan_a->rows(), ByteCount(scan_b->bytes()),
        scan_b->rows());
  }
  std::cout.flush();
  if (!options.repair) return n == 0 ? 0 : 1;
  if (n == 0) return 0;

  TALLY_ASSIGN_OR_RETURN(
      Side side, ParseSide(options.source, options.url_a, options.url_b));
  const bool source_is_a = side == Side::kA;
  Database& source = source_is_a ? a : b;
  Database& target = source_is_a ? b : a;
  SideTable& from = source_is_a ? *ta : *tb;
  SideTable& to = source_is_a ? *tb : *ta;
  uint64_t would_upsert = 0;
  uint64_t would_delete = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    const bool in_source =
        source_is_a ? differences[i].in_a : differences[i].in_b;
    ++(in_source ? would_upsert : would_delete);
    if (!options.dry_run) continue;
    PrintWouldRepair(options.json, keyspace, texts[i], in_source, target.label);
  }
  if (options.dry_run) {
    PrintDryRunSummary(options.json, keyspace, source.label, target.label,
                       would_upsert, would_delete);
    return 1;
  }
  // The source's rows now (a row changed since the scan goes as it is).
  absl::StatusOr<std::vector<pg::CanonicalRow>> rows = from.ReadRows(keys);
  if (!rows.ok()) return WithSide(rows.status(), source);
  absl::StatusOr<pg::RepairCounts> counts = to.WriteRows(keys, *rows);
  if (!counts.ok()) {
    return absl::Status(
        counts.status().code(),
        absl::StrFormat("repair of table %s from %s to %s failed, %s "
                        "unchanged: %s",
                        keyspace, source.label, target.label, target.label,
                        counts.status().message()));
  }
  TALLY_ASSIGN_OR_RETURN(std::vector<std::string> left,
                         StillDifferent(*ta, *tb, keys));
  std::vector<std::string> left_texts;
  for (const std::string& k : left) {
    TALLY_ASSIGN_OR_RETURN(std::string t, text_of(k));
    left_texts.push_back(std::move(t));
  }
  PrintRepairSummary(options.json, keyspace, source.label, target.label,
                     counts->upserted, counts->deleted, keys.size(),
                     left_texts);
  return left.empty() ? 0 : 1;
}

}  // namespace

absl::StatusOr<int> RunSqlDiff(const PgDiffOptions& options) {
  if (!options.columns.empty() || !options.exclude_columns.empty()) {
    return absl::InvalidArgumentError(
        "--columns and --exclude-columns are for two PostgreSQL URLs; with a "
        "MariaDB URL every column is compared");
  }
  if (options.transfer == "hashes") {
    return absl::InvalidArgumentError(
        "--transfer=hashes is for two PostgreSQL URLs (the block hashes are "
        "computed by PostgreSQL); with a MariaDB URL every row is read");
  }
  if (!options.transfer.empty() && options.transfer != "auto" &&
      options.transfer != "rows") {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--transfer=%s: use auto or rows", absl::CHexEscape(options.transfer)));
  }
  if (options.values) {
    return absl::InvalidArgumentError(
        "diff --values is for two PostgreSQL URLs; with a MariaDB URL the "
        "differing keys are listed");
  }
  if (options.where.find(';') != std::string::npos) {
    return absl::InvalidArgumentError(
        "--where is one SQL condition (what follows WHERE); it may not hold "
        "';'");
  }
  if (options.repair) {
    if (options.source.empty()) {
      return absl::InvalidArgumentError(
          "repair of two tables needs --source=A or --source=B (the tables "
          "keep no versions, so there is no two-way repair without "
          "sidecars)");
    }
    TALLY_RETURN_IF_ERROR(
        ParseSide(options.source, options.url_a, options.url_b).status());
  }
  Database a;
  a.label = "a";
  Database b;
  b.label = "b";
  TALLY_RETURN_IF_ERROR(Open(options, options.url_a, &a));
  TALLY_RETURN_IF_ERROR(Open(options, options.url_b, &b));
  TALLY_ASSIGN_OR_RETURN(std::vector<TablePair> pairs,
                         ChooseTables(options, a, b));
  int code = 0;
  for (const TablePair& pair : pairs) {
    TALLY_ASSIGN_OR_RETURN(int c, CompareTable(options, a, b, pair));
    code = std::max(code, c);
  }
  return code;
}

}  // namespace cli
}  // namespace tally
