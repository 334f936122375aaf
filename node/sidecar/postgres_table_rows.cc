#include "node/sidecar/postgres_table_rows.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "node/config/postgres_settings.h"
#include "pg/wire/connection.h"
#include "tree/status_macros.h"

namespace tally {
namespace node {
namespace {

struct Column {
  std::string name;
  std::string type;  // format_type(): a name a cast accepts
  // 1.. in the primary key; 0 for other columns (indkey is an int2vector,
  // whose subscripts start at 0).
  int key_position;
  // An array, a composite, json or jsonb: read as JSON itself (an array, an
  // object, the document), which put's json_populate_record turns back
  // into the same value; as text, `{a,"b c"}` or a document would come
  // back as a string.
  bool structured = false;
};

// What a statement needs to know of one table.
struct Table {
  std::string sql_name;         // "schema"."table", quoted
  std::vector<Column> columns;  // in table (attnum) order
  std::vector<size_t> key;      // indexes into columns, in key order
};

absl::StatusOr<std::unique_ptr<pg::Connection>> Connect(
    const std::string& conninfo) {
  pg::ConnectOptions options;
  options.query_timeout = absl::Seconds(30);
  options.application_name = "tally get/put/del";
  return pg::Connection::Open(conninfo, options);
}

absl::StatusOr<Table> ReadTable(pg::Connection& c, absl::string_view keyspace) {
  TALLY_ASSIGN_OR_RETURN(QualifiedTable name, ParseQualifiedTable(keyspace));
  Table table;
  table.sql_name = absl::StrCat(c.QuoteIdentifier(name.schema), ".",
                                c.QuoteIdentifier(name.table));
  TALLY_ASSIGN_OR_RETURN(
      pg::Result r,
      c.ExecParams(
          "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), "
          "coalesce(array_position(i.indkey::int2[], a.attnum) + 1 - "
          "array_lower(i.indkey::int2[], 1), 0), "
          "(ty.typcategory IN ('A', 'C') OR "
          "ty.oid IN ('json'::regtype, 'jsonb'::regtype))::text "
          "FROM pg_attribute a JOIN pg_type ty ON ty.oid = coalesce(nullif("
          "(SELECT typbasetype FROM pg_type WHERE oid = a.atttypid), 0), "
          "a.atttypid) "
          "LEFT JOIN pg_index i "
          "ON i.indrelid = a.attrelid AND i.indisprimary "
          "WHERE a.attrelid = $1::regclass AND a.attnum > 0 "
          "AND NOT a.attisdropped ORDER BY a.attnum",
          {pg::Param::Text(table.sql_name)}));
  for (int row = 0; row < r.rows(); ++row) {
    Column column{std::string(r.Value(row, 0)), std::string(r.Value(row, 1)), 0,
                  r.Value(row, 3) == "true"};
    if (!absl::SimpleAtoi(r.Value(row, 2), &column.key_position)) {
      return absl::InternalError(absl::StrFormat(
          "the catalog gave key position '%s' for column %s of %s",
          r.Value(row, 2), column.name, keyspace));
    }
    if (column.key_position > 0) table.key.push_back(table.columns.size());
    table.columns.push_back(std::move(column));
  }
  if (table.key.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "table %s has no primary key; tally addresses rows by it", keyspace));
  }
  std::sort(table.key.begin(), table.key.end(), [&](size_t a, size_t b) {
    return table.columns[a].key_position < table.columns[b].key_position;
  });
  return table;
}

std::string KeyColumnNames(const Table& table) {
  std::vector<std::string> names;
  for (size_t i : table.key) names.push_back(table.columns[i].name);
  return absl::StrJoin(names, ", ");
}

absl::Status CheckKey(const Table& table, absl::string_view keyspace,
                      const std::vector<std::string>& key) {
  if (key.size() != table.key.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the primary key of %s is (%s): give %d key value%s, in that order; "
        "got %d",
        keyspace, KeyColumnNames(table), table.key.size(),
        table.key.size() == 1 ? "" : "s", key.size()));
  }
  return absl::OkStatus();
}

// "k1 = $<first> AND k2 = $<first+1> ...": the server infers each text
// parameter's type from its column.
std::string KeyCondition(const pg::Connection& c, const Table& table,
                         int first) {
  std::vector<std::string> terms;
  for (size_t i = 0; i < table.key.size(); ++i) {
    terms.push_back(absl::StrFormat(
        "%s = $%d", c.QuoteIdentifier(table.columns[table.key[i]].name),
        first + static_cast<int>(i)));
  }
  return absl::StrJoin(terms, " AND ");
}

std::string DescribeKey(const std::vector<std::string>& key) {
  return absl::StrCat("(", absl::StrJoin(key, ", "), ")");
}

