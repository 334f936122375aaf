#include "pg/schema/table_schema.h"

#include <xxhash.h>

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tree/status_macros.h"

namespace tally {
namespace pg {
namespace {

// SQL's quoting of an identifier (what PQescapeIdentifier does, without a
// connection: the names come from the catalog, already valid UTF-8).
std::string QuoteName(absl::string_view name) {
  std::string out = "\"";
  for (char c : name) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

// The catalog query. Types are formatted with search_path = pg_catalog
// (set around it), so that format_type qualifies every type outside
// pg_catalog and a user type reads alike whatever the session's path.
constexpr absl::string_view kColumnsQuery = R"sql(
SELECT c.oid, c.relkind, a.attname, a.atttypid,
       pg_catalog.format_type(a.atttypid, a.atttypmod),
       coalesce(co.collname, ''), a.attnum, k.pos, ty.typarray,
       a.attidentity
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_catalog.pg_attribute a
  ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
     AND a.attgenerated = ''
LEFT JOIN pg_catalog.pg_collation co ON co.oid = a.attcollation
LEFT JOIN pg_catalog.pg_type ty ON ty.oid = a.atttypid
LEFT JOIN pg_catalog.pg_index i ON i.indrelid = c.oid AND i.indisprimary
LEFT JOIN LATERAL pg_catalog.unnest(i.indkey) WITH ORDINALITY AS k(attnum, pos)
  ON k.attnum = a.attnum AND k.pos <= i.indnkeyatts
WHERE n.nspname = $1 AND c.relname = $2
ORDER BY a.attnum
)sql";

// The columns' rows, and in `*shapes` the shapes of their types (read in
// the same search_path, so that user types print schema-qualified).
absl::StatusOr<Result> ReadColumns(Connection& conn, const std::string& schema,
                                   const std::string& table,
                                   TypeShapes* shapes) {
  TALLY_ASSIGN_OR_RETURN(Result path,
                         conn.Exec("SELECT pg_catalog.current_setting("
                                   "'search_path')"));
  const std::string saved(path.Value(0, 0));
  TALLY_RETURN_IF_ERROR(
      conn.Exec("SELECT pg_catalog.set_config('search_path', 'pg_catalog', "
                "false)")
          .status());
  absl::StatusOr<Result> rows =
      conn.ExecParams(kColumnsQuery, {Param::Text(schema), Param::Text(table)});
  if (rows.ok()) {
    std::vector<Oid> oids;
    for (int r = 0; r < rows->rows(); ++r) {
      Oid oid = 0;
      if (!rows->IsNull(r, 3) && absl::SimpleAtoi(rows->Value(r, 3), &oid)) {
        oids.push_back(oid);
      }
    }
    absl::StatusOr<TypeShapes> read = ReadTypeShapes(conn, oids);
    if (read.ok()) {
      *shapes = *std::move(read);
    } else {
      rows = read.status();
    }
  }
  absl::Status restored =
      conn.ExecParams("SELECT pg_catalog.set_config('search_path', $1, false)",
                      {Param::Text(saved)})
          .status();
  if (!rows.ok()) return rows.status();
  if (!restored.ok()) return restored;
  return rows;
}

// The leaf partitions of partitioned table `relid`, one line each in OID
// order: OID, relfilenode, qualified name. An ATTACH, DETACH, DROP or
// CREATE of a partition changes the lines; a TRUNCATE (and a rewrite:
// VACUUM FULL, CLUSTER, ALTER TABLE ... TYPE) gives the leaf a new
// relfilenode.
absl::StatusOr<std::string> ReadPartitions(Connection& conn, Oid relid) {
  TALLY_ASSIGN_OR_RETURN(
      Result r,
      conn.ExecParams(
          "SELECT c.oid, c.relfilenode, n.nspname || '.' || c.relname FROM "
          "pg_catalog.pg_partition_tree($1::oid) p JOIN pg_catalog.pg_class "
          "c ON c.oid = p.relid JOIN pg_catalog.pg_namespace n ON n.oid = "
          "c.relnamespace WHERE p.isleaf ORDER BY c.oid",
          {Param::Text(absl::StrCat(relid))}));
  std::string out;
  for (int i = 0; i < r.rows(); ++i) {
    absl::StrAppend(&out, r.Value(i, 0), " ", r.Value(i, 1), " ", r.Value(i, 2),
                    "\n");
  }
  return out;
}

}  // namespace

absl::Status SplitQualifiedName(absl::string_view qualified_name,
                                std::string* schema, std::string* table) {
  const size_t dot = qualified_name.find('.');
  if (dot == qualified_name.npos || dot == 0 ||
      dot + 1 == qualified_name.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table \"", qualified_name,
        "\" must be named with its schema, as schema.table (public.users)"));
  }
  *schema = std::string(qualified_name.substr(0, dot));
  *table = std::string(qualified_name.substr(dot + 1));
  return absl::OkStatus();
}

