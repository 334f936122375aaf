#include "tools/cli/pg/pg_diff.h"

#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <utility>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "mariadb/url.h"
#include "pg/table_diff/table_diff.h"
#include "pg/table_diff/transfer_choice.h"
#include "pg/wire/connection.h"
#include "tools/cli/args.h"
#include "tools/cli/format.h"
#include "tools/cli/pg/diff_output.h"
#include "tools/cli/pg/sql_diff.h"
#include "tools/cli/pg_url.h"
#include "tree/status_macros.h"

namespace tally {
namespace cli {
namespace {

struct Database {
  PostgresTarget target;
  std::string label;  // "a" or "b"
  std::unique_ptr<pg::Connection> conn;
};

absl::Status WithSide(const absl::Status& s, const Database& db) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(db.label, " (", db.target.display,
                                             "): ", s.message()));
}

absl::Status Open(const PgDiffOptions& options, Database* db) {
  pg::ConnectOptions connect;
  connect.connect_timeout = std::min(options.timeout, absl::Seconds(30));
  connect.query_timeout = options.timeout;
  connect.application_name = "tally diff";
  absl::StatusOr<std::unique_ptr<pg::Connection>> conn =
      pg::Connection::Open(db->target.conninfo, connect);
  if (!conn.ok()) return WithSide(conn.status(), *db);
  db->conn = *std::move(conn);
  return absl::OkStatus();
}

// Every table with a primary key that the user can read, outside the
// system schemas.
absl::StatusOr<absl::btree_set<std::string>> ListTables(Database& db) {
  absl::StatusOr<pg::Result> r = db.conn->Exec(
      "SELECT n.nspname || '.' || c.relname FROM pg_catalog.pg_class c "
      "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
      "WHERE c.relkind = 'r' "
      "AND n.nspname NOT IN ('pg_catalog', 'information_schema') "
      "AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE "
      "'pg\\_temp%' "
      "AND EXISTS (SELECT 1 FROM pg_catalog.pg_index i "
      "WHERE i.indrelid = c.oid AND i.indisprimary) "
      "AND pg_catalog.has_schema_privilege(n.oid, 'USAGE') "
      "AND pg_catalog.has_table_privilege(c.oid, 'SELECT')");
  if (!r.ok()) return WithSide(r.status(), db);
  absl::btree_set<std::string> tables;
  for (int i = 0; i < r->rows(); ++i) tables.emplace(r->Value(i, 0));
  return tables;
}

absl::StatusOr<std::vector<TablePair>> ChooseTables(
    const PgDiffOptions& options, Database& a, Database& b) {
  return PairTables(
      options.tables, a.target.tables, b.target.tables,
      [&]() -> absl::StatusOr<std::vector<TablePair>> {
        std::vector<TablePair> pairs;
        TALLY_ASSIGN_OR_RETURN(absl::btree_set<std::string> all_a,
                               ListTables(a));
        TALLY_ASSIGN_OR_RETURN(absl::btree_set<std::string> all_b,
                               ListTables(b));
        std::vector<std::string> only_a;
        std::vector<std::string> only_b;
        for (const std::string& t : all_a) {
          if (!all_b.contains(t)) only_a.push_back(t);
        }
        for (const std::string& t : all_b) {
          if (!all_a.contains(t)) only_b.push_back(t);
        }
        if (!only_a.empty() || !only_b.empty()) {
          std::vector<std::string> parts;
          if (!only_a.empty()) {
            parts.push_back(
                absl::StrCat("only in a: ", absl::StrJoin(only_a, ", ")));
          }
          if (!only_b.empty()) {
            parts.push_back(
                absl::StrCat("only in b: ", absl::StrJoin(only_b, ", ")));
          }
          return absl::FailedPreconditionError(absl::StrCat(
              "the databases hold different tables with a primary key (",
              absl::StrJoin(parts, "; "), "); name the tables to compare"));
        }
        if (all_a.empty()) {
          return absl::NotFoundError(
              "neither database has a table with a primary key that this user "
              "can "
              "read; name the tables with table= or --table");
        }
        for (const std::string& t : all_a) pairs.emplace_back(t, t);
        return pairs;
      });
}

// A value as --values prints it: C-escaped, cut after 200 characters, NULL
// as NULL (and a text 'NULL' quoted, so the two never read alike).
std::string ValueText(const std::optional<std::string>& value) {
  if (!value.has_value()) return "NULL";
  constexpr size_t kMaxShown = 200;
  std::string shown = absl::CHexEscape(value->substr(0, kMaxShown));
  return absl::StrCat("'", shown, "'",
                      value->size() > kMaxShown
                          ? absl::StrFormat("... (%d bytes)", value->size())
                          : "");
}

// The rows of `keys` on one side as text, in batches (one keys table
// each).
absl::StatusOr<absl::flat_hash_map<std::string, pg::RowText>> RowTexts(
    Database& db, const pg::TableSchema& schema,
    const std::vector<std::string>& keys) {
  constexpr size_t kBatch = 1000;
  absl::flat_hash_map<std::string, pg::RowText> all;
  for (size_t at = 0; at < keys.size(); at += kBatch) {
    absl::Span<const std::string> batch = absl::MakeConstSpan(keys).subspan(
        at, std::min(kBatch, keys.size() - at));
    absl::StatusOr<absl::flat_hash_map<std::string, pg::RowText>> rows =
        pg::RowTextsByKey(*db.conn, schema, batch);
    if (!rows.ok()) return WithSide(rows.status(), db);
    for (auto& [key, row] : *rows) all.emplace(key, std::move(row));
  }
  return all;
}

// What --values adds under a difference: for a row on both sides the
// columns whose text differs with both values; for a row on one side its
// columns (the key's included).
void PrintValues(const pg::TableSchema& schema, const pg::RowText* in_a,
                 const pg::RowText* in_b, bool json, Json* line) {
  const auto columns = schema.columns();
  if (in_a != nullptr && in_b != nullptr) {
    std::vector<std::string> differ;
    Json values = Json::object();
    for (size_t i = 0;
         i < columns.size() && i < in_a->size() && i < in_b->size(); ++i) {
      if ((*in_a)[i] == (*in_b)[i]) continue;
      differ.push_back(columns[i].name);
      if (json) {
        values[columns[i].name] = {
            {"a", (*in_a)[i].has_value() ? Json((*in_a)[i].value()) : Json()},
            {"b", (*in_b)[i].has_value() ? Json((*in_b)[i].value()) : Json()}};
      } else {
        std::cout << "    " << columns[i].name << ": " << ValueText((*in_a)[i])
                  << " on a, " << ValueText((*in_b)[i]) << " on b\n";
      }
    }
    if (json) {
      (*line)["columns_differ"] = differ;
      (*line)["values"] = values;
    } else if (differ.empty()) {
      std::cout << "    (no column differs in its text: their binary forms "
                   "do)\n";
    }
    return;
  }
  const pg::RowText* row = in_a != nullptr ? in_a : in_b;
  if (row == nullptr) {  // changed since the diff, on both sides
    if (!json) std::cout << "    (the row is gone on both sides now)\n";
    return;
  }
  Json values = Json::object();
  std::vector<std::string> cells;
  for (size_t i = 0; i < columns.size() && i < row->size(); ++i) {
    values[columns[i].name] =
        (*row)[i].has_value() ? Json((*row)[i].value()) : Json();
    cells.push_back(absl::StrCat(columns[i].name, "=", ValueText((*row)[i])));
  }
  if (json) {
    (*line)[in_a != nullptr ? "row_a" : "row_b"] = values;
  } else {
    std::cout << "    on " << (in_a != nullptr ? "a" : "b") << ": "
              << absl::StrJoin(cells, ", ") << "\n";
  }
}

// nullopt: auto (chosen per table by pg/table_diff/transfer_choice.h).
absl::StatusOr<std::optional<pg::Transfer>> ParseTransfer(
    absl::string_view transfer) {
  if (transfer.empty() || transfer == "auto") return std::nullopt;
  if (transfer == "rows") return pg::Transfer::kRows;
  if (transfer == "hashes") return pg::Transfer::kBlockHashes;
  return absl::InvalidArgumentError(absl::StrFormat(
      "--transfer=%s: use auto (the default: chosen by measuring each "
      "link), rows (read every row here) or hashes (block hashes in each "
      "database, then only the rows that may differ)",
      absl::CHexEscape(transfer)));
}

// --transfer, or the estimate from probing both links.
// The reason is empty when --transfer gave it.
absl::StatusOr<pg::TransferChoice> PickTransfer(const PgDiffOptions& options,
                                                Database& a, Database& b,
                                                const TablePair& tables) {
  TALLY_ASSIGN_OR_RETURN(const std::optional<pg::Transfer> given,
                         ParseTransfer(options.transfer));
  if (given.has_value()) return pg::TransferChoice{*given, ""};
  absl::StatusOr<pg::LinkProbe> pa = pg::ProbeLink(*a.conn, tables.first);
  if (!pa.ok()) return WithSide(pa.status(), a);
  absl::StatusOr<pg::LinkProbe> pb = pg::ProbeLink(*b.conn, tables.second);
  if (!pb.ok()) return WithSide(pb.status(), b);
  return pg::ChooseTransfer(*pa, *pb);
}

// The exit code of one table: 0 equal, 1 different.
absl::StatusOr<int> CompareTable(const PgDiffOptions& options, Database& a,
                                 Database& b, const TablePair& tables) {
  const absl::Time start = absl::Now();
  TALLY_ASSIGN_OR_RETURN(const pg::TransferChoice transfer,
                         PickTransfer(options, a, b, tables));
  pg::DiffProgressFn progress;
  if (options.on_progress) {
    progress = [&](const pg::DiffProgress& p) {
      PgDiffProgress out;
      out.table = tables.first;
      out.step =
          p.step == pg::DiffProgress::Step::kHashing ? "hashing" : "reading";
      out.rows_read_a = p.rows_read_a;
      out.rows_read_b = p.rows_read_b;
      out.bytes_read_a = p.bytes_read_a;
      out.bytes_read_b = p.bytes_read_b;
      out.rows_estimated_a = p.rows_estimated_a;
      out.rows_estimated_b = p.rows_estimated_b;
      out.buckets_differing = p.buckets_differing;
      out.elapsed_seconds = absl::ToDoubleSeconds(p.elapsed);
      options.on_progress(out);
    };
  }
  absl::StatusOr<pg::TableDiff> diff = pg::DiffTables(
      *a.conn, *b.conn, tables.first, tables.second,
      pg::RowScope{options.columns, options.exclude_columns, options.where},
      transfer.transfer, progress);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (!diff.ok()) {
    // DiffTables names the side ("a: ..."); add which database it is.
    const absl::Status& s = diff.status();
    std::string message(s.message());
    for (const Database* db : {&a, &b}) {
      const std::string prefix = absl::StrCat(db->label, ": ");
      if (absl::StartsWith(message, prefix)) {
        message = absl::StrCat(db->label, " (", db->target.display,
                               "): ", message.substr(prefix.size()));
        break;
      }
    }
    return absl::Status(s.code(), message);
  }
  std::vector<std::string> keys;
  keys.reserve(diff->differences.size());
  for (const pg::RowDifference& d : diff->differences) keys.push_back(d.key);
  absl::StatusOr<std::vector<std::string>> texts =
      pg::KeyTexts(*a.conn, diff->schema, keys);
  if (!texts.ok()) return WithSide(texts.status(), a);
  // --values: both sides' rows now (read by key after the diff: a row
  // written since shows its newer value).
  absl::flat_hash_map<std::string, pg::RowText> values_a;
  absl::flat_hash_map<std::string, pg::RowText> values_b;
  if (options.values) {
    TALLY_ASSIGN_OR_RETURN(values_a, RowTexts(a, diff->schema, keys));
    TALLY_ASSIGN_OR_RETURN(values_b, RowTexts(b, diff->schema_b, keys));
  }
  auto find = [](const absl::flat_hash_map<std::string, pg::RowText>& rows,
                 const std::string& key) -> const pg::RowText* {
    auto it = rows.find(key);
    return it == rows.end() ? nullptr : &it->second;
  };
  for (size_t i = 0; i < keys.size(); ++i) {
    const pg::RowDifference& d = diff->differences[i];
    if (options.json) {
      Json line = Json::object();
      line["table"] = diff->keyspace;
      SetBytesField(line, "key", (*texts)[i]);
      line["a"] = d.in_a;
      line["b"] = d.in_b;
      if (options.values) {
        PrintValues(diff->schema, find(values_a, keys[i]),
                    find(values_b, keys[i]), /*json=*/true, &line);
      }
      std::cout << DumpJson(line) << "\n";
    } else {
      PrintDifference(/*json=*/false, diff->keyspace, (*texts)[i], d.in_a,
                      d.in_b);
      if (options.values) {
        PrintValues(diff->schema, find(values_a, keys[i]),
                    find(values_b, keys[i]), /*json=*/false, nullptr);
      }
    }
  }
  const size_t n = diff->differences.size();
  const bool hashes = diff->transfer == pg::Transfer::kBlockHashes;
  if (options.json) {
    Json summary = {{"table", diff->keyspace},
                    {"table_b", tables.second},
                    {"a", a.target.display},
                    {"b", b.target.display},
                    {"rows_a", diff->rows_a},
                    {"rows_b", diff->rows_b},
                    {"differences", n},
                    {"seconds", seconds},
                    {"transfer", hashes ? "hashes" : "rows"},
                    {"transfer_chosen_because",
                     transfer.reason.empty() ? Json() : Json(transfer.reason)},
                    {"rows_read_a", diff->rows_read_a},
                    {"rows_read_b", diff->rows_read_b},
                    {"bytes_read_a", diff->bytes_read_a},
                    {"bytes_read_b", diff->bytes_read_b}};
    if (hashes) {
      summary["buckets"] = diff->buckets;
      summary["buckets_differing"] = diff->buckets_differing;
    } else {
      summary["root_a"] = diff->root_a.ToHex();
      summary["root_b"] = diff->root_b.ToHex();
    }
    std::cout << DumpJson({{"summary", summary}}) << "\n";
  } else {
    auto side = [&](const Database& db, uint64_t rows,
                    const tree::Digest128& root) {
      return hashes ? absl::StrFormat("%s (%d rows)", db.target.display, rows)
                    : absl::StrFormat("%s (%d rows, root %s)",
                                      db.target.display, rows, root.ToHex());
    };
    std::cout << absl::StrFormat(
        "%s: table %s, a=%s, b=%s, %.3f s; read %s (%d rows) from a, %s (%d "
        "rows) from b%s\n",
        n == 0 ? std::string("equal")
               : absl::StrCat(n, n == 1 ? " key differs" : " keys differ"),
        tables.first == tables.second
            ? tables.first
            : absl::StrCat(tables.first, " vs ", tables.second),
        side(a, diff->rows_a, diff->root_a),
        side(b, diff->rows_b, diff->root_b), seconds,
        ByteCount(diff->bytes_read_a), diff->rows_read_a,
        ByteCount(diff->bytes_read_b), diff->rows_read_b,
        absl::StrCat(
            hashes ? absl::StrFormat(" (block hashes: %d of %d buckets differ)",
                                     diff->buckets_differing, diff->buckets)
                   : " (every row read)",
            transfer.reason.empty()
                ? ""
                : absl::StrCat("; ", hashes ? "hashes" : "rows",
                               " chosen: ", transfer.reason)));
  }
  std::cout.flush();
  if (!options.repair) return n == 0 ? 0 : 1;
  if (n == 0) return 0;

  // Repair: the source's rows at the differing keys go to the target.
  TALLY_ASSIGN_OR_RETURN(
      Side side, ParseSide(options.source, options.url_a, options.url_b));
  Database& source = side == Side::kA ? a : b;
  Database& target = side == Side::kA ? b : a;
  const bool source_is_a = side == Side::kA;
  uint64_t would_upsert = 0;
  uint64_t would_delete = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    const pg::RowDifference& d = diff->differences[i];
    const bool in_source = source_is_a ? d.in_a : d.in_b;
    ++(in_source ? would_upsert : would_delete);
    if (!options.dry_run) continue;
    PrintWouldRepair(options.json, diff->keyspace, (*texts)[i], in_source,
                     target.label);
  }
  if (options.dry_run) {
    PrintDryRunSummary(options.json, diff->keyspace, source.label, target.label,
                       would_upsert, would_delete);
    return 1;
  }
  absl::StatusOr<pg::RepairCounts> counts = pg::RepairTable(
      *source.conn, source_is_a ? diff->schema : diff->schema_b, *target.conn,
      source_is_a ? diff->schema_b : diff->schema, keys);
  if (!counts.ok()) {
    return absl::Status(
        counts.status().code(),
        absl::StrFormat("repair of table %s from %s to %s failed, %s "
                        "unchanged: %s",
                        diff->keyspace, source.label, target.label,
                        target.label, counts.status().message()));
  }
  // The re-read of only the repaired keys: ACE's "re-run of a saved diff".
  TALLY_ASSIGN_OR_RETURN(
      std::vector<std::string> left,
      pg::StillDifferent(*a.conn, diff->schema, *b.conn, diff->schema_b, keys));
  absl::StatusOr<std::vector<std::string>> left_texts =
      pg::KeyTexts(*a.conn, diff->schema, left);
  if (!left_texts.ok()) return WithSide(left_texts.status(), a);
  PrintRepairSummary(options.json, diff->keyspace, source.label, target.label,
                     counts->upserted, counts->deleted, keys.size(),
                     *left_texts);
  return left.empty() ? 0 : 1;
}

}  // namespace

