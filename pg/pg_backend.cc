#include "pg/pg_backend.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "pg/apply_message.h"
#include "pg/binary_copy.h"
#include "pg/internal/big_endian.h"
#include "pg/lsn.h"
#include "pg/row_codec.h"
#include "tree/status_macros.h"

namespace tally {
namespace pg {
namespace {

using storage::RowChange;
using storage::RowLocation;
using storage::RowOutcome;

// PostgreSQL's epoch, 2000-01-01 00:00:00 UTC, in Unix microseconds.
constexpr int64_t kPostgresEpochUnixMicros = int64_t{946684800} * 1000000;

constexpr Oid kByteaOid = 17;
constexpr Oid kTimestamptzOid = 1184;

// The staging table's fixed columns, before the table's own (c0, c1, ...).
// op: 'u' update under the CAS, 'd' delete under the CAS, 'i' insert if
// absent, 'n' nothing to write, applied if the row is absent.
constexpr absl::string_view kStageColumns = "i, op, ets, eor";

// Big-endian into a buffer the caller holds (the staging writes millions).
void StoreBigEndian32(char* at, uint32_t v) {
  for (int i = 0; i < 4; ++i) at[i] = static_cast<char>(v >> (24 - 8 * i));
}
void StoreBigEndian64(char* at, uint64_t v) {
  for (int i = 0; i < 8; ++i) at[i] = static_cast<char>(v >> (56 - 8 * i));
}

std::string Int8Bytes(int64_t v) {
  std::string s;
  internal::PutBigEndian64(&s, static_cast<uint64_t>(v));
  return s;
}

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

// One element of a canonical key in the apply's staging order (KeyLess):
// a NULL (tag 0), a field's bytes (1), or the raw rest of bytes that are
// not the framing (2; such a row is refused later, but must still sort).
struct KeyPart {
  int tag = 0;
  absl::string_view bytes;
};

// Takes the next element off `rest`; false when it is empty.
bool NextKeyPart(absl::string_view* rest, KeyPart* part) {
  if (rest->empty()) return false;
  if (rest->size() >= 4) {
    const uint32_t length = internal::LoadBigEndian32(rest->data());
    if (length == kNullFieldLength) {
      *part = KeyPart{0, {}};
      rest->remove_prefix(4);
      return true;
    }
    if (rest->size() - 4 >= length) {
      *part = KeyPart{1, rest->substr(4, length)};
      rest->remove_prefix(4 + length);
      return true;
    }
  }
  *part = KeyPart{2, *rest};
  *rest = absl::string_view();
  return true;
}

// Orders canonical keys field by field, each field's send() bytes
// compared bytewise: the primary key's order for non-negative integers and
// C-collated text, and close to it for other types. A strict weak order on
// any bytes (each key maps to its own sequence of parts).
bool KeyLess(absl::string_view a, absl::string_view b) {
  KeyPart pa, pb;
  while (true) {
    const bool has_a = NextKeyPart(&a, &pa);
    const bool has_b = NextKeyPart(&b, &pb);
    if (!has_a || !has_b) return !has_a && has_b;
    if (pa.tag != pb.tag) return pa.tag < pb.tag;
    const int c = pa.bytes.compare(pb.bytes);
    if (c != 0) return c < 0;
  }
}

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

// One statement for all staged rows of a table; returns the staging row
// indexes it applied. Data-modifying CTEs share one snapshot, which is fine:
// a key is staged at most once.
std::string MergeSql(const TableSchema& t, absl::string_view temp) {
  const std::string stage = absl::StrCat("pg_temp.", temp);
  const std::string table = t.quoted_name();
  std::vector<std::string> set, all, values, ins_keys;
  for (size_t c = 0; c < t.columns().size(); ++c) {
    const std::string name = Quote(t.columns()[c].name);
    all.push_back(name);
    values.push_back(absl::StrCat("s.", StageColumn(c)));
    if (c >= t.key_columns()) {
      set.push_back(absl::StrCat(name, " = s.", StageColumn(c)));
    }
  }
  if (set.empty()) {
    // A table of key columns only: rewrite the key to itself, so that the
    // row version (and its token) is the apply's.
    for (size_t k = 0; k < t.key_columns(); ++k) {
      set.push_back(
          absl::StrCat(Quote(t.columns()[k].name), " = s.", StageColumn(k)));
    }
  }
  for (size_t k = 0; k < t.key_columns(); ++k) {
    ins_keys.push_back(absl::StrCat("ins.", Quote(t.columns()[k].name), " = s.",
                                    StageColumn(k)));
  }
  return absl::StrCat(
      "WITH upd AS (UPDATE ", table, " AS t SET ", absl::StrJoin(set, ", "),
      " FROM ", stage, " AS s WHERE s.op = 'u' AND ", KeyMatch(t, "t", "s"),
      " AND ", kCas, " RETURNING s.i), ", "del AS (DELETE FROM ", table,
      " AS t USING ", stage, " AS s WHERE s.op = 'd' AND ",
      KeyMatch(t, "t", "s"), " AND ", kCas, " RETURNING s.i), ",
      "ins AS (INSERT INTO ", table, " AS t (", absl::StrJoin(all, ", "),
      ") SELECT ", absl::StrJoin(values, ", "), " FROM ", stage,
      " AS s WHERE s.op = 'i' ON CONFLICT DO NOTHING RETURNING ",
      absl::StrJoin(all.begin(), all.begin() + t.key_columns(), ", "), "), ",
      "absent AS (SELECT s.i FROM ", stage,
      " AS s WHERE s.op = 'n' AND NOT EXISTS (SELECT 1 FROM ", table,
      " AS t WHERE ", KeyMatch(t, "t", "s"), ")) ",
      "SELECT i FROM upd UNION ALL SELECT i FROM del UNION ALL SELECT s.i "
      "FROM ins JOIN ",
      stage, " AS s ON s.op = 'i' AND ", absl::StrJoin(ins_keys, " AND "),
      " UNION ALL SELECT i FROM absent");
}

// Rows by key: the key columns arrive as one array parameter each.
std::string ReadSql(const TableSchema& t) {
  std::vector<std::string> cols, keys, arrays;
  for (size_t c = 0; c < t.columns().size(); ++c) {
    cols.push_back(absl::StrCat("t.", Quote(t.columns()[c].name)));
  }
  for (size_t k = 0; k < t.key_columns(); ++k) {
    keys.push_back(cols[k]);
    // ROWS FROM zips the arrays (the multi-argument unnest sugar exists
    // only unqualified).
    arrays.push_back(absl::StrCat("pg_catalog.unnest($", k + 1,
                                  "::", t.columns()[k].type, "[])"));
  }
  return absl::StrCat(
      "SELECT ", absl::StrJoin(cols, ", "), ", x.timestamp, x.roident FROM ",
      t.quoted_name(),
      " AS t CROSS JOIN LATERAL "
      "pg_catalog.pg_xact_commit_timestamp_origin(t.xmin) AS x WHERE (",
      absl::StrJoin(keys, ", "), ") IN (SELECT * FROM ROWS FROM (",
      absl::StrJoin(arrays, ", "), "))");
}

// The binary form of a one-dimensional array without NULLs.
std::string BinaryArray(Oid element_type,
                        const std::vector<absl::string_view>& elements) {
  std::string out;
  internal::PutBigEndian32(&out, 1);  // dimensions
  internal::PutBigEndian32(&out, 0);  // no NULLs
  internal::PutBigEndian32(&out, element_type);
  internal::PutBigEndian32(&out, static_cast<uint32_t>(elements.size()));
  internal::PutBigEndian32(&out, 1);  // lower bound
  for (absl::string_view e : elements) {
    internal::PutBigEndian32(&out, static_cast<uint32_t>(e.size()));
    out.append(e.data(), e.size());
  }
  return out;
}

// The answer for a row whose table version is not the one the index
// describes (`want`): `found` is the token of the row the read saw, null
// when it saw none. A row the read sees at an OLDER commit than the
// index's is the index's own transaction not visible yet (the capture
// indexes a transaction when the server decodes it, just before other
// sessions see it): kUnavailable, read again shortly. A row at a newer
// commit was changed since, and the capture indexes that change:
// kAborted, superseded. A row the read does not see is either (deleted
// since, or inserted by a transaction not visible yet): kUnavailable, as
// the store's index soon holds the delete if it was one. Commit times of
// successive versions of one row increase (the later writer waited for
// the earlier commit); only a database clock behind tallyd's, for rows
// tallyd applied, can make a newer version look older, which costs a
// reader its bounded wait and nothing else.
absl::Status NotTheIndexedRow(absl::string_view table, const RowToken& want,
                              const RowToken* found) {
  if (found == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "row of keyspace ", table,
        " is not in the table as this read sees it: deleted since it was "
        "indexed (the capture indexes the delete), or its commit is not "
        "visible yet"));
  }
  const bool older = found->commit_time_us.has_value() &&
                     want.commit_time_us.has_value() &&
                     *found->commit_time_us < *want.commit_time_us;
  if (older) {
    return absl::UnavailableError(absl::StrCat(
        "row of keyspace ", table,
        " is still an older version than the index's in this read (its "
        "commit is not visible yet); read it again"));
  }
  return absl::AbortedError(absl::StrCat(
      "row of keyspace ", table,
      " changed in the table since it was indexed; the capture indexes the "
      "change"));
}

int64_t NowStamp() {
  return absl::ToUnixMicros(absl::Now()) - kPostgresEpochUnixMicros;
}

absl::Status WithContext(const absl::Status& s, absl::string_view what) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
}

}  // namespace