absl::StatusOr<TableSchema> TableSchema::Read(
    Connection& conn, absl::string_view qualified_name) {
  std::string schema, table;
  TALLY_RETURN_IF_ERROR(SplitQualifiedName(qualified_name, &schema, &table));
  TypeShapes shapes;
  absl::StatusOr<Result> rows = ReadColumns(conn, schema, table, &shapes);
  if (!rows.ok()) {
    return absl::Status(
        rows.status().code(),
        absl::StrCat("reading the columns of table ", qualified_name, ": ",
                     rows.status().message()));
  }
  if (rows->rows() == 0) {
    return absl::NotFoundError(
        absl::StrCat("table ", qualified_name, " does not exist"));
  }
  const absl::string_view relkind = rows->Value(0, 1);
  if (relkind != "r" && relkind != "p") {
    return absl::FailedPreconditionError(absl::StrCat(
        qualified_name, " is not a table (pg_class.relkind '", relkind,
        "'): tally keeps the rows of plain and partitioned tables"));
  }
  TableSchema t;
  t.name_ = std::string(qualified_name);
  t.partitioned_ = relkind == "p";
  if (!absl::SimpleAtoi(rows->Value(0, 0), &t.relid_)) {
    return absl::InternalError("pg_class.oid is not a number");
  }
  std::vector<std::pair<int64_t, std::string>> key;
  for (int r = 0; r < rows->rows(); ++r) {
    if (rows->IsNull(r, 2)) continue;  // a table of no columns
    TableColumn col;
    col.name = std::string(rows->Value(r, 2));
    if (!absl::SimpleAtoi(rows->Value(r, 3), &col.type_oid) ||
        !absl::SimpleAtoi(rows->Value(r, 6), &col.attnum) ||
        !absl::SimpleAtoi(rows->Value(r, 8), &col.array_type_oid)) {
      return absl::InternalError(absl::StrCat(
          "catalog row of column ", col.name, " has a non-numeric OID"));
    }
    col.type = std::string(rows->Value(r, 4));
    col.shape = shapes[col.type_oid];
    col.collation = std::string(rows->Value(r, 5));
    col.identity_always = rows->Value(r, 9) == "a";
    if (!rows->IsNull(r, 7)) {
      int64_t pos = 0;
      if (!absl::SimpleAtoi(rows->Value(r, 7), &pos)) {
        return absl::InternalError("primary-key position is not a number");
      }
      key.emplace_back(pos, col.name);
    }
    t.columns_.push_back(std::move(col));
  }
  if (key.empty()) {
    std::string partition_key;
    if (t.partitioned_) {
      // PostgreSQL requires the partition key's columns in the key.
      TALLY_ASSIGN_OR_RETURN(
          Result pk,
          conn.ExecParams("SELECT pg_catalog.pg_get_partkeydef($1)",
                          {Param::Text(std::string(rows->Value(0, 0)))}));
      partition_key = absl::StrCat(
          " (a partitioned table's key must include the columns of its "
          "partition key, ",
          pk.rows() == 1 ? pk.Value(0, 0) : "", ")");
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "table ", qualified_name,
        " has no primary key: tally identifies rows by it (and logical "
        "decoding sends old keys by it); add one, e.g. ALTER TABLE ",
        QuoteName(schema), ".", QuoteName(table),
        " ADD PRIMARY KEY (<columns>)", partition_key));
  }
  std::sort(key.begin(), key.end());
  std::vector<std::string> key_names;
  for (auto& k : key) key_names.push_back(std::move(k.second));
  TALLY_RETURN_IF_ERROR(t.Finish(key_names));
  if (t.partitioned_) {
    TALLY_ASSIGN_OR_RETURN(t.partitions_, ReadPartitions(conn, t.relid_));
    const XXH128_hash_t h =
        XXH3_128bits(t.partitions_.data(), t.partitions_.size());
    t.partition_layout_ =
        absl::StrFormat("%s%016x%016x", kPartitionsPrefix, h.high64, h.low64);
  }
  return t;
}

