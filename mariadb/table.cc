#include "mariadb/table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pg/schema/row_codec.h"
#include "pg/wire/field.h"
#include "tree/status_macros.h"

namespace tally {
namespace mariadb {
namespace {

int64_t IntOr0(const std::optional<std::string>& text) {
  int64_t v = 0;
  if (text.has_value()) (void)absl::SimpleAtoi(*text, &v);
  return v;
}

// Statements per repair transaction are sent in batches of this many rows.
constexpr size_t kRowsPerStatement = 500;

}  // namespace

absl::StatusOr<MariaDbTable> MariaDbTable::Read(
    Connection& conn, absl::string_view qualified_name) {
  const size_t dot = qualified_name.find('.');
  if (dot == absl::string_view::npos || dot == 0 ||
      dot + 1 == qualified_name.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a MariaDB table is named database.table, not '", qualified_name, "'"));
  }
  const std::string db(qualified_name.substr(0, dot));
  const std::string name(qualified_name.substr(dot + 1));
  const std::string where =
      absl::StrCat("TABLE_SCHEMA = ", conn.Quote(db),
                   " AND TABLE_NAME = ", conn.Quote(name));
  TALLY_ASSIGN_OR_RETURN(
      TextRows tables,
      conn.Query(absl::StrCat(
          "SELECT TABLE_TYPE, TABLE_ROWS FROM information_schema.TABLES "
          "WHERE ",
          where)));
  if (tables.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "no table ", qualified_name, " in ", conn.display(),
        " that this user can see (a table the user has no privilege on is "
        "hidden: it needs SELECT on it)"));
  }
  if (tables[0][0].value_or("") != "BASE TABLE") {
    return absl::FailedPreconditionError(absl::StrCat(
        qualified_name, " is not a table (", tables[0][0].value_or(""), ")"));
  }
  MariaDbTable t;
  t.estimated_rows_ = static_cast<uint64_t>(IntOr0(tables[0][1]));
  t.quoted_name_ =
      absl::StrCat(QuoteIdentifier(db), ".", QuoteIdentifier(name));
  TALLY_ASSIGN_OR_RETURN(
      TextRows key_rows,
      conn.Query(absl::StrCat(
          "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE "
          "WHERE ",
          where,
          " AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION")));
  std::vector<std::string> key;
  for (const TextRow& r : key_rows) key.push_back(r[0].value_or(""));
  if (key.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        qualified_name,
        " has no primary key: tally tells rows apart by their key; add one "
        "(ALTER TABLE ... ADD PRIMARY KEY (...))"));
  }
  TALLY_ASSIGN_OR_RETURN(
      TextRows checks,
      conn.Query(absl::StrCat(
          "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS "
          "WHERE CONSTRAINT_SCHEMA = ",
          conn.Quote(db), " AND TABLE_NAME = ", conn.Quote(name))));
  TALLY_ASSIGN_OR_RETURN(
      TextRows column_rows,
      conn.Query(absl::StrCat(
          "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, "
          "CHARACTER_MAXIMUM_LENGTH, NUMERIC_PRECISION, NUMERIC_SCALE, "
          "DATETIME_PRECISION, COLLATION_NAME, EXTRA "
          "FROM information_schema.COLUMNS WHERE ",
          where, " ORDER BY ORDINAL_POSITION")));
  std::vector<pg::TableColumn> columns;
  std::vector<std::pair<std::string, ColumnMapping>> mapped;
  std::vector<std::string> refused;
  for (const TextRow& r : column_rows) {
    const std::string extra = absl::AsciiStrToUpper(r[8].value_or(""));
    if (absl::StrContains(extra, "GENERATED")) {
      t.left_out_.push_back(r[0].value_or(""));
      continue;
    }
    MariaDbColumn c;
    c.name = r[0].value_or("");
    c.data_type = r[1].value_or("");
    c.column_type = r[2].value_or("");
    c.character_maximum_length = IntOr0(r[3]);
    c.numeric_precision = static_cast<int>(IntOr0(r[4]));
    c.numeric_scale = static_cast<int>(IntOr0(r[5]));
    c.datetime_precision = static_cast<int>(IntOr0(r[6]));
    c.collation = r[7].value_or("");
    c.key = std::find(key.begin(), key.end(), c.name) != key.end();
    const std::string json_check =
        absl::StrCat("json_valid(", QuoteIdentifier(c.name), ")");
    for (const TextRow& check : checks) {
      if (check[0].value_or("") == json_check) c.json = true;
    }
    absl::StatusOr<ColumnMapping> m = MapColumn(c);
    if (!m.ok()) {
      refused.push_back(std::string(m.status().message()));
      continue;
    }
    pg::TableColumn column;
    column.name = c.name;
    column.type = m->pg_type;
    column.type_oid = m->pg_oid;
    column.array_type_oid = m->pg_array_oid;
    column.collation = m->pg_collation;
    column.attnum = static_cast<int>(columns.size() + 1);
    columns.push_back(std::move(column));
    mapped.emplace_back(c.name, *std::move(m));
  }
  if (!refused.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("table ", qualified_name,
                     " has columns tally cannot compare with "
                     "PostgreSQL's canonical values: ",
                     absl::StrJoin(refused, "; ")));
  }
  TALLY_ASSIGN_OR_RETURN(
      pg::TableSchema schema,
      pg::TableSchema::FromColumns(std::string(qualified_name),
                                   std::move(columns), key));
  t.mappings_.resize(schema.columns().size());
  std::vector<std::string> names;
  for (auto& [column_name, m] : mapped) {
    t.mappings_[schema.ColumnIndex(column_name)] = m;
  }
  for (const pg::TableColumn& c : schema.columns()) {
    names.push_back(QuoteIdentifier(c.name));
  }
  t.select_list_ = absl::StrJoin(names, ", ");
  t.schema_.emplace(std::move(schema));
  return t;
}

