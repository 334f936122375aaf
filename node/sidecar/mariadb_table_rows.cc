#include "node/sidecar/mariadb_table_rows.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "mariadb/column_mapping.h"
#include "mariadb/connection.h"
#include "mariadb/table.h"
#include "mariadb/url.h"
#include "nlohmann/json.hpp"
#include "tree/status_macros.h"

namespace tally {
namespace node {
namespace {

using mariadb::CanonicalType;
using mariadb::ColumnMapping;
using mariadb::Connection;
using mariadb::MariaDbTable;
using mariadb::MariaDbTarget;
using mariadb::TextRows;

constexpr absl::Duration kTimeout = absl::Seconds(30);

// Strict: a value the column cannot hold is an error, not a warning and a
// truncated or zero value. Set before any literal is quoted, since how a
// literal is escaped depends on the session's mode.
constexpr char kStrictMode[] =
    "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,"
    "ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'";

struct OpenTable {
  std::unique_ptr<Connection> conn;
  MariaDbTable table;
};

absl::StatusOr<OpenTable> Open(const MariaDbTarget& target,
                               absl::string_view keyspace) {
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn,
                         Connection::Open(target, kTimeout));
  TALLY_RETURN_IF_ERROR(conn->Exec(kStrictMode));
  TALLY_ASSIGN_OR_RETURN(MariaDbTable table,
                         MariaDbTable::Read(*conn, keyspace));
  return OpenTable{std::move(conn), std::move(table)};
}

bool IsInteger(CanonicalType t) {
  return t == CanonicalType::kInt2 || t == CanonicalType::kInt4 ||
         t == CanonicalType::kInt8;
}

bool IsNumber(CanonicalType t) {
  return t == CanonicalType::kFloat4 || t == CanonicalType::kFloat8 ||
         t == CanonicalType::kNumeric;
}

// [+-]digits[.digits][e[+-]digits], at least one digit before the
// exponent: what a number column takes without the server's lenient
// conversion of strings ('12abc' would be 12).
bool IsNumberText(absl::string_view s) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  size_t digits = 0;
  while (i < s.size() && absl::ascii_isdigit(s[i])) ++i, ++digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && absl::ascii_isdigit(s[i])) ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    size_t exponent = 0;
    while (i < s.size() && absl::ascii_isdigit(s[i])) ++i, ++exponent;
    if (exponent == 0) return false;
  }
  return i == s.size();
}

// "\x00ff" -> "00ff"; nullopt when `s` is not that form.
std::optional<std::string> HexOf(absl::string_view s) {
  if (!absl::ConsumePrefix(&s, "\\x") || s.size() % 2 != 0) {
    return std::nullopt;
  }
  for (char c : s) {
    if (!absl::ascii_isxdigit(c)) return std::nullopt;
  }
  return absl::AsciiStrToLower(s);
}

// Column `i`'s value `text` (nullopt: NULL) as a SQL literal.
absl::StatusOr<std::string> Literal(Connection& conn, const MariaDbTable& table,
                                    size_t i,
                                    const std::optional<std::string>& text) {
  if (!text.has_value()) return std::string("NULL");
  const ColumnMapping& m = table.mappings()[i];
  const std::string& column = table.schema().columns()[i].name;
  if (IsInteger(m.type)) {
    int64_t v = 0;
    uint64_t u = 0;
    if (absl::SimpleAtoi(*text, &v)) return absl::StrCat(v);
    if (absl::SimpleAtoi(*text, &u)) return absl::StrCat(u);
    return absl::InvalidArgumentError(
        absl::StrFormat("column %s of %s holds integers: '%s' is not one",
                        column, table.schema().name(), *text));
  }
  if (IsNumber(m.type)) {
    if (!IsNumberText(*text)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("column %s of %s holds numbers: '%s' is not one",
                          column, table.schema().name(), *text));
    }
    return *text;
  }
  if (m.type == CanonicalType::kBytea) {
    std::optional<std::string> hex = HexOf(*text);
    if (!hex.has_value()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "column %s of %s is binary: give its value as \\x and hex digits "
          "(as get prints it); got '%s'",
          column, table.schema().name(), *text));
    }
    return absl::StrCat("X'", *hex, "'");
  }
  return conn.Quote(*text);
}

