#include "pg/sidecar/apply/apply_sql.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tally {
namespace pg {
namespace {

constexpr absl::string_view kStageColumns = "i, op, ets, eor";

std::string Quote(absl::string_view name) {
  std::string out = "\"";
  for (char c : name) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

std::string StageColumn(size_t i) { return absl::StrCat("c", i); }

// `a."k1" = b.c0 AND ...` over the key columns; `b` is the staging table.
std::string KeyMatch(const TableSchema& t, absl::string_view a,
                     absl::string_view b) {
  std::vector<std::string> parts;
  for (size_t k = 0; k < t.key_columns(); ++k) {
    parts.push_back(absl::StrCat(a, ".", Quote(t.columns()[k].name), " = ", b,
                                 ".", StageColumn(k)));
  }
  return absl::StrJoin(parts, " AND ");
}

// The compare-and-swap: the row version `t` is still the one whose token
// the staging row `s` expects. One commit-timestamp lookup per row.
constexpr absl::string_view kCas =
    "(SELECT x.timestamp IS NOT DISTINCT FROM s.ets AND x.roident IS NOT "
    "DISTINCT FROM s.eor FROM "
    "pg_catalog.pg_xact_commit_timestamp_origin(t.xmin) AS x)";

// Milliseconds, at least 1 (0 would mean no timeout).
int64_t Millis(absl::Duration d) {
  return std::max<int64_t>(1, absl::ToInt64Milliseconds(d));
}

}  // namespace

std::string CreateStageSql(const TableSchema& t, absl::string_view temp) {
  std::string sql = absl::StrCat("CREATE TEMP TABLE IF NOT EXISTS ", temp,
                                 " (i int4, op \"char\", ets timestamptz, "
                                 "eor oid");
  for (size_t c = 0; c < t.columns().size(); ++c) {
    const TableColumn& col = t.columns()[c];
    absl::StrAppend(&sql, ", ", StageColumn(c), " ", col.type);
    if (!col.collation.empty()) {
      absl::StrAppend(&sql, " COLLATE ", Quote(col.collation));
    }
  }
  absl::StrAppend(&sql, ") ON COMMIT DELETE ROWS");
  return sql;
}

std::string CopyStageSql(const TableSchema& t, absl::string_view temp) {
  std::vector<std::string> cols;
  for (size_t c = 0; c < t.columns().size(); ++c) {
    cols.push_back(StageColumn(c));
  }
  return absl::StrCat("COPY pg_temp.", temp, " (", kStageColumns, ", ",
                      absl::StrJoin(cols, ", "),
                      ") FROM STDIN (FORMAT binary)");
}

// Data-modifying CTEs share one snapshot, which is fine: a key is staged at
// most once. `lk` locks the rows to update or delete that no other
// transaction holds and whose token is still the expected one (a row an
// application changed since is refused without being locked: a hot row is
// not held from the applications for nothing); a row locked elsewhere is
// `busy` when the snapshot sees it with the expected token. The UPDATE and
// DELETE then touch locked rows only (an UPDATE that meets a row version newer
// than its snapshot rechecks the CAS on the newest one, which `lk` locked: no
// wait). An insert whose key the snapshot sees is refused without being tried:
// ON CONFLICT would wait for an application's uncommitted update of that row.
std::string MergeSql(const TableSchema& t, absl::string_view temp) {
  const std::string stage = absl::StrCat("pg_temp.", temp);
  const std::string table = t.quoted_name();
  std::vector<std::string> set, all, values, ins_keys;
  for (size_t c = 0; c < t.columns().size(); ++c) {
    const std::string name = Quote(t.columns()[c].name);
    all.push_back(name);
    values.push_back(absl::StrCat("s.", StageColumn(c)));
    // An identity column GENERATED ALWAYS can only be updated to DEFAULT:
    // it keeps the value it was inserted with (its source's).
    if (c >= t.key_columns() && !t.columns()[c].identity_always) {
      set.push_back(absl::StrCat(name, " = s.", StageColumn(c)));
    }
  }
  if (set.empty()) {
    // A table of key columns only: rewrite a key column to itself, so that
    // the row version (and its token) is the apply's.
    for (size_t k = 0; k < t.key_columns() && set.empty(); ++k) {
      if (t.columns()[k].identity_always) continue;
      set.push_back(
          absl::StrCat(Quote(t.columns()[k].name), " = s.", StageColumn(k)));
    }
  }
  if (set.empty()) {
    // Only identity columns GENERATED ALWAYS, which may not be updated:
    // PostgreSQL refuses the update, and the apply reports the rows.
    set.push_back(
        absl::StrCat(Quote(t.columns()[0].name), " = s.", StageColumn(0)));
  }
  for (size_t k = 0; k < t.key_columns(); ++k) {
    ins_keys.push_back(absl::StrCat("ins.", Quote(t.columns()[k].name), " = s.",
                                    StageColumn(k)));
  }
  const std::string exists =
      absl::StrCat("EXISTS (SELECT 1 FROM ", table, " AS t WHERE ",
                   KeyMatch(t, "t", "s"), ")");
  return absl::StrCat(
      "WITH lk AS MATERIALIZED (SELECT s.i FROM ", stage, " AS s JOIN ", table,
      " AS t ON ", KeyMatch(t, "t", "s"), " WHERE s.op IN ('u', 'd') AND ",
      kCas, " FOR UPDATE OF t SKIP LOCKED), ", "busy AS (SELECT s.i FROM ",
      stage,
      " AS s WHERE s.op IN ('u', 'd') AND s.i NOT IN (SELECT i FROM lk) AND "
      "EXISTS (SELECT 1 FROM ",
      table, " AS t WHERE ", KeyMatch(t, "t", "s"), " AND ", kCas, ")), ",
      "upd AS (UPDATE ", table, " AS t SET ", absl::StrJoin(set, ", "),
      " FROM ", stage, " AS s WHERE s.op = 'u' AND s.i IN (SELECT i FROM lk) ",
      "AND ", KeyMatch(t, "t", "s"), " AND ", kCas, " RETURNING s.i), ",
      "del AS (DELETE FROM ", table, " AS t USING ", stage,
      " AS s WHERE s.op = 'd' AND s.i IN (SELECT i FROM lk) AND ",
      KeyMatch(t, "t", "s"), " AND ", kCas, " RETURNING s.i), ",
      "ins AS (INSERT INTO ", table, " AS t (", absl::StrJoin(all, ", "),
      ") OVERRIDING SYSTEM VALUE SELECT ", absl::StrJoin(values, ", "),
      " FROM ", stage, " AS s WHERE s.op = 'i' AND NOT ", exists,
      " ON CONFLICT DO NOTHING RETURNING ",
      absl::StrJoin(all.begin(), all.begin() + t.key_columns(), ", "), "), ",
      "absent AS (SELECT s.i FROM ", stage, " AS s WHERE s.op = 'n' AND NOT ",
      exists, ") ",
      "SELECT 'a', i FROM upd UNION ALL SELECT 'a', i FROM del UNION ALL "
      "SELECT 'a', s.i FROM ins JOIN ",
      stage, " AS s ON s.op = 'i' AND ", absl::StrJoin(ins_keys, " AND "),
      " UNION ALL SELECT 'a', i FROM absent UNION ALL SELECT 'b', i FROM busy");
}

std::vector<std::string> ApplySessionSettings(absl::Duration lock_timeout) {
  return {"SET session_replication_role = replica",
          absl::StrCat("SET lock_timeout = ", Millis(lock_timeout))};
}

std::string ApplyDeadlockTimeoutSql(absl::Duration timeout) {
  return absl::StrCat("SET deadlock_timeout = ", Millis(timeout));
}

}  // namespace pg
}  // namespace tally