RowConverter MariaDbTable::converter() const {
  std::vector<std::string> names;
  std::vector<size_t> positions;
  for (size_t i = 0; i < schema_->columns().size(); ++i) {
    names.push_back(schema_->columns()[i].name);
    positions.push_back(i);
  }
  return RowConverter(schema_->name(), mappings_, std::move(names),
                      std::move(positions));
}

absl::StatusOr<RowConverter> MariaDbTable::ConverterFor(
    absl::Span<const std::string> row_columns) const {
  std::vector<std::string> names;
  std::vector<size_t> positions;
  for (const pg::TableColumn& c : schema_->columns()) {
    auto it = std::find(row_columns.begin(), row_columns.end(), c.name);
    if (it == row_columns.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "table ", schema_->name(), ": its rows no longer have column ",
          c.name, " (the table changed since it was read)"));
    }
    names.push_back(c.name);
    positions.push_back(static_cast<size_t>(it - row_columns.begin()));
  }
  for (const std::string& name : row_columns) {
    if (schema_->ColumnIndex(name) == schema_->columns().size() &&
        std::find(left_out_.begin(), left_out_.end(), name) ==
            left_out_.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "table ", schema_->name(), ": its rows have a column ", name,
          " it did not have (the table changed since it "
          "was read)"));
    }
  }
  return RowConverter(schema_->name(), mappings_, std::move(names),
                      std::move(positions));
}

absl::Status MariaDbTable::ForEachRow(
    Connection& conn, absl::string_view where,
    const std::function<absl::Status(absl::Span<const pg::Field>)>& fn) const {
  RowConverter convert = converter();
  return conn.Stream(
      absl::StrCat("SELECT ", select_list_, " FROM ", quoted_name_,
                   where.empty() ? "" : absl::StrCat(" WHERE (", where, ")")),
      [&](absl::Span<const Value> row) -> absl::Status {
        TALLY_ASSIGN_OR_RETURN(absl::Span<const pg::Field> fields,
                               convert.Convert(row));
        return fn(fields);
      });
}