class PostgresTableRows : public TableRows {
 public:
  PostgresTableRows(std::string conninfo, std::vector<std::string> tables)
      : TableRows(std::move(tables)), conninfo_(std::move(conninfo)) {}

  absl::StatusOr<std::string> Get(
      absl::string_view keyspace,
      const std::vector<std::string>& key) const override;
  absl::Status Put(absl::string_view keyspace,
                   const std::vector<std::string>& key,
                   absl::string_view json) const override;
  absl::Status Delete(absl::string_view keyspace,
                      const std::vector<std::string>& key) const override;

 private:
  const std::string conninfo_;
};

absl::StatusOr<std::string> PostgresTableRows::Get(
    absl::string_view keyspace, const std::vector<std::string>& key) const {
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<pg::Connection> c, Connect(conninfo_));
  TALLY_ASSIGN_OR_RETURN(Table table, ReadTable(*c, keyspace));
  TALLY_RETURN_IF_ERROR(CheckKey(table, keyspace, key));
  std::vector<pg::Param> params;
  for (const std::string& value : key) params.push_back(pg::Param::Text(value));
  // Every value as its text, as PostgreSQL prints it, but arrays,
  // composites and JSON as JSON (Column::structured): the JSON an operator
  // can feed back to put. In table order; one aggregate, since
  // json_build_object takes at most 50 columns.
  std::vector<std::string> values;
  for (size_t i = 0; i < table.columns.size(); ++i) {
    const Column& column = table.columns[i];
    const std::string ref = absl::StrCat("t.", c->QuoteIdentifier(column.name));
    values.push_back(absl::StrFormat("(%d, %s, to_json(%s%s))", i,
                                     c->QuoteLiteral(column.name), ref,
                                     column.structured ? "" : "::text"));
  }
  TALLY_ASSIGN_OR_RETURN(
      pg::Result r,
      c->ExecParams(
          absl::StrFormat("SELECT (SELECT json_object_agg(v.name, v.value "
                          "ORDER BY v.n) FROM (VALUES %s) v(n, name, value))"
                          "::text FROM %s t WHERE %s",
                          absl::StrJoin(values, ", "), table.sql_name,
                          KeyCondition(*c, table, 1)),
          params));
  if (r.rows() == 0) {
    return absl::NotFoundError(absl::StrFormat("no row with key %s in %s",
                                               DescribeKey(key), keyspace));
  }
  return std::string(r.Value(0, 0));
}