absl::StatusOr<int> RunPgDiff(const PgDiffOptions& options) {
  if (mariadb::IsMariaDbUrl(options.url_a) ||
      mariadb::IsMariaDbUrl(options.url_b)) {
    return RunSqlDiff(options);
  }
  Database a{{}, "a", nullptr};
  Database b{{}, "b", nullptr};
  absl::StatusOr<PostgresTarget> ta = ParsePostgresUrl(options.url_a);
  if (!ta.ok()) return ta.status();
  absl::StatusOr<PostgresTarget> tb = ParsePostgresUrl(options.url_b);
  if (!tb.ok()) return tb.status();
  a.target = *std::move(ta);
  b.target = *std::move(tb);
  TALLY_RETURN_IF_ERROR(ParseTransfer(options.transfer).status());
  if (options.repair) {
    // Checked before any work, so a typo costs no scan. Two tables hold no
    // versions, so there is no last writer to decide a two-way repair.
    if (options.source.empty()) {
      return absl::InvalidArgumentError(
          "repair of two PostgreSQL tables needs --source=A or --source=B "
          "(the tables keep no versions, so there is no two-way repair "
          "without sidecars)");
    }
    TALLY_RETURN_IF_ERROR(
        ParseSide(options.source, options.url_a, options.url_b).status());
  }
  TALLY_RETURN_IF_ERROR(Open(options, &a));
  TALLY_RETURN_IF_ERROR(Open(options, &b));
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