PgBackend::PgBackend(PgBackendOptions options, OriginId origin_id,
                     std::vector<TablePtr> tables,
                     std::unique_ptr<Connection> apply,
                     std::unique_ptr<Connection> reader, int64_t last_stamp)
    : options_(std::move(options)),
      origin_id_(origin_id),
      table_index_([&tables] {
        absl::flat_hash_map<std::string, size_t> index;
        for (size_t i = 0; i < tables.size(); ++i) {
          index[tables[i]->schema.name()] = i;
        }
        return index;
      }()),
      tables_(std::move(tables)),
      apply_(std::move(apply)),
      last_stamp_(last_stamp),
      reader_(std::move(reader)) {}

PgBackend::~PgBackend() = default;

absl::StatusOr<std::unique_ptr<Connection>> PgBackend::OpenApply(
    const PgBackendOptions& options) {
  ConnectOptions connect = options.connect;
  connect.application_name = "tally apply";
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<Connection> c,
                         Connection::Open(options.conninfo, connect));
  // One origin per node: another session may still hold it for a moment
  // after the previous process's connection closed (PG-DESIGN §1.5).
  const absl::Time deadline = absl::Now() + options.origin_busy_wait;
  while (true) {
    absl::Status s =
        c->ExecParams(
             "SELECT pg_catalog.pg_replication_origin_session_setup($1)",
             {Param::Text(options.origin_name)})
            .status();
    if (s.ok()) break;
    if (!absl::IsFailedPrecondition(s) || absl::Now() >= deadline) {
      return WithContext(s, absl::StrCat("setting up replication origin ",
                                         options.origin_name));
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  return c;
}

absl::StatusOr<PgBackend::TablePtr> PgBackend::ReadTableSchema(
    Connection& conn, absl::string_view name, size_t index) {
  TALLY_ASSIGN_OR_RETURN(TableSchema schema, TableSchema::Read(conn, name));
  auto t = std::make_shared<Table>(
      Table{std::move(schema), absl::StrCat("tally_apply_", index), "", ""});
  t->merge_sql = MergeSql(t->schema, t->temp_name);
  t->read_sql = ReadSql(t->schema);
  return TablePtr(std::move(t));
}

absl::StatusOr<std::unique_ptr<PgBackend>> PgBackend::Open(
    const PgBackendOptions& options) {
  if (options.origin_name.empty()) {
    return absl::InvalidArgumentError("the apply origin needs a name");
  }
  ConnectOptions connect = options.connect;
  connect.application_name = "tally reader";
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<Connection> reader,
                         Connection::Open(options.conninfo, connect));
  // Create the origin if missing (a concurrent creator is fine: the name is
  // unique, and either one wins).
  absl::Status created =
      reader
          ->ExecParams(
              "SELECT pg_catalog.pg_replication_origin_create($1) WHERE NOT "
              "EXISTS (SELECT 1 FROM pg_catalog.pg_replication_origin WHERE "
              "roname = $1)",
              {Param::Text(options.origin_name)})
          .status();
  if (!created.ok() && !absl::IsAlreadyExists(created)) {
    return WithContext(created, absl::StrCat("creating replication origin ",
                                             options.origin_name));
  }
  TALLY_ASSIGN_OR_RETURN(
      Result origin,
      reader->ExecParams(
          "SELECT roident, pg_catalog.pg_replication_origin_progress($1, "
          "true) FROM pg_catalog.pg_replication_origin WHERE roname = $1",
          {Param::Text(options.origin_name)}));
  uint32_t roident = 0;
  if (origin.rows() != 1 || !absl::SimpleAtoi(origin.Value(0, 0), &roident) ||
      roident > 0xffff) {
    return absl::InternalError(absl::StrCat(
        "replication origin ", options.origin_name, " has no usable id"));
  }
  int64_t last_stamp = 0;
  if (!origin.IsNull(0, 1)) {
    TALLY_ASSIGN_OR_RETURN(Lsn progress, ParseLsn(origin.Value(0, 1)));
    last_stamp = static_cast<int64_t>(progress);
  }

  std::vector<TablePtr> tables;
  for (size_t i = 0; i < options.tables.size(); ++i) {
    TALLY_ASSIGN_OR_RETURN(TablePtr t,
                           ReadTableSchema(*reader, options.tables[i], i));
    tables.push_back(std::move(t));
  }
  TALLY_ASSIGN_OR_RETURN(std::unique_ptr<Connection> apply, OpenApply(options));
  return std::unique_ptr<PgBackend>(new PgBackend(
      options, OriginId{static_cast<uint16_t>(roident)}, std::move(tables),
      std::move(apply), std::move(reader), last_stamp));
}