absl::StatusOr<TableSchema> TableSchema::FromColumns(
    std::string qualified_name, std::vector<TableColumn> columns,
    const std::vector<std::string>& primary_key) {
  std::string schema, table;
  TALLY_RETURN_IF_ERROR(SplitQualifiedName(qualified_name, &schema, &table));
  TableSchema t;
  t.name_ = std::move(qualified_name);
  t.columns_ = std::move(columns);
  TALLY_RETURN_IF_ERROR(t.Finish(primary_key));
  return t;
}

absl::StatusOr<TableSchema> TableSchema::WithColumns(
    absl::Span<const std::string> only,
    absl::Span<const std::string> except) const {
  auto column_named = [&](const std::string& name) {
    return std::find_if(columns_.begin(), columns_.end(),
                        [&](const TableColumn& c) { return c.name == name; });
  };
  auto unknown = [&](const std::string& name) {
    std::vector<std::string> names;
    for (const TableColumn& c : columns_) names.push_back(c.name);
    return absl::InvalidArgumentError(
        absl::StrFormat("%s has no column \"%s\" (its columns: %s)", name_,
                        name, absl::StrJoin(names, ", ")));
  };
  for (const std::string& name : only) {
    if (column_named(name) == columns_.end()) return unknown(name);
  }
  for (const std::string& name : except) {
    auto it = column_named(name);
    if (it == columns_.end()) return unknown(name);
    if (static_cast<size_t>(it - columns_.begin()) < key_columns_) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "column \"%s\" is part of %s's primary key, which is always "
          "compared; it cannot be left out",
          name, name_));
    }
  }
  std::vector<std::string> primary_key;
  TableSchema t = *this;
  t.columns_.clear();
  for (size_t i = 0; i < columns_.size(); ++i) {
    const TableColumn& c = columns_[i];
    const bool key = i < key_columns_;
    if (key) primary_key.push_back(c.name);
    const bool listed = only.empty() || std::find(only.begin(), only.end(),
                                                  c.name) != only.end();
    const bool excepted =
        std::find(except.begin(), except.end(), c.name) != except.end();
    if (key || (listed && !excepted)) t.columns_.push_back(c);
  }
  TALLY_RETURN_IF_ERROR(t.Finish(primary_key));
  return t;
}