absl::Status CheckKey(const MariaDbTable& table, absl::string_view keyspace,
                      const std::vector<std::string>& key) {
  const size_t n = table.schema().key_columns();
  if (key.size() != n) {
    std::vector<std::string> names;
    for (size_t i = 0; i < n; ++i) {
      names.push_back(table.schema().columns()[i].name);
    }
    return absl::InvalidArgumentError(absl::StrFormat(
        "the primary key of %s is (%s): give %d key value%s, in that order; "
        "got %d",
        keyspace, absl::StrJoin(names, ", "), n, n == 1 ? "" : "s",
        key.size()));
  }
  return absl::OkStatus();
}

// "`k1` = 5 AND `k2` = 'eu'" for the key values `key`.
absl::StatusOr<std::string> KeyCondition(Connection& conn,
                                         const MariaDbTable& table,
                                         const std::vector<std::string>& key) {
  std::vector<std::string> terms;
  for (size_t i = 0; i < key.size(); ++i) {
    TALLY_ASSIGN_OR_RETURN(std::string literal,
                           Literal(conn, table, i, key[i]));
    terms.push_back(
        absl::StrCat(mariadb::QuoteIdentifier(table.schema().columns()[i].name),
                     " = ", literal));
  }
  return absl::StrJoin(terms, " AND ");
}

std::string DescribeKey(const std::vector<std::string>& key) {
  return absl::StrCat("(", absl::StrJoin(key, ", "), ")");
}