absl::StatusOr<pg::TableScan> MariaDbTable::Scan(
    Connection& conn, absl::string_view keyspace, absl::string_view where,
    pg::ScanCounters* counters) const {
  pg::TableScan::Builder builder(keyspace, schema_->codec(), estimated_rows_);
  const uint64_t before = conn.streamed_bytes();
  TALLY_RETURN_IF_ERROR(ForEachRow(
      conn, where, [&](absl::Span<const pg::Field> fields) -> absl::Status {
        TALLY_RETURN_IF_ERROR(builder.Add(fields));
        if (counters != nullptr) {
          counters->rows.store(builder.rows(), std::memory_order_relaxed);
          counters->bytes.store(conn.streamed_bytes() - before,
                                std::memory_order_relaxed);
        }
        return absl::OkStatus();
      }));
  builder.AddBytes(conn.streamed_bytes() - before);
  return std::move(builder).Finish();
}

absl::StatusOr<std::string> MariaDbTable::Literal(
    Connection& conn, size_t column, const pg::Field& field) const {
  if (field.is_null()) return std::string("NULL");
  const ColumnMapping& m = mappings_[column];
  absl::StatusOr<std::string> converted = CanonicalText(m, field.bytes());
  if (!converted.ok()) {
    return absl::Status(converted.status().code(),
                        absl::StrCat("table ", schema_->name(), " column ",
                                     schema_->columns()[column].name, ": ",
                                     converted.status().message()));
  }
  std::string text = *std::move(converted);
  switch (m.type) {
    case CanonicalType::kInt2:
    case CanonicalType::kInt4:
    case CanonicalType::kInt8:
    case CanonicalType::kFloat4:
    case CanonicalType::kFloat8:
    case CanonicalType::kNumeric:
      return text;
    case CanonicalType::kBytea: {
      std::string hex = "X'";
      static constexpr char kHex[] = "0123456789abcdef";
      for (unsigned char c : text) {
        hex.push_back(kHex[c >> 4]);
        hex.push_back(kHex[c & 15]);
      }
      hex.push_back('\'');
      return hex;
    }
    default:
      return conn.Quote(text);
  }
}

absl::StatusOr<std::string> MariaDbTable::KeyCondition(
    Connection& conn, absl::string_view key) const {
  std::string storage;
  std::vector<pg::Field> fields;
  TALLY_RETURN_IF_ERROR(schema_->codec().DecodeKey(key, &storage, &fields));
  std::vector<std::string> parts;
  for (size_t i = 0; i < fields.size(); ++i) {
    TALLY_ASSIGN_OR_RETURN(std::string literal, Literal(conn, i, fields[i]));
    parts.push_back(absl::StrCat(QuoteIdentifier(schema_->columns()[i].name),
                                 " = ", literal));
  }
  return absl::StrCat("(", absl::StrJoin(parts, " AND "), ")");
}

absl::StatusOr<std::vector<pg::CanonicalRow>> MariaDbTable::ReadRowsByKey(
    Connection& conn, absl::Span<const std::string> keys) const {
  std::vector<pg::CanonicalRow> rows;
  const pg::RowCodec codec = schema_->codec();
  RowConverter convert = converter();
  for (size_t at = 0; at < keys.size(); at += kRowsPerStatement) {
    std::vector<std::string> conditions;
    for (size_t i = at; i < keys.size() && i < at + kRowsPerStatement; ++i) {
      TALLY_ASSIGN_OR_RETURN(std::string c, KeyCondition(conn, keys[i]));
      conditions.push_back(std::move(c));
    }
    TALLY_RETURN_IF_ERROR(conn.Stream(
        absl::StrCat("SELECT ", select_list_, " FROM ", quoted_name_, " WHERE ",
                     absl::StrJoin(conditions, " OR ")),
        [&](absl::Span<const Value> row) -> absl::Status {
          TALLY_ASSIGN_OR_RETURN(absl::Span<const pg::Field> fields,
                                 convert.Convert(row));
          pg::CanonicalRow& out = rows.emplace_back();
          return codec.Encode(fields, &out.key, &out.value);
        }));
  }
  return rows;
}