std::vector<PgBackend::TablePtr> PgBackend::Tables() const {
  absl::MutexLock lock(&tables_mu_);
  return tables_;
}

std::shared_ptr<const TableSchema> PgBackend::schema(
    absl::string_view keyspace) const {
  auto it = table_index_.find(keyspace);
  if (it == table_index_.end()) return nullptr;
  absl::MutexLock lock(&tables_mu_);
  const TablePtr& t = tables_[it->second];
  return std::shared_ptr<const TableSchema>(t, &t->schema);
}

absl::Status PgBackend::ReloadSchema(absl::string_view keyspace) {
  auto it = table_index_.find(keyspace);
  if (it == table_index_.end()) {
    return absl::NotFoundError(
        absl::StrCat("keyspace ", keyspace, " is not a table this node keeps"));
  }
  absl::StatusOr<TablePtr> t;
  {
    absl::MutexLock lock(&read_mu_);
    if (reader_ == nullptr || !reader_->healthy()) {
      ConnectOptions connect = options_.connect;
      connect.application_name = "tally reader";
      TALLY_ASSIGN_OR_RETURN(reader_,
                             Connection::Open(options_.conninfo, connect));
    }
    t = ReadTableSchema(*reader_, keyspace, it->second);
  }
  if (!t.ok()) return t.status();
  absl::MutexLock lock(&tables_mu_);
  tables_[it->second] = *std::move(t);
  return absl::OkStatus();
}