// `s` as a JSON string (a text column's value is UTF-8: the session's
// character set; anything else would be replaced, never thrown).
std::string JsonString(absl::string_view s) {
  return nlohmann::json(std::string(s))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The JSON path of member `name`: $."a\"b".
std::string MemberPath(absl::string_view name) {
  return absl::StrCat(
      "$.\"", absl::StrReplaceAll(name, {{"\\", "\\\\"}, {"\"", "\\\""}}),
      "\"");
}

// A write's refusal by the server (a value the column cannot hold, a
// constraint, a duplicate secondary key) is the operator's input, not the
// node's trouble.
absl::Status WriteError(absl::string_view keyspace, const absl::Status& s) {
  if (s.code() == absl::StatusCode::kFailedPrecondition ||
      s.code() == absl::StatusCode::kAlreadyExists) {
    return absl::InvalidArgumentError(
        absl::StrCat(keyspace, ": ", s.message()));
  }
  return s;
}

class MariaDbTableRows : public TableRows {
 public:
  MariaDbTableRows(MariaDbTarget target, std::vector<std::string> tables)
      : TableRows(std::move(tables)), target_(std::move(target)) {}

  absl::StatusOr<std::string> Get(
      absl::string_view keyspace,
      const std::vector<std::string>& key) const override;
  absl::Status Put(absl::string_view keyspace,
                   const std::vector<std::string>& key,
                   absl::string_view json) const override;
  absl::Status Delete(absl::string_view keyspace,
                      const std::vector<std::string>& key) const override;

 private:
  absl::Status Write(Connection& conn, const MariaDbTable& table,
                     const std::string& condition,
                     const std::vector<std::string>& columns,
                     const std::vector<std::string>& literals,
                     size_t key_columns) const;

  const MariaDbTarget target_;
};

absl::StatusOr<std::string> MariaDbTableRows::Get(
    absl::string_view keyspace, const std::vector<std::string>& key) const {
  TALLY_ASSIGN_OR_RETURN(OpenTable open, Open(target_, keyspace));
  const MariaDbTable& table = open.table;
  TALLY_RETURN_IF_ERROR(CheckKey(table, keyspace, key));
  TALLY_ASSIGN_OR_RETURN(std::string condition,
                         KeyCondition(*open.conn, table, key));
  std::vector<std::string> select;
  for (size_t i = 0; i < table.mappings().size(); ++i) {
    const std::string column =
        mariadb::QuoteIdentifier(table.schema().columns()[i].name);
    select.push_back(table.mappings()[i].type == CanonicalType::kBytea
                         ? absl::StrCat("HEX(", column, ")")
                         : column);
  }
  TALLY_ASSIGN_OR_RETURN(TextRows rows,
                         open.conn->Query(absl::StrCat(
                             "SELECT ", absl::StrJoin(select, ", "), " FROM ",
                             table.quoted_name(), " WHERE ", condition)));
  if (rows.empty()) {
    return absl::NotFoundError(absl::StrFormat("no row with key %s in %s",
                                               DescribeKey(key), keyspace));
  }
  // Laid out as PostgreSQL's json_object_agg lays out a get there.
  std::vector<std::string> members;
  for (size_t i = 0; i < rows[0].size(); ++i) {
    const std::optional<std::string>& value = rows[0][i];
    std::string text;
    if (!value.has_value()) {
      text = "null";
    } else if (table.mappings()[i].type == CanonicalType::kBytea) {
      text = JsonString(absl::StrCat("\\x", absl::AsciiStrToLower(*value)));
    } else if (table.mappings()[i].type == CanonicalType::kJson) {
      text = *value;  // a JSON column holds JSON (its CHECK is json_valid)
    } else {
      text = JsonString(*value);
    }
    members.push_back(absl::StrCat(JsonString(table.schema().columns()[i].name),
                                   " : ", text));
  }
  return absl::StrCat("{ ", absl::StrJoin(members, ", "), " }");
}

absl::Status MariaDbTableRows::Put(absl::string_view keyspace,
                                   const std::vector<std::string>& key,
                                   absl::string_view json) const {
  TALLY_ASSIGN_OR_RETURN(OpenTable open, Open(target_, keyspace));
  Connection& conn = *open.conn;
  const MariaDbTable& table = open.table;
  TALLY_RETURN_IF_ERROR(CheckKey(table, keyspace, key));
  // The JSON's shape and names first, so that a typo is named rather than
  // silently ignored. The server reads the JSON: its numbers stay the
  // digits written (no double in between).
  const std::string doc = conn.Quote(json);
  TALLY_ASSIGN_OR_RETURN(
      TextRows shape,
      conn.Query(absl::StrFormat(
          "SELECT JSON_VALID(%s), IF(JSON_VALID(%s), JSON_TYPE(%s), NULL)", doc,
          doc, doc)));
  if (shape.empty() || shape[0][0] != "1") {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the value for %s is not JSON; give a JSON object of column -> "
        "value, e.g. '{\"name\":\"Ada\"}'",
        keyspace));
  }
  if (shape[0][1] != "OBJECT") {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the value for %s must be a JSON object of column -> value, e.g. "
        "'{\"name\":\"Ada\"}'; got a JSON %s",
        keyspace, absl::AsciiStrToLower(shape[0][1].value_or("null"))));
  }
  TALLY_ASSIGN_OR_RETURN(
      TextRows names,
      conn.Query(absl::StrFormat(
          "SELECT k FROM JSON_TABLE(JSON_KEYS(%s), '$[*]' COLUMNS (k TEXT "
          "PATH '$')) AS member_names",
          doc)));
  const absl::Span<const pg::TableColumn> columns = table.schema().columns();
  std::vector<size_t> named;  // canonical column indexes, in JSON order
  for (const auto& row : names) {
    const std::string name = row[0].value_or("");
    size_t found = columns.size();
    for (size_t i = 0; i < columns.size(); ++i) {
      if (columns[i].name == name) found = i;
    }
    if (found == columns.size()) {
      std::vector<std::string> all;
      for (const pg::TableColumn& c : columns) all.push_back(c.name);
      return absl::InvalidArgumentError(
          absl::StrFormat("%s has no column '%s' (its columns: %s)", keyspace,
                          name, absl::StrJoin(all, ", ")));
    }
    named.push_back(found);
  }
  // Each named member's JSON type and its text (an object or array as its
  // JSON text, for a JSON column).
  std::vector<std::optional<std::string>> values(columns.size());
  if (!named.empty()) {
    std::vector<std::string> select;
    for (size_t i : named) {
      const std::string member = absl::StrFormat(
          "JSON_EXTRACT(%s, %s)", doc, conn.Quote(MemberPath(columns[i].name)));
      select.push_back(
          absl::StrFormat("JSON_TYPE(%s), JSON_UNQUOTE(%s)", member, member));
    }
    TALLY_ASSIGN_OR_RETURN(
        TextRows got,
        conn.Query(absl::StrCat("SELECT ", absl::StrJoin(select, ", "))));
    for (size_t n = 0; n < named.size(); ++n) {
      if (got[0][2 * n] != "NULL") values[named[n]] = got[0][2 * n + 1];
    }
  }
  // A key column in the JSON must say what the key values say: a put names
  // one row. Compared as the column's values, so "042" is 42.
  const size_t key_columns = table.schema().key_columns();
  std::vector<std::string> literals(columns.size());
  for (size_t i = 0; i < key_columns; ++i) {
    TALLY_ASSIGN_OR_RETURN(literals[i], Literal(conn, table, i, key[i]));
  }
  for (size_t i : named) {
    TALLY_ASSIGN_OR_RETURN(std::string literal,
                           Literal(conn, table, i, values[i]));
    if (i >= key_columns) {
      literals[i] = std::move(literal);
    } else if (literal != literals[i]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "key column %s is '%s' in the JSON but the key says '%s'; leave it "
          "out of the JSON or make them agree",
          columns[i].name, values[i].value_or("null"), key[i]));
    }
  }
  TALLY_ASSIGN_OR_RETURN(std::string condition, KeyCondition(conn, table, key));
  std::vector<std::string> write_columns;
  std::vector<std::string> write_literals;
  for (size_t i = 0; i < columns.size(); ++i) {
    const bool is_named =
        std::find(named.begin(), named.end(), i) != named.end();
    if (i >= key_columns && !is_named) continue;
    write_columns.push_back(mariadb::QuoteIdentifier(columns[i].name));
    write_literals.push_back(literals[i]);
  }
  absl::Status written =
      Write(conn, table, condition, write_columns, write_literals, key_columns);
  if (!written.ok()) {
    (void)conn.Exec("ROLLBACK");
    return WriteError(keyspace, written);
  }
  return absl::OkStatus();
}