absl::Status PostgresTableRows::Put(absl::string_view keyspace,
                                    const std::vector<std::string>& key,
                                    absl::string_view json) const {
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<pg::Connection> c, Connect(conninfo_));
  TALLY_ASSIGN_OR_RETURN(Table table, ReadTable(*c, keyspace));
  TALLY_RETURN_IF_ERROR(CheckKey(table, keyspace, key));
  // The JSON's shape and names first, so that a typo is named rather than
  // silently ignored (json_populate_record skips unknown names).
  const pg::Param json_param = pg::Param::Text(std::string(json));
  TALLY_ASSIGN_OR_RETURN(
      pg::Result shape,
      c->ExecParams("SELECT jsonb_typeof($1::jsonb)", {json_param}));
  if (shape.Value(0, 0) != "object") {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the value for %s must be a JSON object of column -> value, e.g. "
        "'{\"name\":\"Ada\"}'; got a JSON %s",
        keyspace, shape.Value(0, 0)));
  }
  std::vector<bool> named(table.columns.size(), false);
  TALLY_ASSIGN_OR_RETURN(
      pg::Result names,
      c->ExecParams("SELECT jsonb_object_keys($1::jsonb)", {json_param}));
  for (int row = 0; row < names.rows(); ++row) {
    const absl::string_view name = names.Value(row, 0);
    auto it = std::find_if(table.columns.begin(), table.columns.end(),
                           [&](const Column& col) { return col.name == name; });
    if (it == table.columns.end()) {
      std::vector<std::string> all;
      for (const Column& col : table.columns) all.push_back(col.name);
      return absl::InvalidArgumentError(
          absl::StrFormat("%s has no column '%s' (its columns: %s)", keyspace,
                          name, absl::StrJoin(all, ", ")));
    }
    named[it - table.columns.begin()] = true;
  }
  // A key column in the JSON must say what the key values say: a put names
  // one row.
  std::vector<pg::Param> params = {json_param};
  for (const std::string& value : key) params.push_back(pg::Param::Text(value));
  for (size_t i = 0; i < table.key.size(); ++i) {
    const Column& col = table.columns[table.key[i]];
    if (!named[table.key[i]]) continue;
    TALLY_ASSIGN_OR_RETURN(
        pg::Result same,
        c->ExecParams(absl::StrFormat("SELECT ($1::jsonb ->> %s)::%s IS NOT "
                                      "DISTINCT FROM $2::%s, $1::jsonb ->> %s",
                                      c->QuoteLiteral(col.name), col.type,
                                      col.type, c->QuoteLiteral(col.name)),
                      {params[0], params[1 + i]}));
    if (same.Value(0, 0) != "t") {
      return absl::InvalidArgumentError(absl::StrFormat(
          "key column %s is '%s' in the JSON but the key says '%s'; leave it "
          "out of the JSON or make them agree",
          col.name, same.IsNull(0, 1) ? "null" : same.Value(0, 1), key[i]));
    }
  }
  // One statement: update the row if it is there, else insert it. Not
  // INSERT ... ON CONFLICT alone: PostgreSQL checks the proposed row's NOT
  // NULL columns before it finds the conflict, so a put naming only some
  // columns of an existing row would be refused.
  std::vector<std::string> key_object;  // 'k1', $2::text, ...
  std::vector<std::string> key_names;
  std::vector<std::string> key_match;  // t.k1 = r.k1 ...
  for (size_t i = 0; i < table.key.size(); ++i) {
    const Column& col = table.columns[table.key[i]];
    const std::string quoted = c->QuoteIdentifier(col.name);
    key_object.push_back(
        absl::StrFormat("%s, $%d::text", c->QuoteLiteral(col.name), 2 + i));
    key_names.push_back(quoted);
    key_match.push_back(absl::StrCat("t.", quoted, " = r.", quoted));
  }
  std::vector<std::string> columns;
  std::vector<std::string> sets;     // c = r.c
  std::vector<std::string> updates;  // c = EXCLUDED.c
  for (size_t i = 0; i < table.columns.size(); ++i) {
    const bool is_key = table.columns[i].key_position > 0;
    if (!is_key && !named[i]) continue;
    const std::string quoted = c->QuoteIdentifier(table.columns[i].name);
    columns.push_back(quoted);
    if (is_key) continue;
    sets.push_back(absl::StrCat(quoted, " = r.", quoted));
    updates.push_back(absl::StrCat(quoted, " = EXCLUDED.", quoted));
  }
  const std::string column_list = absl::StrJoin(columns, ", ");
  const std::string match = absl::StrJoin(key_match, " AND ");
  const std::string found =
      sets.empty()
          ? absl::StrFormat("SELECT 1 FROM %s t, r WHERE %s", table.sql_name,
                            match)
          : absl::StrFormat("UPDATE %s t SET %s FROM r WHERE %s RETURNING 1",
                            table.sql_name, absl::StrJoin(sets, ", "), match);
  const std::string sql = absl::StrFormat(
      "WITH r AS (SELECT * FROM json_populate_record(NULL::%s, ($1::jsonb || "
      "jsonb_build_object(%s))::json)), found AS (%s) "
      "INSERT INTO %s (%s) SELECT %s FROM r WHERE NOT EXISTS (SELECT FROM "
      "found) ON CONFLICT (%s) DO %s",
      table.sql_name, absl::StrJoin(key_object, ", "), found, table.sql_name,
      column_list, column_list, absl::StrJoin(key_names, ", "),
      updates.empty()
          ? std::string("NOTHING")
          : absl::StrCat("UPDATE SET ", absl::StrJoin(updates, ", ")));
  return c->ExecParams(sql, params).status();
}

absl::Status PostgresTableRows::Delete(
    absl::string_view keyspace, const std::vector<std::string>& key) const {
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<pg::Connection> c, Connect(conninfo_));
  TALLY_ASSIGN_OR_RETURN(Table table, ReadTable(*c, keyspace));
  TALLY_RETURN_IF_ERROR(CheckKey(table, keyspace, key));
  std::vector<pg::Param> params;
  for (const std::string& value : key) params.push_back(pg::Param::Text(value));
  TALLY_ASSIGN_OR_RETURN(
      pg::Result r,
      c->ExecParams(absl::StrFormat("DELETE FROM %s WHERE %s", table.sql_name,
                                    KeyCondition(*c, table, 1)),
                    params));
  if (r.AffectedRows() == 0) {
    return absl::NotFoundError(absl::StrFormat("no row with key %s in %s",
                                               DescribeKey(key), keyspace));
  }
  return absl::OkStatus();
}

}  // namespace

std::unique_ptr<TableRows> NewPostgresTableRows(
    std::string conninfo, std::vector<std::string> tables) {
  return std::make_unique<PostgresTableRows>(std::move(conninfo),
                                             std::move(tables));
}

}  // namespace node
}  // namespace tally