absl::Status PgBackend::EnsureStage(const Table& table) {
  auto it = staged_.find(table.temp_name);
  if (it != staged_.end()) {
    if (it->second == table.schema.fingerprint()) return absl::OkStatus();
    // Made on this connection for the table's previous schema.
    TALLY_RETURN_IF_ERROR(
        apply_->Exec(absl::StrCat("DROP TABLE pg_temp.", table.temp_name))
            .status());
  }
  TALLY_RETURN_IF_ERROR(
      apply_->Exec(CreateStageSql(table.schema, table.temp_name)).status());
  staged_[table.temp_name] = table.schema.fingerprint();
  return absl::OkStatus();
}

int64_t PgBackend::last_stamp() const {
  absl::MutexLock lock(&apply_mu_);
  return last_stamp_;
}

absl::StatusOr<std::string> PgBackend::SchemaFingerprint(
    absl::string_view keyspace) const {
  std::shared_ptr<const TableSchema> t = schema(keyspace);
  if (t == nullptr) return absl::StrCat(kFingerprintPrefix, "not-kept");
  return t->fingerprint();
}

std::string PgBackend::SchemaDescription(absl::string_view keyspace) const {
  std::shared_ptr<const TableSchema> t = schema(keyspace);
  return t == nullptr ? "" : t->description();
}