absl::Status TableSchema::Finish(const std::vector<std::string>& primary_key) {
  std::string schema, table;
  TALLY_RETURN_IF_ERROR(SplitQualifiedName(name_, &schema, &table));
  quoted_name_ = absl::StrCat(QuoteName(schema), ".", QuoteName(table));
  std::vector<std::string> names;
  for (const TableColumn& c : columns_) names.push_back(c.name);
  std::vector<size_t> key;
  for (const std::string& k : primary_key) {
    auto it = std::find(names.begin(), names.end(), k);
    if (it == names.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "primary-key column \"", k, "\" is not a column of ", name_));
    }
    key.push_back(static_cast<size_t>(it - names.begin()));
  }
  TALLY_ASSIGN_OR_RETURN(std::vector<size_t> order,
                         CanonicalColumnOrder(names, key));
  std::vector<TableColumn> ordered;
  ordered.reserve(order.size());
  for (size_t i : order) ordered.push_back(std::move(columns_[i]));
  columns_ = std::move(ordered);
  key_columns_ = key.size();
  auto shapes = std::make_shared<RowCodec::ColumnShapes>();
  bool rewrites = false;
  for (const TableColumn& c : columns_) {
    const bool walk = c.shape != nullptr && c.shape->rewrites;
    shapes->push_back(walk ? c.shape : nullptr);
    rewrites |= walk;
  }
  column_shapes_ = rewrites ? std::move(shapes) : nullptr;
  description_.clear();
  for (size_t i = 0; i < columns_.size(); ++i) {
    const TableColumn& c = columns_[i];
    if (i < key_columns_) {
      absl::StrAppend(&description_, "key ", i + 1, " ");
    } else {
      absl::StrAppend(&description_, "column ");
    }
    absl::StrAppend(&description_, QuoteName(c.name), " ", c.type);
    if (c.shape != nullptr && (c.shape->rewrites || c.shape->has_composite)) {
      absl::StrAppend(&description_, " as ", DescribeShape(*c.shape));
    }
    if (!c.collation.empty()) {
      absl::StrAppend(&description_, " collate ", QuoteName(c.collation));
    }
    description_.push_back('\n');
  }
  const XXH128_hash_t h =
      XXH3_128bits(description_.data(), description_.size());
  fingerprint_ =
      absl::StrFormat("%s%016x%016x", kFingerprintPrefix, h.high64, h.low64);
  return absl::OkStatus();
}

namespace {
constexpr absl::string_view kOidPrefix = " oid:";

// `stored` without its OID part.
absl::string_view WithoutRelid(absl::string_view stored) {
  const size_t at = stored.find(kOidPrefix);
  return at == absl::string_view::npos ? stored : stored.substr(0, at);
}
}  // namespace

std::string TableSchema::stored_fingerprint() const {
  std::string out = fingerprint_;
  if (partitioned_) absl::StrAppend(&out, " ", partition_layout_);
  if (relid_ != 0) absl::StrAppend(&out, kOidPrefix, relid_);
  return out;
}

absl::string_view TableSchema::FingerprintOfStored(absl::string_view stored) {
  return stored.substr(0, stored.find(' '));
}

Oid TableSchema::RelidOfStored(absl::string_view stored) {
  const size_t at = stored.find(kOidPrefix);
  Oid relid = 0;
  if (at == absl::string_view::npos ||
      !absl::SimpleAtoi(stored.substr(at + kOidPrefix.size()), &relid)) {
    return 0;
  }
  return relid;
}

bool TableSchema::MatchesStored(absl::string_view stored) const {
  std::string mine = fingerprint_;
  if (partitioned_) absl::StrAppend(&mine, " ", partition_layout_);
  if (WithoutRelid(stored) != mine) return false;
  const Oid recorded = RelidOfStored(stored);
  return recorded == 0 || relid_ == 0 || recorded == relid_;
}

size_t TableSchema::ColumnIndex(absl::string_view name) const {
  for (size_t i = 0; i < columns_.size(); ++i) {
    if (columns_[i].name == name) return i;
  }
  return columns_.size();
}

std::string TableSchema::select_list() const {
  return absl::StrJoin(columns_, ", ",
                       [](std::string* out, const TableColumn& c) {
                         out->append(QuoteName(c.name));
                       });
}

std::string TableSchema::quoted_column(size_t i) const {
  return QuoteName(columns_[i].name);
}

std::string TableSchema::key_list() const {
  return absl::StrJoin(columns_.begin(), columns_.begin() + key_columns_, ", ",
                       [](std::string* out, const TableColumn& c) {
                         out->append(QuoteName(c.name));
                       });
}

}  // namespace pg
}  // namespace tally