absl::StatusOr<std::vector<std::optional<std::string>>> MariaDbTable::KeyTexts(
    absl::string_view key) const {
  std::string storage;
  std::vector<pg::Field> fields;
  TALLY_RETURN_IF_ERROR(schema_->codec().DecodeKey(key, &storage, &fields));
  std::vector<std::optional<std::string>> texts;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (fields[i].is_null()) {
      texts.push_back(std::nullopt);
      continue;
    }
    TALLY_ASSIGN_OR_RETURN(std::string text,
                           CanonicalText(mappings_[i], fields[i].bytes()));
    texts.push_back(std::move(text));
  }
  return texts;
}

absl::StatusOr<MariaDbTable::WriteCounts> MariaDbTable::WriteRows(
    Connection& conn, absl::Span<const std::string> keys,
    absl::Span<const pg::CanonicalRow> rows) const {
  WriteCounts counts;
  const pg::RowCodec codec = schema_->codec();
  absl::flat_hash_map<std::string, const pg::CanonicalRow*> by_key;
  for (const pg::CanonicalRow& r : rows) by_key[r.key] = &r;
  std::vector<std::string> deletes;
  std::vector<std::string> values;
  for (const std::string& key : keys) {
    auto it = by_key.find(key);
    if (it == by_key.end()) {
      TALLY_ASSIGN_OR_RETURN(std::string c, KeyCondition(conn, key));
      deletes.push_back(std::move(c));
      continue;
    }
    std::string storage;
    std::vector<pg::Field> fields;
    TALLY_RETURN_IF_ERROR(
        codec.Decode(it->second->key, it->second->value, &storage, &fields));
    std::vector<std::string> literals;
    for (size_t i = 0; i < fields.size(); ++i) {
      TALLY_ASSIGN_OR_RETURN(std::string l, Literal(conn, i, fields[i]));
      literals.push_back(std::move(l));
    }
    values.push_back(absl::StrCat("(", absl::StrJoin(literals, ", "), ")"));
  }
  std::vector<std::string> updates;
  for (size_t i = schema_->key_columns(); i < schema_->columns().size(); ++i) {
    const std::string q = QuoteIdentifier(schema_->columns()[i].name);
    updates.push_back(absl::StrCat(q, " = VALUES(", q, ")"));
  }
  // A table of key columns only has nothing to update: the first key
  // column set to itself makes the statement valid and changes nothing.
  if (updates.empty()) {
    const std::string q = QuoteIdentifier(schema_->columns()[0].name);
    updates.push_back(absl::StrCat(q, " = ", q));
  }
  TALLY_RETURN_IF_ERROR(conn.Exec("START TRANSACTION"));
  auto fail = [&](absl::Status s) {
    conn.Exec("ROLLBACK").IgnoreError();
    return s;
  };
  for (size_t at = 0; at < values.size(); at += kRowsPerStatement) {
    std::vector<std::string> batch(
        values.begin() + at,
        values.begin() + std::min(values.size(), at + kRowsPerStatement));
    absl::Status s = conn.Exec(absl::StrCat(
        "INSERT INTO ", quoted_name_, " (", select_list_, ") VALUES ",
        absl::StrJoin(batch, ", "), " ON DUPLICATE KEY UPDATE ",
        absl::StrJoin(updates, ", ")));
    if (!s.ok()) return fail(s);
    counts.upserted += batch.size();
  }
  for (size_t at = 0; at < deletes.size(); at += kRowsPerStatement) {
    std::vector<std::string> batch(
        deletes.begin() + at,
        deletes.begin() + std::min(deletes.size(), at + kRowsPerStatement));
    absl::Status s = conn.Exec(absl::StrCat(
        "DELETE FROM ", quoted_name_, " WHERE ", absl::StrJoin(batch, " OR ")));
    if (!s.ok()) return fail(s);
    counts.deleted += batch.size();
  }
  TALLY_RETURN_IF_ERROR(conn.Exec("COMMIT"));
  return counts;
}

}  // namespace mariadb
}  // namespace tally