// One transaction: the row locked by key, then updated (the columns after
// the key) or inserted (all of `columns`). Not INSERT ... ON DUPLICATE KEY
// UPDATE: the server checks the proposed row's NOT NULL columns without
// defaults before it finds the duplicate, so a put naming only some
// columns of an existing row would be refused.
absl::Status MariaDbTableRows::Write(Connection& conn,
                                     const MariaDbTable& table,
                                     const std::string& condition,
                                     const std::vector<std::string>& columns,
                                     const std::vector<std::string>& literals,
                                     size_t key_columns) const {
  TALLY_RETURN_IF_ERROR(conn.Exec("START TRANSACTION"));
  TALLY_ASSIGN_OR_RETURN(
      TextRows found,
      conn.Query(absl::StrCat("SELECT 1 FROM ", table.quoted_name(), " WHERE ",
                              condition, " FOR UPDATE")));
  if (found.empty()) {
    TALLY_RETURN_IF_ERROR(conn.Exec(absl::StrCat(
        "INSERT INTO ", table.quoted_name(), " (", absl::StrJoin(columns, ", "),
        ") VALUES (", absl::StrJoin(literals, ", "), ")")));
  } else if (columns.size() > key_columns) {
    std::vector<std::string> sets;
    for (size_t i = key_columns; i < columns.size(); ++i) {
      sets.push_back(absl::StrCat(columns[i], " = ", literals[i]));
    }
    TALLY_RETURN_IF_ERROR(conn.Exec(
        absl::StrCat("UPDATE ", table.quoted_name(), " SET ",
                     absl::StrJoin(sets, ", "), " WHERE ", condition)));
  }
  return conn.Exec("COMMIT");
}

absl::Status MariaDbTableRows::Delete(
    absl::string_view keyspace, const std::vector<std::string>& key) const {
  TALLY_ASSIGN_OR_RETURN(OpenTable open, Open(target_, keyspace));
  TALLY_RETURN_IF_ERROR(CheckKey(open.table, keyspace, key));
  TALLY_ASSIGN_OR_RETURN(std::string condition,
                         KeyCondition(*open.conn, open.table, key));
  absl::Status deleted = open.conn->Exec(absl::StrCat(
      "DELETE FROM ", open.table.quoted_name(), " WHERE ", condition));
  if (!deleted.ok()) return WriteError(keyspace, deleted);
  TALLY_ASSIGN_OR_RETURN(TextRows count,
                         open.conn->Query("SELECT ROW_COUNT()"));
  if (count.empty() || count[0][0] == "0") {
    return absl::NotFoundError(absl::StrFormat("no row with key %s in %s",
                                               DescribeKey(key), keyspace));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TableRows>> NewMariaDbTableRows(
    const std::string& url, std::vector<std::string> tables) {
  TALLY_ASSIGN_OR_RETURN(MariaDbTarget target, mariadb::ParseMariaDbUrl(url));
  return std::unique_ptr<TableRows>(
      new MariaDbTableRows(std::move(target), std::move(tables)));
}

}  // namespace node
}  // namespace tally