absl::Status PgBackend::ApplyRows(absl::Span<const RowChange> rows,
                                  std::vector<RowOutcome>* outcomes) {
  absl::MutexLock lock(&apply_mu_);
  outcomes->assign(rows.size(), RowOutcome{});
  if (rows.empty()) return absl::OkStatus();
  bool began = false;
  absl::Status s = ApplyLocked(rows, outcomes, &began);
  if (!s.ok()) {
    outcomes->assign(rows.size(), RowOutcome{});
    if (began && apply_ != nullptr && apply_->healthy()) {
      (void)apply_->Exec("ROLLBACK");
    }
  }
  return s;
}

absl::Status PgBackend::ApplyLocked(absl::Span<const RowChange> rows,
                                    std::vector<RowOutcome>* outcomes,
                                    bool* began) {
  // Stage every row before touching the database: a row that is not the
  // table's encoding fails the commit with nothing sent.
  const std::vector<TablePtr> tables = Tables();
  std::vector<std::vector<uint32_t>> order(tables.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    auto it = table_index_.find(rows[i].row.keyspace);
    if (it == table_index_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("keyspace ", rows[i].row.keyspace,
                       " is not a table this node keeps (--table)"));
    }
    order[it->second].push_back(static_cast<uint32_t>(i));
  }
  std::vector<CopyBinaryWriter> stages(tables.size());
  std::vector<bool> used(tables.size(), false);
  std::vector<Field> fields;
  std::string local_bytes;
  std::vector<Field> staged;
  for (size_t t = 0; t < tables.size(); ++t) {
    // In key order: the statement probes the primary key and the heap in
    // the staging table's order, and sorted probes find the pages the
    // previous one read still in the CPU's cache (in the store's order,
    // by token, every probe missed it).
    std::sort(order[t].begin(), order[t].end(), [&](uint32_t a, uint32_t b) {
      return KeyLess(rows[a].row.key, rows[b].row.key);
    });
    const Table& table = *tables[t];
    const RowCodec codec = table.schema.codec();
    for (uint32_t i : order[t]) {
      const RowChange& row = rows[i];
      const bool present = row.expected.exists && !row.expected.deleted;
      char op;
      if (row.kind == RowChange::Kind::kPut) {
        op = present ? 'u' : 'i';
      } else {
        op = present ? 'd' : 'n';
      }
      std::optional<RowToken> expected;
      if (op == 'u' || op == 'd') {
        absl::StatusOr<RowToken> token = RowToken::Decode(row.expected.payload);
        // No token (an unreadable record): the row cannot be compared, so
        // it is refused rather than written blind.
        if (!token.ok()) continue;
        expected = *token;
      }
      absl::Status decoded =
          op == 'u' || op == 'i'
              ? codec.Decode(row.row.key, row.value, &local_bytes, &fields)
              : codec.DecodeKey(row.row.key, &local_bytes, &fields);
      if (!decoded.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("a row of keyspace ", row.row.keyspace,
                         " is not the table's encoding: ", decoded.message()));
      }
      fields.resize(codec.columns(), Field::Null());
      // The fixed columns' bytes live on the stack until AddRow copies
      // them: no allocation per row.
      char index[4], ets[8], eor[4];
      StoreBigEndian32(index, i);
      staged.assign({Field::Of(absl::string_view(index, 4)),
                     Field::Of(absl::string_view(&op, 1)), Field::Null(),
                     Field::Null()});
      if (expected && expected->commit_time_us) {
        StoreBigEndian64(ets, static_cast<uint64_t>(*expected->commit_time_us));
        StoreBigEndian32(eor, expected->origin.value);
        staged[2] = Field::Of(absl::string_view(ets, 8));
        staged[3] = Field::Of(absl::string_view(eor, 4));
      }
      staged.insert(staged.end(), fields.begin(), fields.end());
      TALLY_RETURN_IF_ERROR(stages[t].AddRow(staged));
      used[t] = true;
    }
  }

  if (apply_ == nullptr || !apply_->healthy()) {
    apply_.reset();
    staged_.clear();
    TALLY_ASSIGN_OR_RETURN(apply_, OpenApply(options_));
  }
  for (size_t t = 0; t < tables.size(); ++t) {
    if (used[t]) TALLY_RETURN_IF_ERROR(EnsureStage(*tables[t]));
  }
  const int64_t stamp = std::max(NowStamp(), last_stamp_ + 1);
  *began = true;
  TALLY_RETURN_IF_ERROR(apply_->Exec("BEGIN").status());
  TALLY_RETURN_IF_ERROR(
      apply_
          ->ExecParams(
              "SELECT pg_catalog.pg_replication_origin_xact_setup($1::pg_lsn, "
              "$2::timestamptz)",
              {Param::Text(FormatLsn(static_cast<Lsn>(stamp))),
               Param::Binary(Int8Bytes(stamp), kTimestamptzOid)})
          .status());
  ApplyMessage message;
  message.apply_sequence = static_cast<uint64_t>(stamp);
  message.token = RowToken{stamp, origin_id_};
  for (size_t t = 0; t < tables.size(); ++t) {
    if (!used[t]) continue;
    const Table& table = *tables[t];
    stages[t].Finish();
    TALLY_RETURN_IF_ERROR(
        WithContext(apply_
                        ->CopyIn(CopyStageSql(table.schema, table.temp_name),
                                 stages[t].TakeBuffered())
                        .status(),
                    absl::StrCat("staging rows of ", table.schema.name())));
    absl::StatusOr<Result> applied = apply_->Exec(table.merge_sql);
    if (!applied.ok()) {
      return WithContext(applied.status(), absl::StrCat("applying rows to ",
                                                        table.schema.name()));
    }
    for (int r = 0; r < applied->rows(); ++r) {
      size_t i = 0;
      if (!absl::SimpleAtoi(applied->Value(r, 0), &i) || i >= rows.size()) {
        return absl::InternalError("the apply returned a row it was not given");
      }
      (*outcomes)[i].applied = true;
    }
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!(*outcomes)[i].applied) continue;
    const RowChange& row = rows[i];
    AppliedRow a;
    a.keyspace = std::string(row.row.keyspace);
    a.key = std::string(row.row.key);
    a.version = *row.version;
    a.deleted = row.kind != RowChange::Kind::kPut;
    a.erased = row.kind == RowChange::Kind::kErase;
    message.rows.push_back(std::move(a));
  }
  if (!message.rows.empty()) {
    TALLY_RETURN_IF_ERROR(
        apply_
            ->ExecParams(
                "SELECT pg_catalog.pg_logical_emit_message(true, $1, $2)",
                {Param::Text(std::string(kApplyMessagePrefix)),
                 Param::Binary(EncodeApplyMessage(message), kByteaOid)})
            .status());
  }
  ReachFaultPoint(options_.fault_points, FaultPoint::kApplyBeforePgCommit);
  TALLY_RETURN_IF_ERROR(
      WithContext(apply_->Exec("COMMIT").status(), "committing an apply"));
  ReachFaultPoint(options_.fault_points, FaultPoint::kApplyAfterPgCommit);
  last_stamp_ = stamp;
  const std::string token = message.token.Encode();
  for (size_t i = 0; i < rows.size(); ++i) {
    RowOutcome& o = (*outcomes)[i];
    // A tombstone keeps no token: no PostgreSQL row describes it.
    if (o.applied && rows[i].kind == RowChange::Kind::kPut) o.payload = token;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> PgBackend::ReadValue(
    const RowLocation& row, absl::string_view stored_payload) const {
  TALLY_ASSIGN_OR_RETURN(auto values, ReadValues({row}, {stored_payload}));
  return std::move(values[0]);
}

absl::StatusOr<std::vector<absl::StatusOr<std::string>>> PgBackend::ReadValues(
    absl::Span<const RowLocation> rows,
    absl::Span<const absl::string_view> stored_payloads) const {
  if (rows.size() != stored_payloads.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReadValues given ", rows.size(), " rows and ",
                     stored_payloads.size(), " payloads"));
  }
  std::vector<absl::StatusOr<std::string>> values(
      rows.size(), absl::InternalError("not read"));
  const std::vector<TablePtr> tables = Tables();
  std::vector<std::vector<size_t>> by_table(tables.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    // A tombstone: no row, the empty value.
    if (stored_payloads[i].empty()) {
      values[i] = std::string();
      continue;
    }
    auto it = table_index_.find(rows[i].keyspace);
    if (it == table_index_.end()) {
      values[i] = absl::FailedPreconditionError(absl::StrCat(
          "keyspace ", rows[i].keyspace, " is not a table this node keeps"));
      continue;
    }
    by_table[it->second].push_back(i);
  }
  absl::MutexLock lock(&read_mu_);
  for (size_t t = 0; t < tables.size(); ++t) {
    if (by_table[t].empty()) continue;
    if (reader_ == nullptr || !reader_->healthy()) {
      ConnectOptions connect = options_.connect;
      connect.application_name = "tally reader";
      absl::StatusOr<std::unique_ptr<Connection>> c =
          Connection::Open(options_.conninfo, connect);
      if (!c.ok()) return c.status();
      reader_ = std::move(*c);
    }
    TALLY_RETURN_IF_ERROR(
        ReadTable(*tables[t], rows, stored_payloads, by_table[t], &values));
  }
  return values;
}

absl::Status PgBackend::ReadTable(
    const Table& table, absl::Span<const RowLocation> rows,
    absl::Span<const absl::string_view> payloads,
    absl::Span<const size_t> indexes,
    std::vector<absl::StatusOr<std::string>>* values) const {
  const TableSchema& schema = table.schema;
  const RowCodec codec = schema.codec();
  const size_t k = schema.key_columns();
  std::vector<std::vector<absl::string_view>> key_arrays(k);
  std::vector<Field> fields;
  std::vector<size_t> asked;
  // The keys' local bytes, when a key column is rewritten: one string per
  // key, sized up front so that the views into them stay put.
  std::vector<std::string> local_bytes(indexes.size());
  size_t next_local = 0;
  for (size_t i : indexes) {
    absl::Status s =
        codec.DecodeKey(rows[i].key, &local_bytes[next_local++], &fields);
    bool has_null = false;
    for (const Field& f : fields) has_null |= f.is_null();
    if (!s.ok() || has_null) {
      (*values)[i] = absl::DataLossError(
          absl::StrCat("a key of keyspace ", schema.name(),
                       " is not the table's key encoding: ",
                       s.ok() ? "a key column is NULL" : s.message()));
      continue;
    }
    for (size_t c = 0; c < k; ++c) key_arrays[c].push_back(fields[c].bytes());
    asked.push_back(i);
  }
  if (asked.empty()) return absl::OkStatus();
  std::vector<Param> params;
  for (size_t c = 0; c < k; ++c) {
    params.push_back(
        Param::Binary(BinaryArray(schema.columns()[c].type_oid, key_arrays[c]),
                      schema.columns()[c].array_type_oid));
  }
  absl::StatusOr<Result> r =
      reader_->ExecParams(table.read_sql, params, /*binary_results=*/true);
  if (!r.ok()) {
    return WithContext(r.status(),
                       absl::StrCat("reading rows of ", schema.name()));
  }
  struct Found {
    std::string value;
    RowToken token;
  };
  absl::flat_hash_map<std::string, Found> found;
  const int n = static_cast<int>(codec.columns());
  std::string key, value;
  std::vector<Field> row;
  for (int i = 0; i < r->rows(); ++i) {
    row.clear();
    for (int c = 0; c < n; ++c) {
      row.push_back(r->IsNull(i, c) ? Field::Null()
                                    : Field::Of(r->Value(i, c)));
    }
    TALLY_RETURN_IF_ERROR(codec.Encode(row, &key, &value));
    auto nullable = [&](int c) {
      return r->IsNull(i, c) ? Field::Null() : Field::Of(r->Value(i, c));
    };
    TALLY_ASSIGN_OR_RETURN(RowToken token,
                           RowToken::FromBinary(nullable(n), nullable(n + 1)));
    found[key] = Found{value, token};
  }
  for (size_t i : asked) {
    absl::StatusOr<RowToken> want = RowToken::Decode(payloads[i]);
    if (!want.ok()) {
      (*values)[i] = want.status();
      continue;
    }
    auto it = found.find(rows[i].key);
    if (it == found.end() || it->second.token != *want) {
      (*values)[i] =
          NotTheIndexedRow(schema.name(), *want,
                           it == found.end() ? nullptr : &it->second.token);
      continue;
    }
    (*values)[i] = it->second.value;
  }
  return absl::OkStatus();
}

}  // namespace pg
}  // namespace tally
